//! The questions stage: three-level items from a taxonomy, drafted over structured output by a
//! fake OpenAI server replaying the recorded `json_schema` answer body, checked, repaired once,
//! rejected per item, shuffled by item id; and taxonomy files that cannot be used.

use crate::caption::{
    caption_pipeline, clips, first_width, gemini_structured, openai_fast, openai_structured,
};
use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{err, llm_fixture, prompt_of, run_with_key};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

fn item(level: &str, question: &str, options: [&str; 4], answer: &str, note: &str) -> Value {
    json!({
        "level": level, "question": question, "options": options, "answer": answer,
        "evidence": {"frames": [0, 1], "start_secs": 0.1, "end_secs": 0.9, "transcript": "speaks here"},
        "rationale": "Shown in the first frames.", "context_note": note,
    })
}

fn observable() -> Value {
    item(
        "observable_evidence",
        "What is shown on screen throughout the clip?",
        [
            "Coloured test bars",
            "A crowd in a street",
            "A person at a desk",
            "A map of a country",
        ],
        "A",
        "",
    )
}

fn internal(options: usize) -> Value {
    let mut v = item(
        "clip_internal_meaning",
        "What does the clip, taken as a whole, present itself as?",
        [
            "A signal for testing screens",
            "A news report on a riot",
            "An advertisement for a drink",
            "A lecture on road safety",
        ],
        "A",
        "",
    );
    v["options"].as_array_mut().unwrap().truncate(options);
    v
}

fn beyond(note: &str) -> Value {
    item(
        "beyond_clip_reasoning",
        "Why would broadcasters have aired such a picture between programmes?",
        [
            "To let viewers tune their sets",
            "To announce a national emergency",
            "To mark a religious holiday",
            "To advertise a football match",
        ],
        "A",
        note,
    )
}

fn items(list: Vec<Value>) -> String {
    json!({ "items": list }).to_string()
}

#[test]
fn items_are_checked_repaired_rejected_one_by_one_and_shuffled() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    clips(dir.path(), &[("alpha", "160x90"), ("beta", "192x108")]);
    let seen: Arc<Mutex<HashMap<(u32, String), usize>>> = Arc::default();
    let prompts: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = prompts.clone();
    let server = FakeServer::start(move |r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let schema = v["response_format"]["json_schema"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let images: Vec<&str> = v["messages"][0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["image_url"]["url"].as_str())
            .collect();
        let width = first_width(&images);
        let n = {
            let mut s = seen.lock().unwrap();
            let c = s.entry((width, schema.clone())).or_default();
            *c += 1;
            *c
        };
        if schema == "caption" {
            return openai_structured(
                &json!({"caption": format!("Colour bars {width} wide.")}).to_string(),
            );
        }
        assert_eq!(schema, "question_items");
        let levels = &v["response_format"]["json_schema"]["schema"]["properties"]["items"]["items"]
            ["properties"]["level"]["enum"];
        assert_eq!(
            levels,
            &json!([
                "observable_evidence",
                "clip_internal_meaning",
                "beyond_clip_reasoning"
            ])
        );
        let prompt = prompt_of(r);
        log.lock().unwrap().push(prompt.clone());
        match (width, n) {
            (160, _) => openai_structured(&items(vec![
                observable(),
                internal(4),
                beyond("Test cards were broadcast so viewers could adjust their receivers."),
            ])),
            // Three options, and a beyond-clip item without its context note.
            (192, 1) => openai_structured(&items(vec![observable(), internal(3), beyond("")])),
            // The repair fixes the options but still gives no note.
            (192, _) => openai_structured(&items(vec![observable(), internal(4), beyond("")])),
            other => panic!("unexpected {other:?}"),
        }
    });
    let services = openai_fast(&server);
    let p = caption_pipeline(
        dir.path(),
        &services,
        "compute = { service = \"openai\", model = \"gpt-4o-mini\", max_images = 4 }\n\n[[stages]]\nid = \"questions\"\ntype = \"questions\"\ncompute = { service = \"openai\", model = \"gpt-4o-mini\", max_images = 4 }\n",
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));

    let first = prompts.lock().unwrap()[0].clone();
    for part in [
        "Boundary with `clip_internal_meaning`",
        "well-informed annotator",
        "exactly 1 item(s) for each level",
        "exactly 4 answer options",
        "Caption: Colour bars",
        "speaks here",
        "frame 0 at",
    ] {
        assert!(first.contains(part), "{part} not in the prompt:\n{first}");
    }
    let repair = prompts
        .lock()
        .unwrap()
        .iter()
        .find(|p| p.contains("had these problems"))
        .cloned()
        .expect("a repair request");
    assert!(
        repair.contains("3 options, not 4") && repair.contains("context_note"),
        "{repair}"
    );

    let rows = table_rows_file_all(&out.join("questions"));
    assert_eq!(rows.len(), 6, "{rows:?}");
    let kept: Vec<_> = rows.iter().filter(|r| r["kept"] == "true").collect();
    assert_eq!(kept.len(), 5);
    let rejected: Vec<_> = rows.iter().filter(|r| r["kept"] == "false").collect();
    assert_eq!(rejected[0]["level"], "beyond_clip_reasoning");
    assert!(
        rejected[0]["reject_reason"].contains("context_note"),
        "{:?}",
        rejected[0]
    );
    assert_eq!(rejected[0]["attempts"], "2");
    assert_eq!(rejected[0]["reject_codes"], "[missing_context]");
    // The question table: per level, and the rule the rejected item broke.
    let t = question_table(dir.path(), &out, &[]);
    assert_eq!(
        cells(&t, "beyond_clip_reasoning")[..5],
        ["beyond_clip_reasoning", "2", "2", "1", "1"],
        "{t}"
    );
    assert_eq!(cells(&t, "all")[..5], ["all", "2", "6", "5", "1"], "{t}");
    assert!(
        t.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == ["missing_context", "1", "(beyond_clip_reasoning", "1)"]),
        "{t}"
    );
    assert!(t.contains("correct letters of 5 kept items: "), "{t}");
    // Shuffled: the correct text is at the stored letter, and the permutation is stored.
    let correct = [
        "Coloured test bars",
        "A signal for testing screens",
        "To let viewers tune their sets",
    ];
    for r in &kept {
        // Arrow's display of a list: "[a, b, c]" (no option here has a comma).
        let list = |s: &str| -> Vec<String> {
            s.trim_matches(|c| c == '[' || c == ']')
                .split(", ")
                .map(String::from)
                .collect()
        };
        let options = list(&r["options"]);
        let perm = list(&r["permutation"]);
        let at = (r["answer"].as_bytes()[0] - b'A') as usize;
        assert!(correct.contains(&options[at].as_str()), "{r:?}");
        assert_eq!(perm.len(), 4);
        assert_eq!(r["item_id"].len(), 16);
    }
    let calls = server.requests().len();
    assert_eq!(
        calls,
        2 + 3,
        "two captions, alpha's items once, beta's twice"
    );
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(server.requests().len(), calls, "a rerun makes no call");

    // The same items as a task file (the shipped levels task: the same taxonomy and prompt):
    // the same fingerprint, so nothing is drafted again and the table stays as it is.
    let task =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks/harmvideobench/levels.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    let with_task = text.replace(
        "id = \"questions\"\ntype = \"questions\"\ncompute = { service = \"openai\", model = \"gpt-4o-mini\", max_images = 4 }",
        &format!("id = \"questions\"\ntype = \"questions\"\ncompute = {{ service = \"openai\", model = \"gpt-4o-mini\", max_images = 4, task = {:?} }}", task.to_str().unwrap()),
    );
    assert_ne!(text, with_task);
    std::fs::write(&p, with_task).unwrap();
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        server.requests().len(),
        calls,
        "the task file drafts nothing again"
    );
    assert_eq!(table_rows_file_all(&out.join("questions")), rows);
}

