//! `release --harness lmms-eval --harness vlmevalkit`: the exported lmms-eval `utils.py` run as
//! plain Python over every released item (tests/readers/check_harness.py) scores as `vidcurate
//! evaluate` does, and the VLMEvalKit TSVs follow VLMEvalKit's loader.
//!
//! VLMEvalKit's rules, from its source (open-compass/VLMEvalKit):
//! - `vlmeval/dataset/__init__.py::build_dataset`: an unknown name loads `$LMUData/<name>.tsv`;
//!   a `question` column with `A` and `B` and an `image` or `image_path` column make it a
//!   `CustomMCQDataset`;
//! - `vlmeval/dataset/image_base.py::ImageBaseDataset.__init__` and `dump_image`: rows whose
//!   `image` is missing are dropped; an `image` of at most 64 characters is the `index` of
//!   another row whose (longer) `image` it shares; `image` and `image_path` are read with
//!   `toliststr` (a `[...]` literal is a list); with a list of images, `image_path` names one
//!   file per image;
//! - `vlmeval/dataset/utils/multiple_choice.py::mcq_circular_eval`: indices are integers, the
//!   originals below 1,000,000, and a rotated copy's `index % 1_000_000` is its original's.

use crate::judge::err;
use crate::need_ffmpeg;
use crate::questions::{question_run, split_and_release_at};
use crate::util::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

fn lcg(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s >> 33
}

/// A raw answer naming letter `k` in one of the shapes models write, or one naming nothing.
fn shape(x: u64, k: usize, shown: &[String]) -> String {
    let l = (b'A' + k as u8) as char;
    match x % 12 {
        0..=2 => l.to_string(),
        3 => format!("({})", l.to_ascii_lowercase()),
        4 => format!("Answer: {l}"),
        5 => format!("The answer is {l} because it is shown."),
        6 => format!("答案：{l}"),
        7..=8 => shown[k].clone(),
        9 => String::new(),
        10 => "I cannot tell from these frames.".into(),
        _ => "Answer: A or B, the answer is C".into(),
    }
}

fn close(a: &Value, b: &Value, what: &str) {
    let (x, y) = (a.as_f64(), b.as_f64());
    assert!(
        x.is_some() && y.is_some() && (x.unwrap() - y.unwrap()).abs() < 1e-9,
        "{what}: evaluate {a} vs harness {b}"
    );
}

