//! The review of benchmark task items by people, every answer format, against the real Label
//! Studio (as tests/annotate.rs starts it): a run drafts one item per clip for seven tasks
//! (single choice, multiple choice, a count, time ranges, a reference list, an open text,
//! tagged reasoning) over a fake OpenAI server on 127.0.0.1; `annotate export --task all`
//! writes one project per task, which Label Studio accepts; two reviewers and a senior review
//! them through its API (tests/readers/label_studio_tasks.py says who did what); `annotate
//! import` of each project's export checks every review with the format's parser, decides the
//! items, and reports retention and the agreement per format; the release carries the decided
//! references, and its card the retention per task.

use crate::annotate::{drive_label_studio, vidcurate};
use crate::caption::openai_structured;
use crate::fake_http::{FakeServer, Request};
use crate::judge::{err, prompt_of, run_with_key};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// The seven tasks: name, format, the task file's extra lines, its reference fields, and the
/// draft model A gives (the judge keeps every one at the first judgment).
const TASKS: [(&str, &str, &str, &str); 7] = [
    (
        "one",
        "single_choice",
        "options = [\"alpha\", \"beta\", \"gamma\"]",
        "",
    ),
    (
        "many",
        "multiple_choice",
        "options = [\"w\", \"x\", \"y\", \"z\"]",
        "",
    ),
    ("count", "count", "", ""),
    ("ranges", "time_ranges", "", ""),
    ("list", "reference_list", "", "fields = [\"elements\"]"),
    ("open", "open_text", "", "fields = [\"theme\"]"),
    (
        "tagged",
        "tagged_reasoning",
        "labels = [\"real\", \"fake\"]",
        "fields = [\"entities\"]\nlabel_column = \"label\"",
    ),
];

fn draft(task: &str) -> Value {
    let mut v = json!({"rationale": "seen"});
    match task {
        "one" => v["answer"] = json!("B"),
        "many" => v["answer"] = json!(["A", "C"]),
        "count" => v["answer"] = json!(2),
        "ranges" => v["answer"] = json!([[0.4, 1.6]]),
        "list" => v["elements"] = json!(["a red car", "a man in blue"]),
        "open" => v["theme"] = json!("a flood in the city"),
        "tagged" => {
            v["answer"] = json!("<think>red captions</think><result>fake</result>");
            v["entities"] = json!(["the mayor"]);
        }
        _ => panic!("{task}"),
    }
    v
}

fn task_file(dir: &Path, (name, format, extra, reference): (&str, &str, &str, &str)) -> String {
    for (role, text) in [
        ("draft", "DRAFT for [title]"),
        ("refine", "REFINE [draft]"),
        ("judge", "JUDGE [draft]"),
    ] {
        write(&dir.join(format!("prompts/{role}.txt")), text);
    }
    let metric = match format {
        "single_choice" => "accuracy",
        "multiple_choice" => "jaccard",
        "count" => "abs_distance",
        "time_ranges" => "mean_iou",
        "tagged_reasoning" => "macro_f1",
        "open_text" => "rouge_l",
        _ => "hit_rate.elements",
    };
    let path = dir.join(format!("{name}.toml"));
    write(
        &path,
        &format!(
            "name = \"{name}\"\ncategory = \"perception\"\ntargets = [\"original_footage\"]\nformat = \"{format}\"\n\
             definition = \"d\"\nquestion = \"q\"\nmetrics = [\"{metric}\"]\n{extra}\n\
             [reference]\nfrom = \"drafted\"\n{reference}\n\n[prompts]\ndraft = \"prompts/draft.txt\"\n\
             refine = \"prompts/refine.txt\"\njudge = \"prompts/judge.txt\"\n"
        ),
    );
    path.display().to_string()
}

/// A run of four 2 s clips (25 fps) with the seven drafted tasks.
fn task_run(dir: &Path) -> (FakeServer, std::path::PathBuf) {
    std::fs::create_dir_all(dir.join("v")).unwrap();
    let mut manifest = String::from("path,id,title,label\n");
    for i in 0..4 {
        plain_clip(&dir.join(format!("v/c{i}.mp4")), 2.0, "160x120");
        manifest += &format!("v/c{i}.mp4,c{i},clip {i},fake\n");
    }
    write(&dir.join("m.csv"), &manifest);
    let server = FakeServer::start(|r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let schema = v["response_format"]["json_schema"]["name"]
            .as_str()
            .unwrap_or_default();
        if schema == "item_judgment" {
            return openai_structured(
                &json!({"factual_consistency": 5, "factual_reason": "ok", "logical_rationality": 5, "logical_reason": "ok"}).to_string(),
            );
        }
        let prompt = prompt_of(r);
        if let Some(rest) = prompt.strip_prefix("REFINE ") {
            return openai_structured(rest.split("\n\n(Round").next().unwrap());
        }
        openai_structured(&draft(schema.trim_end_matches("_reference")).to_string())
    });
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
    for t in TASKS {
        let path = task_file(&dir.join("t"), t);
        text += &format!(
            "\n[[stages]]\nid = \"{}\"\ntype = \"items\"\ncompute = {{ task = \"{path}\", {models} }}\n",
            t.0
        );
    }
    let p = dir.join("p.toml");
    write(&p, &text);
    let out = dir.join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (server, out)
}