#[test]
fn taxonomy_files_that_cannot_be_used_exit_2_at_the_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("p.toml"),
        "name = \"t\"\n[services.openai]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n\n[source]\ntype = \"local\"\ndir = \"v\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\n\n[[stages]]\nid = \"questions\"\ntype = \"questions\"\ncompute = { service = \"openai\", model = \"m\", taxonomy = \"tax.toml\" }\n",
    );
    std::fs::create_dir_all(dir.path().join("v")).unwrap();
    let cases = [
        (
            "name = \"x\"\n[[levels]]\nname = \"a\"\ndefinition = \"d\"\n[[levels]]\nname = \"a\"\ndefinition = \"e\"\n",
            "tax.toml:6",
            "already levels[0]",
        ),
        (
            "name = \"x\"\n[[levels]]\nname = \"a\"\ndefinition = \"d\"\nhint = \"h\"\n",
            "tax.toml:5",
            "hint",
        ),
        (
            "name = \"x\"\n[[levels]]\nname = \"a\"\n",
            "tax.toml:2",
            "levels[0].definition",
        ),
    ];
    for (text, at, what) in cases {
        write(&dir.path().join("tax.toml"), text);
        let o = run(
            &["validate", dir.path().join("p.toml").to_str().unwrap()],
            dir.path(),
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(at) && e.contains(what),
            "{at} / {what} not in {e}"
        );
    }
}

