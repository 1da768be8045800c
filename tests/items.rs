//! The `items` stage with MVFNDB's shipped task files.
//!
//! Derived items on generated clips whose drawn text has a known colour, grid cell and timing:
//! CCP answers the drawn colour's name, CPP the drawn box's cell, KEG's ranges lie within one
//! sampled-frame interval of the drawn times, SAC is the shots stage's count marked for people.
//!
//! Drafted items through the draft → refine → judge loop, over fake OpenAI (model A, the judge)
//! and Gemini (model B) servers on 127.0.0.1 replaying the recorded structured-output bodies:
//! an item judged 3 is refined and kept at 4; one that never reaches 4 is rejected with every
//! round stored; a draft that breaks its format is repaired once, or rejected with the reason;
//! a second run makes no call.

use crate::caption::{gemini_structured, openai_structured};
use crate::fake_http::{FakeServer, Request};
use crate::judge::{err, prompt_of, run_with_key};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf";

fn tasks() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks/mvfndb")
}

/// An 8 s 640×360 clip on a flat dark background with `text` drawn in `colour`, its centre at
/// (`cx`, `cy`) of the frame (the middle of one cell of the 5 × 6 grid), on screen from `from`
/// to `to` seconds.
fn text_clip(path: &Path, text: &str, colour: &str, cx: f64, cy: f64, from: f64, to: f64) {
    let vf = format!(
        "drawtext=fontfile={FONT}:text='{text}':fontsize=36:fontcolor={colour}:x={cx}*w-text_w/2:y={cy}*h-text_h/2:enable='between(t\\,{from}\\,{to})'"
    );
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "color=c=0x202020:s=640x360:r=10:d=8",
        "-vf",
        &vf,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        path.to_str().unwrap(),
    ]);
}

fn items_stage(id: &str, compute: &str) -> String {
    format!("\n[[stages]]\nid = \"{id}\"\ntype = \"items\"\ncompute = {{ {compute} }}\n")
}

fn by_video(rows: &[BTreeMap<String, String>]) -> BTreeMap<String, BTreeMap<String, String>> {
    rows.iter()
        .map(|r| (r["video_id"].clone(), r.clone()))
        .collect()
}