fn close(v: &Value, x: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - x).abs() < 1e-9)
}

#[test]
fn task_items_of_every_format_reviewed_in_label_studio_and_released() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (_server, run_dir) = task_run(dir);
    let r = run_dir.to_str().unwrap();
    let export = dir.join("export");
    let out = vidcurate(
        &[
            "annotate",
            "export",
            r,
            "--task",
            "all",
            "--out",
            export.to_str().unwrap(),
            "--media-url",
            "http://127.0.0.1:9/videos/",
        ],
        dir,
    );
    for (t, ..) in TASKS {
        assert!(out.contains(&format!("{t}: 4 tasks")), "{out}");
    }
    // The reference is the pre-annotation, in the format's control.
    let tasks: Value =
        serde_json::from_slice(&std::fs::read(export.join("ranges/tasks.json")).unwrap()).unwrap();
    let pre = &tasks[0]["predictions"][0]["result"][0];
    assert_eq!(pre["type"], "timelinelabels", "{pre}");
    assert_eq!(
        pre["value"]["ranges"][0],
        json!({"start": 11.0, "end": 40.0})
    );
    let bad = vidcurate_fails(
        &[
            "annotate",
            "export",
            r,
            "--task",
            "nope",
            "--out",
            "x",
            "--media-url",
            "u",
        ],
        dir,
    );
    assert!(
        bad.contains("--task nope: the run has no items stage of that task (it has one, many"),
        "{bad}"
    );

    let exported = dir.join("exported");
    let driven = drive_label_studio(
        dir,
        "label_studio_tasks.py",
        &[export.to_str().unwrap(), exported.to_str().unwrap()],
    );
    let senior = driven["users"]["annotator@example.org"].to_string();
    let rule = format!("reviewer:{senior}");
    let mut last = String::new();
    for (t, ..) in TASKS {
        let file = exported.join(format!("{t}.json"));
        last = vidcurate(
            &[
                "annotate",
                "import",
                r,
                file.to_str().unwrap(),
                "--rule",
                &rule,
            ],
            dir,
        );
    }
    // The senior's invalid reviews of i0 are kept out, named by control and the parser's code.
    let item = |t: &str, i: usize| driven["ids"][t][i].as_str().unwrap().to_string();
    for (t, control, code) in [
        ("count", "answer_count", "negative_count"),
        ("ranges", "ranges", "range_reversed"),
        ("list", "ref_elements", "empty_reference"),
    ] {
        let file = exported.join(format!("{t}.json"));
        let o = vidcurate(
            &[
                "annotate",
                "import",
                r,
                file.to_str().unwrap(),
                "--rule",
                &rule,
            ],
            dir,
        );
        assert!(
            o.contains("(0 new or replaced)"),
            "the same export again: {o}"
        );
        let want = format!("item {} reviewer {senior}: {control}: ", item(t, 0));
        let line = o
            .lines()
            .find(|l| l.contains(&want))
            .unwrap_or_else(|| panic!("{want}: {o}"));
        assert!(line.contains(code), "{line}");
    }
    let report: Value = serde_json::from_slice(
        &std::fs::read(run_dir.join("annotations/tasks_report.json")).unwrap(),
    )
    .unwrap();
    let shares: BTreeMap<String, Value> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["task"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    assert_eq!(shares.len(), 7, "{report}");
    for (t, s) in &shares {
        // 4 decided, i3 rejected by the senior; decisions r1 accept, edit, accept, accept and
        // r2 accept, edit, edit, reject: po 1/2, pe 3/16 + 2/16, kappa 3/11.
        assert_eq!(
            (s["decided"].as_u64(), s["rejected"].as_u64()),
            (Some(4), Some(1)),
            "{t}: {s}"
        );
        assert!(close(&s["retained"], 0.75), "{t}: {s}");
        assert!(close(&s["decision_kappa"], 3.0 / 11.0), "{t}: {s}");
        assert_eq!(s["decision_items"], 4, "{t}: {s}");
        // The references both kept: i0 (as made), i1 (both the same edit), i2 (r1 as made,
        // r2 another).
        assert_eq!(s["reference_items"], 3, "{t}: {s}");
    }
    // Single choice: r1 B, C, B; r2 B, C, A: po 2/3, pe 2/9 + 1/9, kappa 1/2.
    assert!(
        close(&shares["one"]["reference_agreement"], 0.5),
        "{}",
        shares["one"]
    );
    // Counts 2|2, 5|5, 2|3, interval: D_o 1/3, D_e 13/3, alpha 12/13.
    assert!(
        close(&shares["count"]["reference_agreement"], 12.0 / 13.0),
        "{}",
        shares["count"]
    );
    // Ranges [0.4,1.6] twice, [0.4,1.2] twice, [0.4,1.6] | [1.0,1.8], distance 1 - IoU:
    // alpha 0.4736842105 (by hand: D_o = 2·(1 − 3/7) / 6, D_e over the 30 ordered pairs).
    assert!(
        close(
            &shares["ranges"]["reference_agreement"],
            0.47368421052631604
        ),
        "{}",
        shares["ranges"]
    );
    assert_eq!(
        shares["ranges"]["agreement_measure"],
        "alpha, distance 1 - IoU"
    );
    for t in ["list", "open", "tagged"] {
        let a = shares[t]["reference_agreement"].as_f64().unwrap();
        assert!(a > 0.0 && a < 1.0, "{t}: {}", shares[t]);
    }
    assert!(last.contains("tagged"), "{last}");
    println!("{last}");

    // The decided rows: i1 both edited the same way, i2 the senior's.
    let rows: BTreeMap<(String, String), BTreeMap<String, String>> =
        table_rows_file(&run_dir.join("annotations/tasks.parquet"))
            .into_iter()
            .map(|r| ((r["item_id"].clone(), r["annotator"].clone()), r))
            .collect();
    let decided = |t: &str, i: usize| &rows[&(item(t, i), "adjudicated".to_string())];
    let class = |t: &str, i: usize| decided(t, i)["edit_class"].clone();
    for t in ["one", "many", "count"] {
        assert_eq!(
            (class(t, 0), class(t, 1), class(t, 3)),
            ("accepted".into(), "rewritten".into(), "rejected".into()),
            "{t}"
        );
    }
    for t in ["ranges", "list", "open", "tagged"] {
        assert_eq!(class(t, 1), "minor_edit", "{t}: {:?}", decided(t, 1));
    }
    assert_eq!(class("ranges", 2), "rewritten");
    assert_eq!(decided("count", 1)["answer_count"], "5");
    assert_eq!(decided("many", 1)["answer"], "A,B,C");
    assert_eq!(decided("ranges", 1)["answer_ends"], "[1.2]");
    assert_eq!(
        decided("ranges", 0)["answer_ends"],
        "[1.6]",
        "as made, not moved to a frame"
    );
    assert_eq!(
        decided("list", 1)["reference_items"],
        "[[a red car, a man in blue, a dog]]"
    );
    assert_eq!(decided("open", 2)["answer_text"], "a parade downtown");
    assert_eq!(decided("tagged", 2)["answer_label"], "fake");
    assert!(
        decided("count", 2)["decided_by"].starts_with("senior: "),
        "{:?}",
        decided("count", 2)
    );

    // The release: three items per task, the decided references, and the card's table.
    let o = run(&["split", r, "--ratios", "100/0/0"], dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rel = dir.join("release");
    let o = run(
        &[
            "release",
            r,
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let count: BTreeMap<String, BTreeMap<String, String>> =
        table_rows_file_all(&rel.join("tasks/count"))
            .into_iter()
            .map(|r| (r["item_id"].clone(), r))
            .collect();
    assert_eq!(count.len(), 3, "{count:?}");
    assert!(!count.contains_key(&item("count", 3)));
    assert_eq!(count[&item("count", 1)]["answer_count"], "5");
    assert_eq!(count[&item("count", 1)]["review"], "rewritten");
    assert_eq!(count[&item("count", 2)]["answer_count"], "3");
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains(
            "| count | 4 | 75.0 % | 1 | 0 | 2 | 1 | 0.273 (4) | alpha, interval: 0.923 (3) | 0 |"
        ),
        "{card}"
    );
}

fn vidcurate_fails(args: &[&str], cwd: &Path) -> String {
    let o = run(args, cwd);
    assert_eq!(o.status.code(), Some(2), "{args:?}");
    String::from_utf8_lossy(&o.stderr).to_string()
}