/// A task drafted per taxonomy level belongs to the questions stage, and only there; the task
/// file's taxonomy must be a single-choice drafted task's.
#[test]
fn a_levels_task_is_built_by_the_questions_stage_only() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks");
    let levels = tasks.join("harmvideobench/levels.toml");
    let kep = tasks.join("mvfndb/kep.toml");
    std::fs::create_dir_all(dir.path().join("v")).unwrap();
    let head = "name = \"t\"\n[services.openai]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n\n[source]\ntype = \"local\"\ndir = \"v\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\n\n[[stages]]\n";
    let m = "drafter = { service = \"openai\", model = \"m\" }, refiner = { service = \"openai\", model = \"m\" }, judge = { service = \"openai\", model = \"m\" }";
    let cases = [
        (
            format!(
                "id = \"q\"\ntype = \"questions\"\ncompute = {{ service = \"openai\", model = \"m\", task = {levels:?}, taxonomy = \"x.toml\" }}\n"
            ),
            "p.toml:21",
            "not both",
        ),
        (
            format!(
                "id = \"q\"\ntype = \"questions\"\ncompute = {{ service = \"openai\", model = \"m\", task = {kep:?} }}\n"
            ),
            "p.toml:21",
            "task kep is not drafted per taxonomy level",
        ),
        (
            format!("id = \"i\"\ntype = \"items\"\ncompute = {{ task = {levels:?}, {m} }}\n"),
            "p.toml:21",
            "a `questions` stage builds it",
        ),
    ];
    for (stage, at, what) in cases {
        write(&dir.path().join("p.toml"), &format!("{head}{stage}"));
        let o = run(
            &["validate", dir.path().join("p.toml").to_str().unwrap()],
            dir.path(),
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(at) && e.contains(what),
            "{at} / {what} not in {e}"
        );
    }
    // A taxonomy on a task that is not single choice with drafted options.
    let text = std::fs::read_to_string(&levels)
        .unwrap()
        .replace("format = \"single_choice\"", "format = \"multiple_choice\"")
        .replace(
            "\"../../taxonomies/",
            &format!("\"{}/", tasks.join("../taxonomies").display()),
        )
        .replace(
            "prompts/draft-levels.txt",
            tasks
                .join("harmvideobench/prompts/draft-levels.txt")
                .to_str()
                .unwrap(),
        );
    write(&dir.path().join("mc.toml"), &text);
    let o = run(
        &["tasks", dir.path().join("mc.toml").to_str().unwrap()],
        dir.path(),
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("mc.toml:15") && e.contains("taxonomy") && e.contains("single_choice"),
        "{e}"
    );
}

/// `vidcurate rethreshold RUN --set S …` (one --set per entry): the summary's lines of `stage`.
fn rethreshold_lines(
    cwd: &std::path::Path,
    run_dir: &std::path::Path,
    sets: &[&str],
    stage: &str,
) -> Vec<String> {
    with_sets("rethreshold", cwd, run_dir, sets)
        .lines()
        .filter(|l| l.starts_with(stage))
        .map(String::from)
        .collect()
}

/// `vidcurate COMMAND RUN --set …`'s output; the command must succeed.
fn with_sets(
    command: &str,
    cwd: &std::path::Path,
    run_dir: &std::path::Path,
    sets: &[&str],
) -> String {
    let mut args = vec![command, run_dir.to_str().unwrap()];
    for s in sets {
        args.extend(["--set", s]);
    }
    let o = run(&args, cwd);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{text}{}", err(&o));
    text
}

/// `vidcurate questions RUN [--set …]`'s output.
fn question_table(cwd: &std::path::Path, run_dir: &std::path::Path, sets: &[&str]) -> String {
    with_sets("questions", cwd, run_dir, sets)
}

/// The cells of the table row that starts with `first`.
fn cells(table: &str, first: &str) -> Vec<String> {
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("no row {first} in\n{table}"));
    row.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

/// The last field of a line (a count).
fn last(line: &str) -> &str {
    line.split_whitespace().last().unwrap_or("")
}

/// The text of the option a blind prompt shows for `text` ("B. Coloured test bars" → "B").
fn shown_letter(prompt: &str, text: &str) -> String {
    prompt
        .lines()
        .find_map(|l| l.strip_suffix(text).and_then(|h| h.strip_suffix(". ")))
        .unwrap_or_else(|| panic!("{text} not shown in {prompt}"))
        .to_string()
}