#[test]
fn derived_items_answer_the_drawn_colour_cell_and_times() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    // Red in the "lower right" cell (row 3 of 5, column 4 of 6) from 2 to 5 s; green in the
    // "top left" cell for the whole clip.
    text_clip(
        &v.join("alert.mp4"),
        "ALERT",
        "0xFF0000",
        4.5 / 6.0,
        3.5 / 5.0,
        2.0,
        5.0,
    );
    text_clip(
        &v.join("storm.mp4"),
        "STORM",
        "0x00FF00",
        1.5 / 6.0,
        0.5 / 5.0,
        0.0,
        8.0,
    );
    let t = tasks();
    let stages = [(
        "ocr",
        "use_cls = true, text_score = 0.5, grid_rows = 5, grid_cols = 6".to_string(),
    )];
    let mut text = pipeline("dir = \"v\"", "{ mode = \"uniform\", count = 8 }", "");
    text += &format!(
        "\n[[stages]]\nid = \"ocr\"\ntype = \"ocr\"\ncompute = {{ {} }}\n",
        stages[0].1
    );
    text += "\n[[stages]]\nid = \"shots\"\ntype = \"shots\"\n";
    for task in ["ccp", "cpp", "keg", "sac"] {
        text += &items_stage(task, &format!("task = \"{}/{task}.toml\"", t.display()));
    }
    let p = d.path().join("p.toml");
    write(&p, &text);
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));

    // The source table names each clip by its content id: map them back by path.
    let ids: BTreeMap<String, String> = table_rows_file_all(&run_dir.join("source"))
        .into_iter()
        .map(|r| {
            let name = Path::new(&r["path"])
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, r["video_id"].clone())
        })
        .collect();
    let (alert, storm) = (&ids["alert"], &ids["storm"]);

    let ccp = by_video(&table_rows_file_all(&run_dir.join("ccp")));
    assert_eq!(answer_text(&ccp[alert]), "red", "{:?}", ccp[alert]);
    assert_eq!(answer_text(&ccp[storm]), "green", "{:?}", ccp[storm]);
    for r in ccp.values() {
        assert_eq!(r["kept"], "true");
        assert_eq!(r["origin"], "derived");
        assert!(
            r["question"].contains("ALERT") || r["question"].contains("STORM"),
            "{r:?}"
        );
        assert_eq!(
            json_list(&r["options"]).matches(',').count(),
            3,
            "4 options shown: {r:?}"
        );
        assert!(r["from_columns"].contains("ocr.text_color"), "{r:?}");
        assert_ne!(r["key_frame"], "null");
    }

    let cpp = by_video(&table_rows_file_all(&run_dir.join("cpp")));
    assert_eq!(answer_text(&cpp[alert]), "lower right", "{:?}", cpp[alert]);
    assert_eq!(answer_text(&cpp[storm]), "top left", "{:?}", cpp[storm]);
    // 30 options: labelled by number.
    assert_eq!(cpp[alert]["answer"], "23");

    // Frames at 0.5, 1.5, …, 7.5 s: a range is within one interval (1 s) of the drawn times.
    let keg = by_video(&table_rows_file_all(&run_dir.join("keg")));
    let range = |r: &BTreeMap<String, String>| -> (f64, f64) {
        let s: Vec<f64> = serde_json::from_str(&json_list(&r["answer_starts"])).unwrap();
        let e: Vec<f64> = serde_json::from_str(&json_list(&r["answer_ends"])).unwrap();
        assert_eq!((s.len(), e.len()), (1, 1), "one range: {r:?}");
        (s[0], e[0])
    };
    let (s, e) = range(&keg[alert]);
    assert!(
        (s - 2.0).abs() <= 1.0 && (e - 5.0).abs() <= 1.0,
        "alert drawn 2–5 s, got {s}–{e}"
    );
    let (s, e) = range(&keg[storm]);
    assert!(
        s.abs() <= 1.0 && (e - 8.0).abs() <= 1.0,
        "storm drawn 0–8 s, got {s}–{e}"
    );

    let sac = by_video(&table_rows_file_all(&run_dir.join("sac")));
    let shots = by_video(&table_rows_file_all(&run_dir.join("shots")));
    for id in [alert, storm] {
        assert_eq!(sac[id]["answer_count"], shots[id]["shots_in_video"]);
        assert_eq!(sac[id]["for_review"], "true");
        assert_eq!(sac[id]["from_columns"], "[shots.shots_in_video]");
    }

    // Released: one config per task, its items in their video's split, the format's columns.
    let o = run(
        &["split", run_dir.to_str().unwrap(), "--ratios", "50/0/50"],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rel = d.path().join("release");
    let o = run(
        &[
            "release",
            run_dir.to_str().unwrap(),
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let script = "import json, sys\nfrom datasets import load_dataset\nout = {}\nfor c in ['ccp', 'cpp', 'keg', 'sac']:\n    ds = load_dataset(sys.argv[1], c)\n    out[c] = {s: [dict(r) for r in ds[s]] for s in ds}\nprint(json.dumps(out))\n";
    let o = std::process::Command::new(crate::release::readers_python())
        .args(["-c", script, rel.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loaded: Value = serde_json::from_slice(&o.stdout).unwrap();
    let split_of = |id: &str| -> String {
        let rows = table_rows_file(&run_dir.join("splits/default.parquet"));
        rows.iter().find(|r| r["video_id"] == id).unwrap()["split"].clone()
    };
    for (task, columns, absent) in [
        ("ccp", vec!["options", "answer"], "answer_starts"),
        ("keg", vec!["answer_starts", "answer_ends"], "options"),
        ("sac", vec!["answer_count", "for_review"], "answer"),
    ] {
        let table = by_video(&table_rows_file_all(&run_dir.join(task)));
        for id in [alert, storm] {
            let split = split_of(id);
            let rows = loaded[task][&split].as_array().unwrap();
            let r = rows
                .iter()
                .find(|r| r["video_id"] == *id)
                .unwrap_or_else(|| panic!("{task} {id} in {split}: {rows:?}"));
            assert_eq!(r["item_id"], table[id]["item_id"]);
            assert!(r.get(absent).is_none(), "{task} has no {absent}: {r}");
            for c in &columns {
                let want = &table[id][*c];
                let got = &r[*c];
                let same = match got {
                    Value::String(s) => s == want,
                    Value::Array(_) | Value::Number(_) | Value::Bool(_) => {
                        got.to_string().replace(',', ", ").replace('"', "") == *want
                            || serde_json::from_str::<Value>(&json_list(want))
                                .ok()
                                .as_ref()
                                == Some(got)
                            || got.to_string() == *want
                    }
                    _ => false,
                };
                assert!(same, "{task} {id} {c}: {got} vs {want}");
            }
        }
    }
    assert_eq!(
        loaded["ccp"]["train"].as_array().unwrap().len()
            + loaded["ccp"]["test"].as_array().unwrap().len(),
        2
    );
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains(
            "| sac | Shooting Angles Counting (SAC) | perception | count | abs_distance | derived |"
        ),
        "{card}"
    );
    let infos: Value =
        serde_json::from_str(&std::fs::read_to_string(rel.join("tasks/tasks.json")).unwrap())
            .unwrap();
    assert_eq!(infos.as_array().unwrap().len(), 4);
    assert_eq!(infos[0]["name"], "ccp");
    assert_eq!(infos[0]["format"], "single_choice");
}

/// The option a single-choice item's answer names.
pub(crate) fn answer_text(r: &BTreeMap<String, String>) -> String {
    let options: Vec<String> = serde_json::from_str(&json_list(&r["options"])).unwrap();
    let i: usize = r["answer_choices"]
        .trim_matches(['[', ']'])
        .parse()
        .unwrap();
    options[i].clone()
}

/// A formatted list (`[a, b]`) as JSON, its items quoted where they are text.
fn json_list(s: &str) -> String {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    if inner.trim().is_empty() {
        return "[]".into();
    }
    let items: Vec<String> = inner
        .split(", ")
        .map(|x| match x.parse::<f64>() {
            Ok(_) => x.to_string(),
            Err(_) => json!(x).to_string(),
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// What the fake models answer, by video title: the draft is always the same; the judge gives
/// "steady" 3 then 4, "hopeless" 2 every time, and "broken" drafts a count that is negative
/// twice (so it is rejected after its repair).
fn answer(r: &Request, gemini: bool) -> crate::fake_http::Response {
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let prompt = if gemini {
        v["contents"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        prompt_of(r)
    };
    let title = ["steady", "hopeless"]
        .into_iter()
        .find(|t| {
            prompt.contains(&format!("title: {t}")) || prompt.contains(&format!("Its title: {t}"))
        })
        .unwrap_or("?");
    if gemini {
        // Model B refines: the elements, with what the judge asked for.
        let round = if prompt.contains("factual consistency 3/5") {
            "second"
        } else {
            "first"
        };
        return gemini_structured(
            &json!({"elements": [format!("a {round} refined element"), "a caption"], "rationale": "refined"}).to_string(),
        );
    }
    let schema = v["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or_default();
    if schema == "item_judgment" {
        let second = prompt.contains("second refined element");
        let score = match (title, second) {
            ("steady", false) => 3,
            ("steady", true) => 4,
            _ => 2,
        };
        return openai_structured(
            &json!({"factual_consistency": score, "factual_reason": format!("{title} facts"), "logical_rationality": 5, "logical_reason": "follows"}).to_string(),
        );
    }
    assert_eq!(schema, "kep_reference", "{v}");
    if prompt.contains("previous answer was invalid") {
        return openai_structured(
            &json!({"elements": ["a street", "a sign"], "rationale": "seen"}).to_string(),
        );
    }
    // The first draft leaves its list empty: the format's check sends it back once.
    openai_structured(&json!({"elements": [], "rationale": "nothing"}).to_string())
}

/// A pipeline over `m.csv` in `dir` with one drafted KEP stage (`models`: its drafter, refiner
/// and judge) on the fake OpenAI and Gemini servers, run: the pipeline file, the run folder and
/// the KEP rows by video.
fn run_kep(
    dir: &Path,
    openai: &FakeServer,
    gemini: &FakeServer,
    models: &str,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    BTreeMap<String, BTreeMap<String, String>>,
) {
    let services = format!(
        "[services.openai]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n\
         [services.gemini]\nbase_url = \"{}v1beta/\"\napi = \"gemini\"\napi_key_env = \"VIDCURATE_TEST_GEMINI_KEY\"\nrequests_per_minute = 6000\n",
        openai.url(),
        gemini.url()
    );
    let mut text = pipeline(
        "manifest = \"m.csv\"",
        "{ mode = \"uniform\", count = 2 }",
        &services,
    );
    text += &items_stage(
        "kep",
        &format!("task = \"{}/kep.toml\", {models}", tasks().display()),
    );
    let p = dir.join("p.toml");
    write(&p, &text);
    let out = dir.join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows = by_video(&table_rows_file_all(&out.join("kep")));
    (p, out, rows)
}

#[test]
fn drafted_items_go_through_refine_and_judge_and_keep_every_round() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    // Two sizes: equal clips would ask model B the same, and the response cache would answer.
    for (t, size) in [("steady", "160x120"), ("hopeless", "192x108")] {
        plain_clip(&d.path().join(format!("v/{t}.mp4")), 1.0, size);
    }
    write(
        &d.path().join("m.csv"),
        "path,id,title\nv/steady.mp4,steady,steady\nv/hopeless.mp4,hopeless,hopeless\n",
    );
    let openai = FakeServer::start(|r: &Request| answer(r, false));
    let gemini = FakeServer::start(|r: &Request| answer(r, true));
    let (p, out, rows) = run_kep(
        d.path(),
        &openai,
        &gemini,
        "drafter = { service = \"openai\", model = \"gpt-4o\" }, refiner = { service = \"gemini\", model = \"gemini-2.5-flash\" }, judge = { service = \"openai\", model = \"o1\" }",
    );

    // steady: draft (repaired once) → refine → judged 3 → refine with the reason → judged 4: kept.
    let s = &rows["steady"];
    assert_eq!(s["kept"], "true", "{s:?}");
    assert_eq!(s["round_roles"], "[draft, refine, refine]");
    assert_eq!(
        s["round_models"],
        "[gpt-4o, gemini-2.5-flash, gemini-2.5-flash]"
    );
    assert_eq!(s["round_factual"], "[null, 3, 4]");
    assert_eq!(s["final_round"], "2");
    assert_eq!(s["judge_model"], "o1");
    assert_eq!(s["reference_fields"], "[elements]");
    assert_eq!(
        s["reference_items"],
        "[[a second refined element, a caption]]"
    );
    assert!(
        s["round_texts"].contains("a street"),
        "the repaired draft is round 0: {s:?}"
    );

    // hopeless: judged 2 three times (the first judgment and two refinements): rejected.
    let h = &rows["hopeless"];
    assert_eq!(h["kept"], "false", "{h:?}");
    assert_eq!(h["round_roles"], "[draft, refine, refine, refine]");
    assert_eq!(h["round_factual"], "[null, 2, 2, 2]");
    assert_eq!(h["reject_codes"], "[judged_below]");
    assert!(
        h["reject_reason"].contains("factual consistency 2/5: hopeless facts"),
        "{h:?}"
    );

    // Calls: per video 2 drafts (one repair) + refinements + judgments.
    let (oa, ge) = (openai.requests().len(), gemini.requests().len());
    assert_eq!((oa, ge), (2 * 2 + 2 + 3, 2 + 3), "openai {oa}, gemini {ge}");
    // A second run makes no call.
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!((openai.requests().len(), gemini.requests().len()), (oa, ge));

    // The item table, and the same items under other thresholds, with no call.
    let table = |set: &[&str]| {
        let mut args = vec!["items", out.to_str().unwrap()];
        for s in set {
            args.extend(["--set", s]);
        }
        let o = run(&args, d.path());
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let t = table(&[]);
    assert!(
        t.contains(
            "| kep | reference_list | drafted | 2 | 2 | 1 | 1 | 0 | 2.50 | judged_below 1 |"
        ),
        "{t}"
    );
    let t = table(&["kep.min_score=2"]);
    assert!(
        t.contains("| kep | reference_list | drafted | 2 | 2 | 2 | 0 | 0 | 2.50 |  |"),
        "{t}"
    );
    // Stricter than any stored score: hopeless ran every round and fails; steady stopped
    // early (kept at 4), so only a run can refine it further.
    let t = table(&["kep.min_score=5"]);
    assert!(
        t.contains("| 2 | 2 | 0 | 2 | 0 | 2.50 | judged_below 1, needs_rounds 1 |"),
        "{t}"
    );
    assert!(
        t.contains("1 drafted item(s) stopped before the rounds"),
        "{t}"
    );
    // One round allowed: steady's first judgment (3) fails.
    let t = table(&["kep.max_rounds=0"]);
    assert!(
        t.contains("| 2 | 2 | 0 | 2 | 0 | 2.50 | judged_below 2 |"),
        "{t}"
    );
    let o = run(
        &["items", out.to_str().unwrap(), "--set", "nope.min_score=1"],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("no items stage \"nope\""), "{}", err(&o));

    // rethreshold decides the same, keeps every video, and stores each item's decision.
    let o = run(
        &[
            "rethreshold",
            out.to_str().unwrap(),
            "--set",
            "kep.min_score=2",
        ],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("| kep | reference_list | drafted | 2 | 2 | 2 | 0 | 0 | 2.50 |  |"),
        "{text}"
    );
    let funnels: Vec<&str> = text.split("funnel with the new thresholds:").collect();
    assert_eq!(
        funnels[0]
            .replace("funnel with the pipeline's thresholds:", "")
            .trim(),
        funnels[1].split("selection:").next().unwrap().trim(),
        "no video moves: {text}"
    );
    let file = text
        .lines()
        .find_map(|l| l.strip_prefix("item decisions: "))
        .expect("the decisions file");
    let rows = table_rows_file(Path::new(file));
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["kept"] == "true" && r["stage"] == "kep"),
        "{rows:?}"
    );
    let settings =
        std::fs::read_to_string(file.replace(".items.parquet", ".settings.json")).unwrap();
    assert!(settings.contains("\"min_score\": 2"), "{settings}");
    let o = run(
        &[
            "rethreshold",
            out.to_str().unwrap(),
            "--set",
            "kep.min_score=9",
        ],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("kep.min_score"), "{}", err(&o));
    assert_eq!((openai.requests().len(), gemini.requests().len()), (oa, ge));
}

#[test]
fn items_settings_that_cannot_work_exit_2_at_the_key_and_the_dry_run_prices_every_round() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    for n in ["a", "b"] {
        write(
            &d.path().join(format!("v/{n}.mp4")),
            "not read by a dry run",
        );
    }
    write(&d.path().join("m.csv"), "path,id\nv/a.mp4,a\nv/b.mp4,b\n");
    let services = "[services.openai]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n";
    let t = tasks();
    let models = "drafter = { service = \"openai\", model = \"a\" }, refiner = { service = \"openai\", model = \"b\" }, judge = { service = \"openai\", model = \"j\" }";
    let check = |stage: String, want: &[&str]| {
        let text = pipeline("manifest = \"m.csv\"", "{ count = 2 }", services) + &stage;
        let p = d.path().join("p.toml");
        write(&p, &text);
        let o = run(&["validate", p.to_str().unwrap()], d.path());
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        for w in want {
            assert!(e.contains(w), "wanted {w:?} in {e}");
        }
    };
    // A derived task calls no model.
    check(
        items_stage(
            "ccp",
            &format!("task = \"{}/ccp.toml\", {models}", t.display()),
        ),
        &["stages[2].compute.drafter", "task ccp is not drafted"],
    );
    // A drafted task needs all three models.
    check(
        items_stage(
            "kep",
            &format!(
                "task = \"{}/kep.toml\", drafter = {{ service = \"openai\", model = \"a\" }}",
                t.display()
            ),
        ),
        &["name its refiner"],
    );
    // A derived task whose stage is not in the pipeline.
    check(
        items_stage("cpp", &format!("task = \"{}/cpp.toml\"", t.display())),
        &["needs `ocr`"],
    );
    check(
        items_stage(
            "kep",
            &format!("task = \"{}/kep.toml\", {models}", t.display()),
        ) + "select = { min_score = 6 }\n",
        &["min_score must be 0..5"],
    );
    // The dry run prices the worst case: a draft, then three refinements and three judgments.
    let text = pipeline("manifest = \"m.csv\"", "{ count = 2 }", services)
        + &items_stage(
            "kep",
            &format!("task = \"{}/kep.toml\", {models}", t.display()),
        );
    let p = d.path().join("p.toml");
    write(&p, &text);
    let o = run_command(&p, &d.path().join("run"))
        .arg("--dry-run")
        .env("VIDCURATE_TEST_OPENAI_KEY", "x")
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), err(&o));
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("total: 14 model calls"), "{out}");
}

/// A drafted task file of `format` with the lines `extra`, and its three prompts.
fn drafted_task(dir: &Path, name: &str, format: &str, metric: &str, extra: &str) -> String {
    for (role, text) in [
        ("draft", "DRAFT for [title]"),
        ("refine", "REFINE [draft]"),
        ("judge", "JUDGE [draft]"),
    ] {
        write(&dir.join(format!("prompts/{role}.txt")), text);
    }
    let path = dir.join(format!("{name}.toml"));
    write(
        &path,
        &format!(
            "name = \"{name}\"\ncategory = \"perception\"\ntargets = [\"original_footage\"]\nformat = \"{format}\"\n\
             definition = \"d\"\nquestion = \"q\"\nmetrics = [\"{metric}\"]\n{extra}\n\
             [reference]\nfrom = \"drafted\"\n\n[prompts]\ndraft = \"prompts/draft.txt\"\n\
             refine = \"prompts/refine.txt\"\njudge = \"prompts/judge.txt\"\n"
        ),
    );
    path.display().to_string()
}

/// Model A's answers per task and video: a first draft that breaks the format, then (after
/// the repair request) the second.
fn format_draft(task: &str, fake: bool, repair: bool) -> Value {
    let a = match (task, fake, repair) {
        ("one", _, false) => json!("D"),
        ("one", _, true) => json!("(b)"),
        ("many", _, false) => json!([]),
        ("many", _, true) => json!(["a", "C"]),
        ("count", _, false) => json!(-1),
        ("count", _, true) => json!(-2),
        ("ranges", true, false) => json!([[0.8, 0.2]]),
        ("ranges", true, true) => json!([[0.1, 0.9]]),
        ("ranges", false, _) => json!([[0.5, 9]]),
        ("tagged", true, false) => json!("<think>calm</think><result>real</result>"),
        ("tagged", true, true) => json!("<think>red captions</think><result>Fake</result>"),
        ("tagged", false, _) => json!("it looks real"),
        _ => panic!("{task}"),
    };
    json!({"answer": a, "rationale": "seen"})
}

#[test]
fn every_answer_format_is_drafted_validated_repaired_or_rejected_with_its_code() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    for (t, size) in [("fakeclip", "160x120"), ("realclip", "192x108")] {
        plain_clip(&d.path().join(format!("v/{t}.mp4")), 1.0, size);
    }
    write(
        &d.path().join("m.csv"),
        "path,id,title,label\nv/fakeclip.mp4,fakeclip,fakeclip,fake\nv/realclip.mp4,realclip,realclip,real\n",
    );
    let server = FakeServer::start(|r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let prompt = prompt_of(r);
        let schema = v["response_format"]["json_schema"]["name"]
            .as_str()
            .unwrap_or_default();
        if schema == "item_judgment" {
            return openai_structured(
                &json!({"factual_consistency": 5, "factual_reason": "ok", "logical_rationality": 5, "logical_reason": "ok"}).to_string(),
            );
        }
        if let Some(rest) = prompt.strip_prefix("REFINE ") {
            // Model B hands the draft back as it is.
            return openai_structured(rest.split("\n\n(Round").next().unwrap());
        }
        let task = schema.trim_end_matches("_reference");
        let fake = prompt.contains("fakeclip");
        let repair = prompt.contains("previous answer was invalid");
        openai_structured(&format_draft(task, fake, repair).to_string())
    });
    let t = d.path().join("t");
    let tasks = [
        (
            "one",
            drafted_task(
                &t,
                "one",
                "single_choice",
                "accuracy",
                "options = [\"alpha\", \"beta\", \"gamma\"]",
            ),
        ),
        (
            "many",
            drafted_task(
                &t,
                "many",
                "multiple_choice",
                "jaccard",
                "options = [\"w\", \"x\", \"y\", \"z\"]",
            ),
        ),
        (
            "count",
            drafted_task(&t, "count", "count", "abs_distance", ""),
        ),
        (
            "ranges",
            drafted_task(&t, "ranges", "time_ranges", "mean_iou", ""),
        ),
        (
            "tagged",
            drafted_task(
                &t,
                "tagged",
                "tagged_reasoning",
                "macro_f1",
                "labels = [\"real\", \"fake\"]",
            ),
        ),
    ];
    // The tagged task's result must be the manifest's label.
    let tagged = std::fs::read_to_string(&tasks[4].1).unwrap().replace(
        "from = \"drafted\"",
        "from = \"drafted\"\nlabel_column = \"label\"",
    );
    write(Path::new(&tasks[4].1), &tagged);
    let services = format!(
        "[services.openai]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n",
        server.url()
    );
    let m = |r: &str| format!("{r} = {{ service = \"openai\", model = \"m-{r}\" }}");
    let models = [m("drafter"), m("refiner"), m("judge")].join(", ");
    let mut text = pipeline(
        "manifest = \"m.csv\"",
        "{ mode = \"uniform\", count = 2 }",
        &services,
    );
    for (name, path) in &tasks {
        text += &items_stage(name, &format!("task = \"{path}\", {models}"));
    }
    let p = d.path().join("p.toml");
    write(&p, &text);
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows = |task: &str| by_video(&table_rows_file_all(&out.join(task)));

    let one = rows("one");
    for r in one.values() {
        assert_eq!(
            (r["kept"].as_str(), r["answer"].as_str()),
            ("true", "B"),
            "{r:?}"
        );
        assert_eq!(r["answer_choices"], "[1]");
        assert_eq!(r["round_factual"], "[null, 5]");
    }
    let many = rows("many");
    for r in many.values() {
        assert_eq!(
            (r["kept"].as_str(), r["answer"].as_str()),
            ("true", "A,C"),
            "{r:?}"
        );
        assert_eq!(r["answer_choices"], "[0, 2]");
    }
    // A negative count twice: rejected with the format's code and the reason.
    for r in rows("count").values() {
        assert_eq!(r["kept"], "false", "{r:?}");
        assert_eq!(r["reject_codes"], "[negative_count]");
        assert!(
            r["reject_reason"].contains("a count cannot be negative (got -2)"),
            "{r:?}"
        );
        assert_eq!(r["round_roles"], "[]", "no round was accepted: {r:?}");
    }
    let ranges = rows("ranges");
    let f = &ranges["fakeclip"];
    assert_eq!(f["kept"], "true", "{f:?}");
    assert_eq!(
        (f["answer_starts"].as_str(), f["answer_ends"].as_str()),
        ("[0.1]", "[0.9]")
    );
    let r = &ranges["realclip"];
    assert_eq!(r["reject_codes"], "[range_outside]", "{r:?}");
    assert!(r["reject_reason"].contains("outside the video"), "{r:?}");
    let tagged = rows("tagged");
    let f = &tagged["fakeclip"];
    assert_eq!(f["kept"], "true", "a wrong label is repaired: {f:?}");
    assert_eq!(
        (f["answer_label"].as_str(), f["answer_text"].as_str()),
        ("fake", "red captions")
    );
    let r = &tagged["realclip"];
    assert_eq!(r["reject_codes"], "[missing_result_tag]", "{r:?}");
}

