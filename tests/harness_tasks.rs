//! `release --harness` on a benchmark-task release (MVFNDB's formats): the exported lmms-eval
//! functions, run as plain Python over every item of a generated release with messy answers
//! (tests/readers/check_task_harness.py), read each answer as `vidcurate evaluate` reads it and
//! aggregate to `evaluate`'s numbers; a single-choice task gets VLMEvalKit TSVs, the other
//! formats none; and a takedown writes the exports again without the video.

use crate::evaluate_tasks::py;
use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn check(rel: &Path) -> Value {
    let args = [
        rel.to_path_buf(),
        rel.join("predictions.jsonl"),
        rel.join("items.jsonl"),
    ];
    crate::release::reader_json("check_task_harness.py", &args)
}

fn evaluate(rel: &Path) -> Value {
    let o = run(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            rel.join("predictions.jsonl").to_str().unwrap(),
            "--json",
            "--items-out",
            rel.join("items.jsonl").to_str().unwrap(),
        ],
        rel,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn task_exports_read_and_score_every_answer_as_evaluate() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("mvfn");
    py(&["make", rel.to_str().unwrap(), "5"]);
    let o = run(
        &[
            "harness",
            rel.to_str().unwrap(),
            "--for",
            "lmms-eval",
            "--for",
            "vlmevalkit",
        ],
        d.path(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("wrote  harness/lmms_eval/mvfn_tg.yaml"),
        "{out}"
    );
    let (report, got) = scored_alike(&rel, "mvfn");
    assert_eq!(report["tasks"].as_array().unwrap().len(), 8);
    // sc, pos: accuracy; mc: accuracy, jaccard; cnt, tr, rl, ot: one each; tg: accuracy,
    // rouge_l — each with its standard error — and tg's Macro-F1.
    assert_eq!(got["compared"], 2 * 10 + 1);
    // 8 tasks of 40 items, each document with its question and its frames.
    assert_eq!(got["docs"], 320);
    assert_eq!(got["visuals"], 640);
    // The choice tasks show every option: sc (4), pos (30, numbered) and mc (6).
    assert_eq!(got["options_shown"], 120);
    assert_eq!(
        got["tasks"]["mvfn_cnt"]["_higher_is_better"]["abs_distance"],
        false
    );
    let group = got["groups"]["mvfn_tasks"].as_array().unwrap();
    assert_eq!(group.len(), 8);
    // The release has no test split: every file is lmms-eval's `test`, there is nothing else.
    let sc = &got["splits"]["mvfn_sc"];
    assert_eq!(
        sc["files"],
        serde_json::json!({"test": ["tasks/sc/train-00000-of-00001.parquet"]}),
        "{sc}"
    );
    assert_eq!(sc["test_split"], "test");
    assert!(
        sc["validation_split"].is_null() && sc["fewshot_split"].is_null(),
        "{sc}"
    );
    // VLMEvalKit shows one letter: the 4-option single choice only (not 30 positions, not a
    // set of letters, a count, ranges or text); a dataset per split, here train alone.
    let vlm = got["vlmevalkit"].as_object().unwrap();
    let names: Vec<&String> = vlm.keys().collect();
    assert_eq!(
        names,
        ["mvfn_sc_train.tsv", "mvfn_sc_train_CIRC.tsv"],
        "{got}"
    );
    assert_eq!(vlm["mvfn_sc_train.tsv"]["rows"], 40);
    assert_eq!(vlm["mvfn_sc_train_CIRC.tsv"]["rows"], 160);

    // A takedown of every video but v12, which has no sc and no rl item: the exports are
    // written again from what is left, without the two emptied tasks (lmms-eval cannot run a
    // task without documents) and without VLMEvalKit's sc files, and still score as evaluate.
    let mut args = vec!["takedown".to_string(), rel.to_str().unwrap().to_string()];
    args.extend((0..15).map(|i| format!("v{i:02}")).filter(|v| v != "v12"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(&args, d.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("rewrote  harness/lmms_eval"), "{out}");
    assert!(out.contains("rewrote  harness/vlmevalkit"), "{out}");
    // The model's answers to the items left.
    let preds = rel.join("predictions.jsonl");
    let left: String = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"v12:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&preds, left).unwrap();
    let (report, got) = scored_alike(&rel, "mvfn");
    let empty: Vec<&str> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["items"] == 0)
        .map(|t| t["task"].as_str().unwrap())
        .collect();
    assert_eq!(empty, ["sc", "rl"]);
    let tasks: Vec<&String> = got["tasks"].as_object().unwrap().keys().collect();
    assert_eq!(
        tasks,
        [
            "mvfn_cnt", "mvfn_mc", "mvfn_ot", "mvfn_pos", "mvfn_tg", "mvfn_tr"
        ]
    );
    assert_eq!(got["groups"]["mvfn_tasks"].as_array().unwrap().len(), 6);
    assert_eq!(got["vlmevalkit"], serde_json::json!({}));
    assert!(!rel.join("harness/lmms_eval/mvfn_sc.yaml").exists());
}

/// `evaluate` and the exported functions on the same answers: every item read alike (the
/// checker lists any that is not) and every task's metrics equal (1e-9). Returns evaluate's
/// report and the checker's output, with `compared` the values compared.
pub(crate) fn scored_alike(rel: &Path, name: &str) -> (Value, Value) {
    let report = evaluate(rel);
    let mut got = check(rel);
    assert_eq!(got["items_differ"], serde_json::json!([]), "{got}");
    let mut compared = 0;
    for t in report["tasks"].as_array().unwrap() {
        let task = t["task"].as_str().unwrap();
        if t["items"] == 0 {
            continue;
        }
        let mine = &got["tasks"][format!("{name}_{task}")];
        for (m, v) in t["metrics"].as_object().unwrap() {
            for (key, field) in [(m.clone(), "mean"), (format!("{m}_se"), "se")] {
                let (a, b) = (v[field].as_f64().unwrap(), mine[&key].as_f64().unwrap());
                assert!(
                    (a - b).abs() < 1e-9,
                    "{task} {key}: evaluate {a}, harness {b}"
                );
                compared += 1;
            }
        }
        if let Some(f) = t["macro_f1"].as_f64() {
            let b = mine["macro_f1"].as_f64().unwrap();
            assert!(
                (f - b).abs() < 1e-9,
                "{task} macro_f1: evaluate {f}, harness {b}"
            );
            compared += 1;
        }
        // Judged metrics are not in the harness task: evaluate leaves them to --judge too.
        for m in t["not_scored"].as_array().unwrap() {
            assert!(mine.get(m.as_str().unwrap()).is_none(), "{task}: {m}");
        }
    }
    got["compared"] = compared.into();
    (report, got)
}

/// A release with train / validation / test files: every lmms-eval task lists the test files
/// alone as `test` and scores them (`test_split: test`), the validation files as
/// `validation_split`, the train files as `fewshot_split` only; the test split's documents
/// score as `evaluate` scores it by default; VLMEvalKit gets a TSV pair per split, each holding
/// that split's items.
#[test]
fn task_exports_score_the_test_split_and_keep_each_split_apart() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("mvfs");
    py(&["make", rel.to_str().unwrap(), "9", "splits"]);
    let o = run(
        &[
            "harness",
            rel.to_str().unwrap(),
            "--for",
            "lmms-eval",
            "--for",
            "vlmevalkit",
        ],
        d.path(),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (report, got) = scored_alike(&rel, "mvfs");
    assert_eq!(report["split"]["name"], "test", "{}", report["split"]);
    // Each task's rows per split, counted from the Parquet rows' own `split` column.
    let per_split = |task: &str| -> BTreeMap<String, usize> {
        let mut n = BTreeMap::new();
        for r in table_rows_file_all(&rel.join("tasks").join(task)) {
            *n.entry(r["split"].clone()).or_default() += 1;
        }
        n
    };
    let mut test_docs = 0;
    for (task, s) in got["splits"].as_object().unwrap() {
        let files = s["files"].as_object().unwrap();
        let keys: Vec<&String> = files.keys().collect();
        assert_eq!(keys, ["test", "train", "validation"], "{task}: {s}");
        for (split, list) in files {
            for f in list.as_array().unwrap() {
                let f = f.as_str().unwrap();
                let name = f.rsplit('/').next().unwrap();
                assert!(
                    name.starts_with(&format!("{split}-")),
                    "{task}: {f} under {split}"
                );
                // Every row of a file listed as test is a test row.
                for r in table_rows_file(&rel.join(f)) {
                    assert_eq!(&r["split"], split, "{task}: {f}");
                }
            }
        }
        assert_eq!(s["test_split"], "test", "{s}");
        assert_eq!(s["validation_split"], "validation", "{s}");
        assert_eq!(s["fewshot_split"], "train", "{s}");
        assert!(s["training_split"].is_null(), "{s}");
        test_docs += per_split(task.trim_start_matches("mvfs_"))["test"];
    }
    // The documents lmms-eval scored are the test rows, and `evaluate` scored as many.
    assert_eq!(got["docs"], test_docs);
    assert_eq!(report["split"]["scored"], test_docs);
    let vlm = got["vlmevalkit"].as_object().unwrap();
    let names: Vec<&String> = vlm.keys().collect();
    assert_eq!(
        names,
        [
            "mvfs_sc_test.tsv",
            "mvfs_sc_test_CIRC.tsv",
            "mvfs_sc_train.tsv",
            "mvfs_sc_train_CIRC.tsv",
            "mvfs_sc_validation.tsv",
            "mvfs_sc_validation_CIRC.tsv"
        ],
        "{got}"
    );
    let sc = per_split("sc");
    for split in ["test", "train", "validation"] {
        let t = &vlm[&format!("mvfs_sc_{split}.tsv")];
        assert_eq!(t["rows"], sc[split], "{split}: {t}");
        assert_eq!(t["splits"], serde_json::json!([split]), "{t}");
        assert_eq!(t["l2"], serde_json::json!([split]), "{t}");
        assert_eq!(
            vlm[&format!("mvfs_sc_{split}_CIRC.tsv")]["rows"],
            4 * sc[split]
        );
    }
}