#[test]
fn blind_and_level_checks_flag_items_and_rethreshold_drops_without_calls() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    clips(dir.path(), &[("alpha", "160x90")]);
    let server = FakeServer::start(move |r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let prompt = prompt_of(r);
        match v["response_format"]["json_schema"]["name"].as_str() {
            Some("caption") => openai_structured(r#"{"caption": "Colour bars."}"#),
            Some("question_items") => openai_structured(&items(vec![
                observable(),
                internal(4),
                beyond("Test cards let viewers tune their sets."),
            ])),
            Some("item_level") => {
                // The observable item's check is refused: that item alone goes unchecked.
                if prompt.contains("shown on screen") {
                    return Response::json(
                        200,
                        llm_fixture("openai/chat_completion_json_schema_refusal.json"),
                    );
                }
                // Every item is checked as beyond-clip reasoning, whatever it asks.
                let level = "beyond_clip_reasoning";
                openai_structured(&json!({ "level": level }).to_string())
            }
            None => {
                assert!(
                    prompt.starts_with(
                        "Answer this multiple-choice question about a video you cannot see."
                    ),
                    "{prompt}"
                );
                assert!(
                    v["messages"][0]["content"].is_string(),
                    "no images in a blind call"
                );
                let seed = v["seed"].as_u64().expect("each sample has its seed");
                let answer = if prompt.contains("shown on screen") {
                    shown_letter(&prompt, "Coloured test bars")
                } else if prompt.contains("present itself as") {
                    let right = shown_letter(&prompt, "A signal for testing screens");
                    if seed == 0 {
                        right
                    } else if right == "A" {
                        "B".into()
                    } else {
                        "A".into()
                    }
                } else if seed == 2 {
                    // A refusal is one wrong sample, not a rejected video.
                    return Response::json(200, llm_fixture("openai/chat_completion_refusal.json"));
                } else {
                    "I cannot tell without the video.".into()
                };
                openai_structured(&answer)
            }
            other => panic!("unexpected schema {other:?}"),
        }
    });
    let services = openai_fast(&server);
    let svc = "service = \"openai\", model = \"gpt-4o-mini\"";
    let p = caption_pipeline(
        dir.path(),
        &services,
        &format!(
            "compute = {{ {svc}, max_images = 4 }}\n\n[[stages]]\nid = \"questions\"\ntype = \"questions\"\ncompute = {{ {svc}, max_images = 4 }}\n\n[[stages]]\nid = \"blind\"\ntype = \"blind\"\ncompute = {{ {svc}, samples = 3 }}\n\n[[stages]]\nid = \"level_check\"\ntype = \"level_check\"\ncompute = {{ {svc} }}\n"
        ),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    let blind = table_rows_file_all(&out.join("blind"));
    assert_eq!(blind.len(), 3, "{blind:?}");
    let by_level: HashMap<&str, &std::collections::BTreeMap<String, String>> =
        blind.iter().map(|r| (r["level"].as_str(), r)).collect();
    let obs = by_level["observable_evidence"];
    assert_eq!(
        (obs["correct"].as_str(), obs["flagged"].as_str()),
        ("3", "true")
    );
    let int = by_level["clip_internal_meaning"];
    assert_eq!(
        (int["correct"].as_str(), int["flagged"].as_str()),
        ("1", "false")
    );
    let bey = by_level["beyond_clip_reasoning"];
    assert_eq!(
        (
            bey["unparsed"].as_str(),
            bey["refused"].as_str(),
            bey["answers"].as_str(),
            bey["flagged"].as_str()
        ),
        ("2", "1", "-,-,!", "false")
    );
    let levels = table_rows_file_all(&out.join("level_check"));
    assert_eq!(
        levels.len(),
        3,
        "every item is checked or says why not: {levels:?}"
    );
    let disagree: Vec<_> = levels.iter().filter(|r| r["agree"] == "false").collect();
    assert_eq!(disagree.len(), 2, "{levels:?}");
    let refused = disagree
        .iter()
        .find(|r| r["drafted_level"] == "observable_evidence")
        .expect("the refused item");
    assert_eq!(refused["checked_level"], "");
    assert!(refused["problem"].starts_with("refused: "), "{refused:?}");
    let moved = disagree
        .iter()
        .find(|r| r["drafted_level"] == "clip_internal_meaning")
        .expect("the reassigned item");
    assert_eq!(moved["checked_level"], "beyond_clip_reasoning");
    assert_eq!(moved["problem"], "");
    let calls = server.requests().len();
    assert_eq!(calls, 1 + 1 + 3 * 3 + 3);

    // The table: one flagged (majority), one on another level, one not read.
    let t = question_table(dir.path(), &out, &[]);
    let all = cells(&t, "all");
    assert_eq!(all[..5], ["all", "1", "3", "3", "0"], "{t}");
    assert_eq!(
        all[all.len() - 3..],
        ["1 (33.3 %)", "1 (50.0 %)", "1"],
        "{t}"
    );
    let t = question_table(dir.path(), &out, &["blind.flag_at=1"]);
    assert_eq!(
        cells(&t, "all")[cells(&t, "all").len() - 3],
        "2 (66.7 %)",
        "{t}"
    );
    assert!(
        question_table(dir.path(), &out, &[]).contains("1 (33.3 %)"),
        "the run's own table is unchanged"
    );

    // Flag at one right sample and allow one flagged item: two are flagged, the video drops.
    let b = rethreshold_lines(
        dir.path(),
        &out,
        &["blind.flag_at=1", "blind.max_flagged=1"],
        "blind",
    );
    assert_eq!((last(&b[0]), last(&b[1])), ("1", "0"), "{b:?}");
    assert_eq!(server.requests().len(), calls, "rethreshold makes no call");
}

