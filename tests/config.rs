//! Pipeline files: every shipped file plans; mistakes are reported with file, line and key.

use crate::util::*;
use std::path::Path;

fn validate(text: &str) -> (i32, String) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    let p = d.path().join("bad.toml");
    write(&p, text);
    let o = run(&["validate", p.to_str().unwrap()], d.path());
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

const HEAD: &str = "name = \"t\"\n[source]\ntype = \"local\"\ndir = \"v\"\n";

#[test]
fn every_shipped_pipeline_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let o = run(
                &["validate", p.to_str().unwrap()],
                Path::new(env!("CARGO_MANIFEST_DIR")),
            );
            assert!(
                o.status.success(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 1);
}

#[test]
fn unknown_key_in_stage_settings_names_line_and_key() {
    let (code, err) = validate(&format!(
        "{HEAD}\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\n[stages.compute]\nmode = \"uniform\"\ncuont = 16\n"
    ));
    assert_eq!(code, 2);
    assert!(err.contains("bad.toml:15:"), "{err}");
    assert!(
        err.contains("stages[1].compute.cuont") && err.contains("unknown field `cuont`"),
        "{err}"
    );
}

#[test]
fn wrong_type_names_line_and_key() {
    let (code, err) = validate(&format!(
        "{HEAD}\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = {{ count = \"sixteen\" }}\n"
    ));
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:13:")
            && err.contains("stages[1].compute.count")
            && err.contains("invalid type"),
        "{err}"
    );
}

#[test]
fn an_unknown_service_api_names_the_line_and_the_choices() {
    let (code, err) = validate(&format!(
        "{HEAD}\n[services.llm]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi = \"claude\"\n"
    ));
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:8:7:")
            && err.contains("unknown variant `claude`, expected `openai` or `gemini`"),
        "{err}"
    );
}

#[test]
fn batch_settings_are_checked_where_the_service_sets_them() {
    let stage = "[[stages]]\nid = \"relevance\"\ntype = \"relevance\"\ncompute = { service = \"llm\", model = \"m\", event = \"e\" }\n";
    let (code, err) = validate(&format!(
        "{HEAD}\n[services.llm]\nbase_url = \"http://127.0.0.1:9/v1/\"\nmode = \"bach\"\n{stage}"
    ));
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:8:8:")
            && err.contains("unknown variant `bach`, expected one of `live`, `batch`, `offline`"),
        "{err}"
    );
    let (code, err) = validate(&format!(
        "{HEAD}\n[services.llm]\nbase_url = \"http://127.0.0.1:9/v1/\"\nmode = \"batch\"\nbatch_max_requests = 0\n{stage}"
    ));
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:6:11:")
            && err.contains("key `services.llm`: batch_max_requests must be 1..=50000, got 0"),
        "{err}"
    );
}

#[test]
fn top_level_mistakes_name_the_line() {
    let (code, err) = validate(&format!("{HEAD}\n[output]\nflush_sec = 3\n"));
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:7:") && err.contains("unknown field `flush_sec`"),
        "{err}"
    );
    let (code, err) = validate("[source]\ntype = \"local\"\ndir = \"v\"\n");
    assert_eq!(code, 2);
    assert!(err.contains("missing field `name`"), "{err}");
    let (_, err) = validate(&format!("{HEAD}[[stages]]\ntype = \"probe\"\n"));
    assert!(
        err.contains("bad.toml:5:") && err.contains("missing field `id`"),
        "{err}"
    );
}

#[test]
fn stage_order_type_and_ids_are_checked() {
    let (code, err) = validate(&format!(
        "{HEAD}[[stages]]\nid = \"frames\"\ntype = \"frames\"\n"
    ));
    assert_eq!(code, 2);
    assert!(err.contains("needs `probe`"), "{err}");
    let (_, err) = validate(&format!(
        "{HEAD}[[stages]]\nid = \"x\"\ntype = \"teleport\"\n"
    ));
    assert!(
        err.contains("bad.toml:7:")
            && err.contains("unknown stage type \"teleport\"")
            && err.contains("probe, frames"),
        "{err}"
    );
    let (_, err) = validate(&format!(
        "{HEAD}[[stages]]\nid = \"p\"\ntype = \"probe\"\n[[stages]]\nid = \"p\"\ntype = \"probe\"\n"
    ));
    assert!(
        err.contains("bad.toml:9:") && err.contains("used twice"),
        "{err}"
    );
    let (_, err) = validate(&format!(
        "{HEAD}[[stages]]\nid = \"Probe-1\"\ntype = \"probe\"\n"
    ));
    assert!(err.contains("snake_case"), "{err}");
    let (_, err) = validate(&format!(
        "{HEAD}[[stages]]\nid = \"p\"\ntype = \"probe\"\nselect = {{ min = 1 }}\n"
    ));
    assert!(err.contains("has no `select`"), "{err}");
    let (_, err) = validate("name = \"t\"\n[source]\ntype = \"local\"\n");
    assert!(err.contains("exactly one of `dir`"), "{err}");
}