/// The judge over Gemini (model A and B over OpenAI): its scores come back under the judgment
/// schema as `responseJsonSchema`, and the item is kept at the first judgment.
#[test]
fn the_judge_answers_over_gemini() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    plain_clip(&d.path().join("v/one.mp4"), 1.0, "160x120");
    write(
        &d.path().join("m.csv"),
        "path,id,title\nv/one.mp4,one,one\n",
    );
    let openai = FakeServer::start(|_r: &Request| {
        openai_structured(&json!({"elements": ["a street"], "rationale": "seen"}).to_string())
    });
    let gemini = FakeServer::start(|r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let props = &v["generationConfig"]["responseJsonSchema"]["properties"];
        assert!(props.get("factual_consistency").is_some(), "{v}");
        assert!(
            v["contents"][0]["parts"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p.get("inline_data").is_none()),
            "the judge sees no frames: {v}"
        );
        gemini_structured(
            &json!({"factual_consistency": 4, "factual_reason": "shown", "logical_rationality": 5, "logical_reason": "follows"}).to_string(),
        )
    });
    let (_, _, rows) = run_kep(
        d.path(),
        &openai,
        &gemini,
        "drafter = { service = \"openai\", model = \"a\" }, refiner = { service = \"openai\", model = \"b\" }, judge = { service = \"gemini\", model = \"gemini-2.5-flash\" }",
    );
    let r = &rows["one"];
    assert_eq!(r["kept"], "true", "{r:?}");
    assert_eq!(r["round_factual"], "[null, 4]");
    assert_eq!(r["round_logical"], "[null, 5]");
    assert_eq!(r["judge_model"], "gemini-2.5-flash");
    assert_eq!((openai.requests().len(), gemini.requests().len()), (2, 1));
}