#[test]
fn questions_over_gemini_mark_near_duplicates_and_report_letter_balance() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    clips(dir.path(), &[("gamma", "160x90"), ("delta", "192x108")]);
    let server = FakeServer::start(move |r: &Request| {
        assert!(
            r.path
                .starts_with("/v1beta/models/gemini-2.5-flash:generateContent"),
            "{}",
            r.path
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let g = &v["generationConfig"];
        assert_eq!(g["responseMimeType"], "application/json");
        let props = &g["responseJsonSchema"]["properties"];
        if props.get("caption").is_some() {
            return gemini_structured(r#"{"caption": "Colour bars."}"#);
        }
        assert!(props.get("items").is_some(), "{g}");
        let text = v["contents"][0]["parts"][0]["text"].as_str().unwrap();
        assert!(text.contains("exactly 2 item(s) for each level"), "{text}");
        let width = {
            let images: Vec<&str> = v["contents"][0]["parts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["inline_data"]["data"].as_str())
                .collect();
            assert!(!images.is_empty());
            use base64::Engine;
            let jpeg = base64::engine::general_purpose::STANDARD
                .decode(images[0])
                .unwrap();
            image::load_from_memory(&jpeg).unwrap().width()
        };
        let mut second = observable();
        second["question"] = json!(if width == 160 {
            // The first observable question again, reworded by one word: a near-duplicate.
            "What is shown on the screen throughout the clip?"
        } else {
            "Which colour is the leftmost bar?"
        });
        second["options"] = json!(["White", "Black", "Blue", "Green"]);
        let mut internal2 = internal(4);
        internal2["question"] = json!("Who is the clip meant for, judging by its content?");
        let mut beyond2 = beyond("Test cards were shown between programmes.");
        beyond2["question"] = json!("What did the picture tell viewers about the broadcast day?");
        gemini_structured(&items(vec![
            observable(),
            second,
            internal(4),
            internal2,
            beyond("Test cards were broadcast so viewers could adjust their receivers."),
            beyond2,
        ]))
    });
    let services = format!(
        "[services.gemini]\nbase_url = \"{}v1beta/\"\napi = \"gemini\"\napi_key_env = \"VIDCURATE_TEST_GEMINI_KEY\"\n",
        server.url()
    );
    let svc = "service = \"gemini\", model = \"gemini-2.5-flash\"";
    let p = caption_pipeline(
        dir.path(),
        &services,
        &format!(
            "compute = {{ {svc}, max_images = 2 }}\n\n[[stages]]\nid = \"questions\"\ntype = \"questions\"\ncompute = {{ {svc}, max_images = 2, per_level = 2 }}\n"
        ),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), err(&o));
    assert!(o.status.success(), "{text}");
    // Every item is kept; the letters of the 12 are reported with their balance test.
    assert!(
        text.contains("questions: correct letters of 12 kept items: A ")
            && text.contains("chi-squared against equal shares: p = ")
            && text.contains("; 1 near-duplicate questions"),
        "{text}"
    );
    let rows = table_rows_file_all(&out.join("questions"));
    assert_eq!(rows.len(), 12, "{rows:?}");
    assert!(rows.iter().all(|r| r["kept"] == "true"), "{rows:?}");
    let dups: Vec<_> = rows
        .iter()
        .filter(|r| r["near_duplicate"] == "true")
        .collect();
    assert_eq!(dups.len(), 1, "{rows:?}");
    let dup = dups[0];
    assert_eq!(
        dup["question"],
        "What is shown on the screen throughout the clip?"
    );
    let original = rows
        .iter()
        .find(|r| r["item_id"] == dup["nearest_item"])
        .expect("the nearest item is one of the video's");
    assert_eq!(
        original["question"],
        "What is shown on screen throughout the clip?"
    );
    let sim: f64 = dup["nearest_similarity"].parse().unwrap();
    assert!((0.8..1.0).contains(&sim), "{sim}");
    // The other video's items are all unlike each other.
    let others: Vec<f64> = rows
        .iter()
        .filter(|r| r["near_duplicate"] == "false" && !r["nearest_item"].is_empty())
        .map(|r| r["nearest_similarity"].parse().unwrap())
        .collect();
    assert_eq!(others.len(), 12 - 2 - 1, "{rows:?}");
    assert!(others.iter().all(|&s| s < 0.8), "{others:?}");
    let calls = server.requests().len();
    assert_eq!(calls, 2 + 2);

    // No near-duplicate allowed: the video with one drops, from the stored similarities.
    let q = rethreshold_lines(
        dir.path(),
        &out,
        &["questions.max_duplicates=0"],
        "questions",
    );
    assert_eq!((last(&q[0]), last(&q[1])), ("2", "1"), "{q:?}");
    // A stricter similarity makes it no duplicate: both go on.
    let q = rethreshold_lines(
        dir.path(),
        &out,
        &["questions.max_duplicates=0", "questions.duplicate_at=0.99"],
        "questions",
    );
    assert_eq!(last(&q[1]), "2", "{q:?}");
    assert_eq!(server.requests().len(), calls, "rethreshold makes no call");
}

/// A model's raw answer naming option `k` of the options `shown`, in one of the shapes models
/// write (chosen by `shape`), or one that names none.
fn answer_shape(shape: u64, k: usize, shown: &[String]) -> String {
    let l = (b'A' + k as u8) as char;
    match shape % 20 {
        0..=2 => l.to_string(),
        3..=4 => format!("({})", l.to_ascii_lowercase()),
        5..=6 => format!("{}.", l.to_ascii_lowercase()),
        7..=8 => format!("Answer: {}", l.to_ascii_lowercase()),
        9..=11 => format!("The answer is {l} because it is shown."),
        12..=14 => format!("答案：{l}"),
        15..=17 => shown[k].clone(),
        18 => String::new(),
        _ => "I don't know".into(),
    }
}

/// A step of a 64-bit LCG (Knuth's MMIX constants): the test's random predictions.
fn lcg(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s >> 33
}

fn close(a: &Value, b: &Value, what: &str) {
    let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
    assert!((x - y).abs() < 1e-9, "{what}: vidcurate {x}, numpy {y}");
}

/// A `Scores` of `evaluate --json` against check_questions.py's.
fn same_scores(ours: &Value, theirs: &Value, what: &str) {
    close(
        &ours["macro_avg"],
        &theirs["macro_avg"],
        &format!("{what} macro"),
    );
    close(
        &ours["macro_se"],
        &theirs["macro_se"],
        &format!("{what} macro se"),
    );
    for k in ["accuracy", "se"] {
        close(
            &ours["micro"][k],
            &theirs["micro"][k],
            &format!("{what} micro {k}"),
        );
    }
    assert_eq!(ours["micro"]["n"], theirs["micro"]["n"], "{what}");
    let levels = theirs["levels"].as_object().unwrap();
    assert_eq!(
        ours["levels"].as_object().unwrap().len(),
        levels.len(),
        "{what}"
    );
    for (l, t) in levels {
        for k in ["accuracy", "se"] {
            close(&ours["levels"][l][k], &t[k], &format!("{what} {l} {k}"));
        }
        assert_eq!(ours["levels"][l]["n"], t["n"], "{what} {l}");
    }
}

/// A run of `n` clips (2 to 6; the last two speak Chinese) through caption, questions (three
/// items a video), blind (2 samples: only the observable item's first is right) and language,
/// over a fake OpenAI server. Returns the server (keep it alive) and the run directory.
pub(crate) fn question_run(dir: &std::path::Path, n: usize) -> (FakeServer, std::path::PathBuf) {
    let names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
    let sizes = [
        "160x90", "192x108", "224x126", "256x144", "288x162", "320x180",
    ];
    let pairs: Vec<(&str, &str)> = names.iter().copied().zip(sizes).take(n).collect();
    clips(dir, &pairs);
    // The last two videos speak Chinese.
    let zh = [
        "大家好，今天给大家介绍一下这家店的促销活动，所有商品都是正品",
        "今天我们来到成都，带大家去吃最地道的火锅，这家店已经开了二十多年了",
    ];
    for (name, text) in names[n - 2..n].iter().zip(zh) {
        std::fs::remove_file(dir.join(format!("v/{name}.en.json3"))).unwrap();
        write(
            &dir.join(format!("v/{name}.zh.json3")),
            &format!(
                r#"{{"events":[{{"tStartMs":100,"dDurationMs":800,"segs":[{{"utf8":"{text}"}}]}}]}}"#
            ),
        );
    }
    let server = FakeServer::start(move |r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let prompt = prompt_of(r);
        match v["response_format"]["json_schema"]["name"].as_str() {
            Some("caption") => openai_structured(r#"{"caption": "Colour bars."}"#),
            // Asked of another model (a redraft), the internal item is asked another way.
            Some("question_items") if v["model"] == "gpt-4o" => {
                let mut redrafted = internal(4);
                redrafted["question"] = json!("What is this clip, as a whole, made to be?");
                openai_structured(&items(vec![
                    observable(),
                    redrafted,
                    beyond("Test cards let viewers tune their sets."),
                ]))
            }
            Some("question_items") => openai_structured(&items(vec![
                observable(),
                internal(4),
                beyond("Test cards let viewers tune their sets."),
            ])),
            None => {
                // Blind: the first sample of the observable item guesses right.
                let right = v["seed"].as_u64() == Some(0) && prompt.contains("shown on screen");
                openai_structured(&if right {
                    shown_letter(&prompt, "Coloured test bars")
                } else {
                    "I cannot tell without the video.".into()
                })
            }
            other => panic!("unexpected schema {other:?}"),
        }
    });
    let services = openai_fast(&server);
    let svc = "service = \"openai\", model = \"gpt-4o-mini\"";
    let p = caption_pipeline(
        dir,
        &services,
        &format!(
            "compute = {{ {svc}, max_images = 4 }}\n\n[[stages]]\nid = \"questions\"\ntype = \"questions\"\ncompute = {{ {svc}, max_images = 4 }}\n\n[[stages]]\nid = \"blind\"\ntype = \"blind\"\ncompute = {{ {svc}, samples = 2 }}\n\n[[stages]]\nid = \"lang\"\ntype = \"language\"\n"
        ),
    );
    let out = dir.join("run");
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    (server, out)
}

/// `split --ratios 50/25/25` of a run, then `release --out REL` with `extra` flags; both must
/// succeed. Returns the release's output (its warnings are on stderr).
pub(crate) fn split_and_release(
    run_dir: &Path,
    rel: &Path,
    cwd: &Path,
    extra: &[&str],
) -> std::process::Output {
    split_and_release_at(run_dir, rel, cwd, "50/25/25", extra)
}

/// `split_and_release` with the split's `--ratios` (train/validation/test).
pub(crate) fn split_and_release_at(
    run_dir: &Path,
    rel: &Path,
    cwd: &Path,
    ratios: &str,
    extra: &[&str],
) -> std::process::Output {
    let o = run(
        &["split", run_dir.to_str().unwrap(), "--ratios", ratios],
        cwd,
    );
    assert!(o.status.success(), "{}", err(&o));
    let mut args = vec![
        "release",
        run_dir.to_str().unwrap(),
        "--out",
        rel.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args, cwd);
    assert!(o.status.success(), "{}", err(&o));
    o
}

#[test]
fn a_question_release_loads_with_datasets_and_scores_as_numpy_does() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let (_server, out) = question_run(dir.path(), 6);
    let rel = dir.path().join("release");
    // Half the videos in test, so that its scores have standard errors over three videos.
    split_and_release_at(&out, &rel, dir.path(), "34/16/50", &["--frames", "none"]);
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(card.contains("- config_name: questions\n"), "{card}");
    assert!(card.contains("## Questions"), "{card}");
    assert!(
        card.contains("| observable_evidence | 6 |"),
        "every video's observable item: {card}"
    );

    // The items of each split, from the rows' own `split` column.
    let rows = table_rows_file_all(&rel.join("questions"));
    let test_items: HashSet<String> = rows
        .iter()
        .filter(|r| r["split"] == "test")
        .map(|r| r["item_id"].clone())
        .collect();
    assert_eq!(test_items.len(), 9, "three test videos of three items");

    // The rotated variants a model answers for CircularEval: every item of the test split once
    // per rotation by default, of every split with --split all.
    let rot = dir.path().join("rotations.jsonl");
    let rotations = |extra: &[&str]| -> (String, Vec<Value>) {
        let mut args = vec![
            "evaluate",
            rel.to_str().unwrap(),
            "--rotations-out",
            rot.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = run(&args, dir.path());
        assert!(o.status.success(), "{}", err(&o));
        let lines = std::fs::read_to_string(&rot)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (String::from_utf8_lossy(&o.stdout).into_owned(), lines)
    };
    let (said, variants) = rotations(&[]);
    assert!(
        said.starts_with(
            "split: test (9 of 18 items; --split all for every split)\n36 rotated items"
        ),
        "{said}"
    );
    assert_eq!(variants.len(), 9 * 4);
    assert!(
        variants
            .iter()
            .all(|v| test_items.contains(v["item_id"].as_str().unwrap()))
    );
    let (_, variants) = rotations(&["--split", "all"]);
    assert_eq!(variants.len(), 18 * 4, "18 items of 4 options");
    assert!(variants.iter().all(|v| v.get("answer").is_none()));

    // Random answers in every shape; one item never answered, one rotation of another missing.
    let (skip_item, skip_rot) = (
        variants[0]["item_id"].as_str().unwrap().to_string(),
        (variants[8]["item_id"].as_str().unwrap().to_string(), 2),
    );
    let answers: HashMap<String, u64> = table_rows_file_all(&rel.join("questions"))
        .into_iter()
        .map(|r| {
            (
                r["item_id"].clone(),
                (r["answer"].as_bytes()[0] - b'A') as u64,
            )
        })
        .collect();
    let mut seed = 7u64;
    let mut csv = String::from("item_id,rotation,prediction\n");
    for v in &variants {
        let id = v["item_id"].as_str().unwrap();
        let r = v["rotation"].as_u64().unwrap();
        if id == skip_item || (id == skip_rot.0 && r == skip_rot.1) {
            continue;
        }
        let shown: Vec<String> = serde_json::from_value(v["options"].clone()).unwrap();
        // Mostly the right letter (option (i + r) mod 4 shows at letter i), so that some items
        // are right under every rotation.
        let k = if lcg(&mut seed).is_multiple_of(10) {
            (lcg(&mut seed) % 4) as usize
        } else {
            ((answers[id] + 4 - r) % 4) as usize
        };
        let a = answer_shape(lcg(&mut seed), k, &shown);
        csv += &format!("\"{id}\",{r},\"{}\"\n", a.replace('"', "\"\""));
    }
    let preds = dir.path().join("preds.csv");
    write(&preds, &csv);
    let ours = |extra: &[&str]| -> Value {
        let mut args = vec![
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--json",
        ];
        args.extend(extra);
        let o = run(&args, dir.path());
        assert!(o.status.success(), "{}", err(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // Every split: the numbers evaluate gave before --split.
    let ours_all = ours(&["--split", "all"]);
    let ours_lang = ours(&["--split", "all", "--by", "language"]);
    let theirs = check_questions(&rel, &preds, dir.path(), "all");
    assert_eq!(theirs["items"], 18, "{theirs}");
    assert_eq!(theirs["videos"], 6, "{theirs}");
    for c in [
        "answer",
        "blind_correct",
        "blind_samples",
        "context_note",
        "item_id",
        "language",
        "level",
        "options",
        "question",
        "rationale",
        "split",
        "video_id",
    ] {
        assert!(
            theirs["columns"].as_array().unwrap().contains(&json!(c)),
            "{c}: {theirs}"
        );
    }
    same_scores(&ours_all["all"], &theirs["all"], "all");
    same_scores(&ours_all["circular"], &theirs["circular"], "circular");
    close(&ours_all["chance"], &theirs["chance"], "chance");
    close(&ours_all["blind"], &theirs["blind"], "blind");
    close(&theirs["blind"], &json!(1.0 / 2.0 / 3.0), "blind by hand");
    assert_eq!(ours_all["all"]["micro"]["unparsed"], theirs["unparsed"]);
    assert!(
        theirs["unparsed"].as_u64().unwrap() > 0,
        "some answers name no option: {theirs}"
    );
    assert_eq!(ours_all["all"]["micro"]["missing"], 1);
    assert_eq!(ours_all["circular"]["micro"]["missing"], 2);
    let langs = theirs["by_language"].as_object().unwrap();
    assert!(langs.len() >= 2, "{theirs}");
    for (g, t) in langs {
        same_scores(&ours_lang["by"][g], t, &format!("language {g}"));
    }
    // Some items are right under every rotation, fewer than under the first alone.
    let acc = |k: &str| ours_all[k]["micro"]["accuracy"].as_f64().unwrap();
    assert!(
        0.0 < acc("circular") && acc("circular") < acc("all"),
        "{ours_all}"
    );
    assert_eq!(ours_all["split"]["name"], "all");
    assert_eq!(ours_all["split"]["scored"], 18);

    // The default: the test split alone, as numpy scores its 9 items; the answers to the
    // other 9 items are left out.
    let ours_test = ours(&[]);
    let ours_test_lang = ours(&["--by", "language"]);
    let theirs = check_questions(&rel, &preds, dir.path(), "test");
    assert_eq!(theirs["items"], 9, "{theirs}");
    assert_eq!(theirs["release_items"], 18, "{theirs}");
    let split = &ours_test["split"];
    assert_eq!(split["name"], "test", "{split}");
    assert_eq!(split["default"], true, "{split}");
    assert_eq!(split["scored"], 9, "{split}");
    assert_eq!(split["total"], 18, "{split}");
    assert_eq!(split["other_predictions"], theirs["other_predictions"]);
    assert!(
        theirs["other_predictions"].as_u64().unwrap() > 0,
        "{theirs}"
    );
    same_scores(&ours_test["all"], &theirs["all"], "test");
    same_scores(&ours_test["circular"], &theirs["circular"], "test circular");
    close(&ours_test["chance"], &theirs["chance"], "test chance");
    close(&ours_test["blind"], &theirs["blind"], "test blind");
    assert_eq!(ours_test["all"]["micro"]["unparsed"], theirs["unparsed"]);
    for (g, t) in theirs["by_language"].as_object().unwrap() {
        same_scores(&ours_test_lang["by"][g], t, &format!("test language {g}"));
    }
    // The text says which split it scored, first.
    let o = run(
        &["evaluate", rel.to_str().unwrap(), preds.to_str().unwrap()],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let first = format!(
        "split: test (9 of 18 items; {} predictions of other splits not scored; --split all for every split)",
        theirs["other_predictions"]
    );
    assert_eq!(text.lines().next(), Some(first.as_str()), "{text}");
    assert!(text.contains("\n9 items of 3 videos;"), "{text}");
    // A split the release does not have.
    let o = run(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--split",
            "dev",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--split dev:")
            && err(&o).contains("(its splits: train, validation, test; or all"),
        "{}",
        err(&o)
    );

    // Bad input: an unknown item and a repeated item and rotation exit 2 at their line.
    let mut lines: Vec<&str> = csv.lines().collect();
    let first = lines[1].to_string();
    let bad = |body: &str| {
        let f = dir.path().join("bad.csv");
        write(&f, body);
        let o = run(
            &[
                "evaluate",
                rel.to_str().unwrap(),
                f.to_str().unwrap(),
                "--split",
                "all",
            ],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        err(&o)
    };
    lines.insert(3, &first);
    let e = bad(&(lines.join("\n") + "\n"));
    assert!(e.contains("bad.csv:4: a second prediction for item"), "{e}");
    let e = bad("item_id,prediction\nnot-an-item,B\n");
    assert!(
        e.contains("bad.csv:2: item_id \"not-an-item\" is not in the release"),
        "{e}"
    );
}

/// tests/readers/check_questions.py's scores of `preds` on `split` of the release (`all`: every
/// split), loaded with `datasets`.
fn check_questions(rel: &Path, preds: &Path, dir: &Path, split: &str) -> Value {
    let o = std::process::Command::new(crate::release::readers_python())
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/readers/check_questions.py"),
        )
        .arg(rel)
        .arg(preds)
        .arg(split)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", dir.join("hf"))
        .env("HF_DATASETS_CACHE", dir.join("hf/datasets"))
        .output()
        .unwrap();
    assert!(o.status.success(), "check_questions.py: {}", err(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}