#[test]
fn exported_harnesses_score_as_evaluate_and_follow_vlmevalkits_loader() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let (_server, out) = question_run(dir.path(), 4);
    let rel = dir.path().join("release");
    let flags = ["--harness", "lmms-eval", "--harness", "vlmevalkit"];
    // Two test videos, so that the test split's scores have clustered standard errors.
    split_and_release_at(&out, &rel, dir.path(), "25/25/50", &flags);
    // The checksums cover the harness files written after them.
    vidcurate::release::integrity::verify(&rel).unwrap();
    let croissant = std::fs::read_to_string(rel.join("croissant.json")).unwrap();
    assert!(croissant.contains("\"harness/lmms_eval/utils.py\""));
    assert!(croissant.contains("\"harness/vlmevalkit/release_test_CIRC.tsv\""));

    // Every item under every rotation, answered mostly right, in every shape; one item never
    // answered and one rotation of another missing.
    let rot = dir.path().join("rotations.jsonl");
    let o = run(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            "--rotations-out",
            rot.to_str().unwrap(),
            "--split",
            "all",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let variants: Vec<Value> = std::fs::read_to_string(&rot)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rows = table_rows_file_all(&rel.join("questions"));
    let answers: HashMap<String, u64> = rows
        .iter()
        .map(|r| {
            (
                r["item_id"].clone(),
                (r["answer"].as_bytes()[0] - b'A') as u64,
            )
        })
        .collect();
    assert_eq!(answers.len(), 12, "4 videos of 3 items");
    assert_eq!(variants.len(), 12 * 4);
    // Items per split, from the rows' own `split` column; lmms-eval and `evaluate` score test.
    let mut per_split: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        *per_split.entry(r["split"].clone()).or_default() += 1;
    }
    let items = per_split["test"];
    assert_eq!(items, 6, "2 test videos of 3 items: {per_split:?}");
    let skip_item = variants[0]["item_id"].as_str().unwrap().to_string();
    let skip_rot = (variants[9]["item_id"].as_str().unwrap().to_string(), 3);
    let mut seed = 11u64;
    let mut csv = String::from("item_id,rotation,prediction\n");
    for v in &variants {
        let id = v["item_id"].as_str().unwrap();
        let r = v["rotation"].as_u64().unwrap();
        if id == skip_item || (id == skip_rot.0 && r == skip_rot.1) {
            continue;
        }
        let shown: Vec<String> = serde_json::from_value(v["options"].clone()).unwrap();
        let k = if lcg(&mut seed) % 8 == 0 {
            (lcg(&mut seed) % 4) as usize
        } else {
            ((answers[id] + 4 - r) % 4) as usize
        };
        let a = shape(lcg(&mut seed), k, &shown);
        csv += &format!("\"{id}\",{r},\"{}\"\n", a.replace('"', "\"\""));
    }
    let preds = dir.path().join("preds.csv");
    write(&preds, &csv);
    let o = run(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--json",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let ours: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ours["split"]["name"], "test");
    assert_eq!(ours["split"]["scored"], items);
    assert!(
        ours["all"]["micro"]["unparsed"].as_u64().unwrap() > 0,
        "{ours}"
    );

    let o = std::process::Command::new(crate::release::readers_python())
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/readers/check_harness.py"),
        )
        .arg(&rel)
        .arg(&preds)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .env("HF_DATASETS_CACHE", dir.path().join("hf/datasets"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "check_harness.py: {}", err(&o));
    let theirs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &theirs["tasks"];

    // Every task lists each split's files under its own name, scores test alone, keeps
    // validation as validation and train for few-shot examples only.
    for (task, s) in theirs["splits"].as_object().unwrap() {
        let files = s["files"].as_object().unwrap();
        for (split, list) in files {
            let list: Vec<&str> = list
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            assert!(!list.is_empty(), "{task}: {s}");
            for f in list {
                assert!(
                    f.starts_with(&format!("questions/{split}-")),
                    "{task}: {f} under {split}"
                );
                for r in table_rows_file(&rel.join(f)) {
                    assert_eq!(&r["split"], split, "{task}: {f}");
                }
            }
        }
        assert_eq!(files.len(), 3, "{task}: {s}");
        assert_eq!(s["test_split"], "test", "{s}");
        assert_eq!(s["validation_split"], "validation", "{s}");
        assert_eq!(s["fewshot_split"], "train", "{s}");
        assert!(s["training_split"].is_null(), "{s}");
    }

    // One task per level, each equal to evaluate's level score and clustered error.
    let levels = ours["level_order"].as_array().unwrap();
    assert!(levels.len() >= 2, "{ours}");
    let mut level_docs = 0;
    for l in levels {
        let l = l.as_str().unwrap();
        let task = format!("release_{}", vidcurate::release::harness::ident(l));
        let s = &ours["all"]["levels"][l];
        close(&s["accuracy"], &t[&task]["level_accuracy"], &task);
        close(&s["se"], &t[&task]["clustered_se"], &task);
        level_docs += theirs["docs"][&task].as_u64().unwrap();
    }
    assert_eq!(level_docs as usize, items);
    // The group's unweighted mean of the levels is the macro average, the headline.
    close(
        &ours["all"]["macro_avg"],
        &theirs["groups"]["release"]["level_accuracy"],
        "group",
    );
    assert_eq!(
        theirs["groups"]["release"]["members"].as_u64().unwrap() as usize,
        levels.len()
    );
    let all = &t["release_all"];
    close(&ours["all"]["macro_avg"], &all["macro_avg"], "macro");
    close(&ours["all"]["macro_se"], &all["macro_se"], "macro se");
    close(
        &ours["all"]["micro"]["accuracy"],
        &all["micro_avg"],
        "micro",
    );
    close(&ours["all"]["micro"]["se"], &all["micro_se"], "micro se");
    let c = &t["release_circular"];
    let oc = &ours["circular"];
    close(&oc["macro_avg"], &c["circular_macro_avg"], "circular macro");
    close(
        &oc["macro_se"],
        &c["circular_macro_se"],
        "circular macro se",
    );
    close(
        &oc["micro"]["accuracy"],
        &c["circular_micro_avg"],
        "circular micro",
    );
    close(
        &oc["micro"]["se"],
        &c["circular_micro_se"],
        "circular micro se",
    );
    assert_eq!(theirs["docs"]["release_all"], items);
    assert_eq!(theirs["docs"]["release_circular"], items * 4);
    // The scores are not degenerate: some items fall under CircularEval, some stay.
    let acc = |k: &str| ours[k]["micro"]["accuracy"].as_f64().unwrap();
    assert!(
        0.0 < acc("circular") && acc("circular") < acc("all"),
        "{ours}"
    );
    assert!(ours["all"]["micro"]["se"].as_f64().unwrap() > 0.0);
    // Every prompt shows the question and its lettered options; every doc has its frames.
    let docs: u64 = theirs["docs"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(theirs["prompts_with_letters"], docs);
    assert!(theirs["visuals"].as_u64().unwrap() >= docs, "{theirs}");

    // VLMEvalKit: a TSV pair per split; the columns, one row per item of the split (and per
    // rotation in _CIRC), the indices.
    let v = &theirs["vlmevalkit"];
    let names: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        [
            "release_test.tsv",
            "release_test_CIRC.tsv",
            "release_train.tsv",
            "release_train_CIRC.tsv",
            "release_validation.tsv",
            "release_validation_CIRC.tsv"
        ]
    );
    let want: Vec<&str> = vec![
        "index",
        "question",
        "A",
        "B",
        "C",
        "D",
        "answer",
        "category",
        "l2-category",
        "image",
        "image_path",
        "item_id",
        "video_id",
        "rotation",
    ];
    for (split, &n) in &per_split {
        for f in [
            format!("release_{split}.tsv"),
            format!("release_{split}_CIRC.tsv"),
        ] {
            let f = f.as_str();
            let cols: Vec<&str> = v[f]["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert_eq!(cols, want, "{f}");
            assert_eq!(v[f]["originals"], n, "{f}");
            assert_eq!(v[f]["checked"], v[f]["rows"], "{f}");
            assert_eq!(v[f]["l2"], serde_json::json!([split]), "{f}");
            assert!(v[f]["frames_per_row"][0].as_u64().unwrap() >= 1, "{f}");
        }
        let (plain, circ) = (
            &v[&format!("release_{split}.tsv")],
            &v[&format!("release_{split}_CIRC.tsv")],
        );
        assert_eq!(plain["rows"], n);
        assert!(plain["max_index"].as_u64().unwrap() < 1_000_000);
        assert_eq!(plain["group_sizes"], serde_json::json!([1]));
        assert_eq!(circ["rows"], n * 4);
        assert_eq!(
            circ["max_index"].as_u64().unwrap(),
            3_000_000 + n as u64 - 1
        );
        assert_eq!(circ["group_sizes"], serde_json::json!([4]));
    }

    // VLMEvalKit shows frames as images: a release without frames cannot be exported for it,
    // and asking for both exports writes neither (the folder still verifies).
    let bare = dir.path().join("bare");
    let o = run(
        &[
            "release",
            out.to_str().unwrap(),
            "--out",
            bare.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let both = ["--for", "lmms-eval", "--for", "vlmevalkit"];
    let o = run(
        &[&["harness", bare.to_str().unwrap()][..], &both].concat(),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("has no frames in the release"),
        "{}",
        err(&o)
    );
    assert!(!bare.join("harness").exists(), "nothing written");
    let o = run(&["verify", bare.to_str().unwrap()], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = run(
        &["harness", bare.to_str().unwrap(), "--for", "lmms-eval"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));

    // A file changed after release: the export refuses it and names the file.
    let shard = std::fs::read_dir(rel.join("questions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes.push(b'\n');
    std::fs::write(&shard, bytes).unwrap();
    let e = vidcurate::release::harness::export(
        &rel,
        &[vidcurate::release::harness::Harness::LmmsEval],
    )
    .unwrap_err();
    let name = shard.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        matches!(&e, vidcurate::error::RunError::Config(m) if m.contains(&name) && m.contains("changed after release")),
        "{e}"
    );
}