/// A release re-reads each items stage's task file through the pipeline as run: a task file
/// edited since the items were made stops the release (exit 2, naming the file), so a config's
/// card never describes another task than its items answer.
#[test]
fn a_release_refuses_a_task_file_changed_since_its_items() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    plain_clip(&v.join("a.mp4"), 3.0, "160x90");
    plain_clip(&v.join("b.mp4"), 3.0, "192x108");
    let task = d.path().join("sac.toml");
    std::fs::copy(tasks().join("sac.toml"), &task).unwrap();
    let mut text = pipeline("dir = \"v\"", "{ mode = \"uniform\", count = 4 }", "");
    text += "\n[[stages]]\nid = \"shots\"\ntype = \"shots\"\n";
    text += &items_stage("sac", "task = \"sac.toml\"");
    let p = d.path().join("p.toml");
    write(&p, &text);
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = run(
        &["split", run_dir.to_str().unwrap(), "--ratios", "50/0/50"],
        d.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rel = d.path().join("rel");
    let release = || {
        run(
            &[
                "release",
                run_dir.to_str().unwrap(),
                "--out",
                rel.to_str().unwrap(),
                "--frames",
                "none",
            ],
            d.path(),
        )
    };
    let o = release();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(rel.join("tasks/sac").is_dir());
    let edited = std::fs::read_to_string(&task).unwrap().replace(
        "title = \"Shooting Angles Counting (SAC)\"",
        "title = \"Angles\"",
    );
    write(&task, &edited);
    let o = release();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("sac.toml") && err(&o).contains("changed since stage sac made its items"),
        "{}",
        err(&o)
    );
}
