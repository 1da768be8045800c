//! A review applies to the draft it was made of (issue 57): items reviewed and released, then
//! the questions stage drafts again (another model) and one item comes back under the same id
//! with another question. The release leaves that item out until it is reviewed again (the
//! others keep their reviews), and an import of the old export keeps its review out, saying
//! why.

use crate::annotate::vidcurate;
use crate::judge::{err, run_with_key};
use crate::need_ffmpeg;
use crate::questions::{question_run, split_and_release};
use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// A Label Studio export of `tasks`: each task accepted by one reviewer.
fn accepted(tasks: &Value) -> Value {
    let done: Vec<Value> = tasks
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut t = t.clone();
            t["id"] = json!(100 + i);
            t["annotations"] = json!([{
                "id": i + 1,
                "completed_by": {"email": "r1@example.org"},
                "updated_at": "2026-12-01T00:00:00Z",
                "result": [{"from_name": "decision", "to_name": "video", "type": "choices",
                            "value": {"choices": ["accept"]}}],
            }]);
            t
        })
        .collect();
    json!(done)
}

fn released(rel: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    table_rows_file_all(&rel.join("questions"))
        .into_iter()
        .map(|r| (r["item_id"].clone(), r))
        .collect()
}

#[test]
fn a_redrafted_item_waits_for_a_new_review() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (_server, run_dir) = question_run(dir, 2);
    let r = run_dir.to_str().unwrap();
    let export = dir.join("export");
    let out = vidcurate(
        &[
            "annotate",
            "export",
            r,
            "--items",
            "--out",
            export.to_str().unwrap(),
            "--media-url",
            "http://127.0.0.1:9/videos/",
        ],
        dir,
    );
    assert!(out.contains("tasks"), "{out}");
    let tasks: Value =
        serde_json::from_slice(&std::fs::read(export.join("tasks.json")).unwrap()).unwrap();
    let reviews = dir.join("reviews.json");
    write(&reviews, &accepted(&tasks).to_string());
    let import = || {
        vidcurate(
            &[
                "annotate",
                "import",
                r,
                reviews.to_str().unwrap(),
                "--rule",
                "single",
            ],
            dir,
        )
    };
    let said = import();
    let n = tasks.as_array().unwrap().len();
    assert!(said.contains(&format!("{n} items decided")), "{said}");
    let rel = dir.join("release");
    split_and_release(&run_dir, &rel, dir, &["--frames", "none"]);
    let before = released(&rel);
    assert_eq!(before.len(), n, "every reviewed item: {before:?}");
    assert!(before.values().all(|r| r["review"] == "accepted"));
    let old = "What does the clip, taken as a whole, present itself as?";
    let redrafted: Vec<String> = before
        .iter()
        .filter(|(_, r)| r["question"] == old)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(redrafted.len(), 2, "one internal item per video");

    // The questions stage drafts again with another model: the internal items change.
    let p = dir.join("p.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    let questions = "id = \"questions\"\ntype = \"questions\"\ncompute = { service = \"openai\", model = \"gpt-4o-mini\"";
    assert!(text.contains(questions));
    write(
        &p,
        &text.replace(questions, &questions.replace("gpt-4o-mini", "gpt-4o")),
    );
    let o = run_with_key(&p, &run_dir);
    assert!(o.status.success(), "{}", err(&o));
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
    assert!(o.status.success(), "{}", err(&o));
    let after = released(&rel);
    assert_eq!(
        after.len(),
        n - 2,
        "the redrafts wait for review: {after:?}"
    );
    assert!(redrafted.iter().all(|id| !after.contains_key(id)));
    assert!(after.values().all(|r| r["question"] != old));
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains("2 kept candidates without a decision are left out"),
        "{card}"
    );

    // The old export imported again: the redrafted items' reviews are kept out, saying why.
    let said = import();
    assert!(said.contains("drafted again"), "{said}");
    assert!(said.contains(&format!("{} items decided", n - 2)), "{said}");
}