#[test]
fn help_teaches() {
    let o = run(&["--help"], Path::new("."));
    let h = String::from_utf8_lossy(&o.stdout);
    for w in ["run", "validate", "list-stages", "Exit codes", "resume"] {
        assert!(h.contains(w), "--help lacks {w}: {h}");
    }
    let o = run(&["list-stages"], Path::new("."));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("probe") && s.contains("frames") && s.contains("local"),
        "{s}"
    );
}

#[test]
fn language_settings_that_cannot_be_used_exit_2_at_their_key() {
    let stage = |compute: &str| {
        format!("{HEAD}\n[[stages]]\nid = \"lang\"\ntype = \"language\"\ncompute = {compute}\n")
    };
    let (code, err) = validate(&stage("{ languages = [\"en\", \"xx\"] }"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml:9:")
            && err.contains("languages")
            && err.contains("`xx` is not built in"),
        "{err}"
    );
    let (code, err) = validate(&stage("{ fields = [\"title\", \"comments\"] }"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown field `comments`") && err.contains("fields"),
        "{err}"
    );
    let (code, err) = validate(&stage("{ languages = [\"zh\"] }"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least two languages"), "{err}");
    let (code, err) = validate(&stage("{ min_chars = 20, max_chars = 5 }"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("max_chars"), "{err}");
    let (code, _) = validate(&stage("{ languages = [\"EN\", \"zh\"], min_chars = 10 }"));
    assert_eq!(code, 0);
}

/// One risk event per pipeline: a stage naming an event its query file does not, or two stages
/// naming different events, stop at the key (issue 58: a copied pipeline's leftover event).
#[test]
fn a_pipeline_judges_one_event() {
    let arson = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/arson.toml");
    let q = arson.to_str().unwrap();
    let services =
        "[services.openai]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"K\"\n";
    let relevance = |compute: &str| {
        format!(
            "[[stages]]\nid = \"relevance\"\ntype = \"relevance\"\ncompute = {{ service = \"openai\", model = \"m\", {compute} }}\n"
        )
    };
    let committee = |compute: &str| {
        format!(
            "[[stages]]\nid = \"probe\"\ntype = \"probe\"\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\n[[stages]]\nid = \"committee\"\ntype = \"committee\"\ncompute = {{ {compute}, members = [{{ service = \"openai\", model = \"m\" }}] }}\n"
        )
    };
    let (code, err) = validate(&format!(
        "{HEAD}{services}{}",
        relevance(&format!("queries = \"{q}\", event = \"a flood\""))
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("stages[0].compute.event") && err.contains("is not the event of"),
        "{err}"
    );
    let (code, err) = validate(&format!(
        "{HEAD}{services}{}{}",
        relevance(&format!("queries = \"{q}\"")),
        committee("event = \"a flood\"")
    ));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("stages[3].compute")
            && err.contains("\"committee\" judges the event \"a flood\""),
        "{err}"
    );
    let (code, err) = validate(&format!(
        "{HEAD}{services}{}{}",
        relevance(&format!("queries = \"{q}\"")),
        committee(&format!("queries = \"{q}\""))
    ));
    assert_eq!(code, 0, "{err}");
}

/// `--version` names the commit the binary was built from (issue 59: an image says which clone
/// it came from).
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = run(&["--version"], repo);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.starts_with(&format!("vidcurate {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo)
        .output()
        .expect("git: the suite runs in a clone");
    assert!(git.status.success());
    let commit = String::from_utf8_lossy(&git.stdout).trim().to_string();
    assert!(
        out.contains(&format!("(commit {commit})")),
        "{out} is not of {commit}"
    );
}

/// A stage that shows the model the video, with `max_images = 0`, stops at the key: it used to
/// plan, then reject every video at run time ("no sampled frames to show the model"), after the
/// earlier stages' calls were paid (issue 60: tried with a text-only model).
#[test]
fn a_vision_stage_without_images_stops_at_its_key() {
    let services =
        "[services.openai]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"K\"\n";
    let frames = "[[stages]]\nid = \"probe\"\ntype = \"probe\"\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\n";
    let root = env!("CARGO_MANIFEST_DIR");
    let ask = format!(
        "service = \"openai\", model = \"m\", prompt = \"{root}/pipelines/prompts/mvfndb-emotion.txt\", schema = \"{root}/pipelines/schemas/mvfndb-emotion.json\", "
    );
    let one = "service = \"openai\", model = \"m\", ".to_string();
    for (kind, extra) in [
        ("quality", one.clone()),
        ("caption", one.clone()),
        ("questions", one),
        ("ask", ask),
        (
            "committee",
            "event = \"arson\", members = [{ service = \"openai\", model = \"m\" }], ".into(),
        ),
    ] {
        let stage = |n: u32| {
            format!(
                "{HEAD}{services}{frames}[[stages]]\nid = \"s\"\ntype = \"{kind}\"\ncompute = {{ {extra}max_images = {n} }}\n"
            )
        };
        let (code, err) = validate(&stage(0));
        assert_eq!(code, 2, "{kind}: {err}");
        assert!(
            err.contains("bad.toml:17:") && err.contains("stages[2].compute.max_images"),
            "{kind}: {err}"
        );
        assert!(
            err.contains("max_images must be at least 1"),
            "{kind}: {err}"
        );
        let (code, err) = validate(&stage(1));
        assert_eq!(code, 0, "{kind}: {err}");
    }
}

/// Every key of a shipped pipeline that names a file (a query, task, taxonomy or prompt file),
/// pointed at a file that is not there: exit 2 naming that key and the path it tried (issue 67:
/// a stage's missing `queries` was reported at `stages[0].type`, without the path).
#[test]
fn a_missing_file_is_named_with_the_key_that_names_it() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    // Every string that names an existing file, with its key; values made absolute so the
    // pipeline can be validated from the temporary folder.
    fn files(v: &mut toml::Value, key: String, base: &Path, out: &mut Vec<String>) {
        match v {
            // Files the plan reads (a program such as `yt_dlp` is looked for when it runs).
            toml::Value::String(s)
                if base.join(&*s).is_file()
                    && s.contains('/')
                    && [".toml", ".json", ".jsonl", ".csv", ".txt", ".md"]
                        .iter()
                        .any(|x| s.ends_with(x)) =>
            {
                *s = base.join(&*s).to_string_lossy().into_owned();
                out.push(key);
            }
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    let key = if key.is_empty() {
                        k.clone()
                    } else {
                        format!("{key}.{k}")
                    };
                    files(v, key, base, out);
                }
            }
            toml::Value::Array(a) => {
                for (i, v) in a.iter_mut().enumerate() {
                    files(v, format!("{key}[{i}]"), base, out);
                }
            }
            _ => {}
        }
    }
    let (mut tried, mut bad) = (0, vec![]);
    for e in std::fs::read_dir(repo.join("pipelines")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let mut doc: toml::Value = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let mut keys = vec![];
        files(&mut doc, String::new(), &repo.join("pipelines"), &mut keys);
        for key in keys {
            let mut broken = doc.clone();
            let missing = d.path().join("gone").join(format!("{tried}.toml"));
            let mut at = &mut broken;
            for part in key.split('.') {
                let (name, index) = match part.split_once('[') {
                    Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
                    None => (part, None),
                };
                at = at.get_mut(name).unwrap();
                if let Some(i) = index {
                    at = at.get_mut(i).unwrap();
                }
            }
            *at = toml::Value::String(missing.to_string_lossy().into_owned());
            let file = d.path().join(format!("p{tried}.toml"));
            write(&file, &toml::to_string(&broken).unwrap());
            let o = run(&["validate", file.to_str().unwrap()], d.path());
            let err = String::from_utf8_lossy(&o.stderr).to_string();
            let named =
                err.contains(&format!("key `{key}`")) && err.contains(&*missing.to_string_lossy());
            if o.status.code() != Some(2) || !named {
                bad.push(format!("{} {key}: {err}", p.display()));
            }
            tried += 1;
        }
    }
    assert!(
        tried >= 10,
        "only {tried} file keys in the shipped pipelines"
    );
    assert!(
        bad.is_empty(),
        "{} of {tried}:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
