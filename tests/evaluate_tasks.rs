//! `vidcurate evaluate` on a benchmark-task release: every format's metric against an
//! independent scorer (tests/readers/check_task_scores.py: numpy, scikit-learn, rouge-score) on
//! a generated release with messy answers, and predictions that cannot be scored.

use crate::release::readers_python;
use crate::util::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/readers/check_task_scores.py")
}

fn py(args: &[&str]) -> String {
    let o = Command::new(readers_python())
        .arg(script())
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "check_task_scores.py {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn every_format_scores_as_an_independent_implementation_does() {
    let d = tempfile::tempdir().unwrap();
    for seed in ["3", "11"] {
        let rel = d.path().join(format!("rel{seed}"));
        let r = rel.to_str().unwrap();
        py(&["make", r, seed]);
        let preds = rel.join("predictions.jsonl");
        let items = rel.join("items.jsonl");
        let o = run(
            &[
                "evaluate",
                r,
                preds.to_str().unwrap(),
                "--json",
                "--by",
                "label",
                "--items-out",
                items.to_str().unwrap(),
            ],
            d.path(),
        );
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::write(rel.join("report.json"), &o.stdout).unwrap();
        let counts: Value = serde_json::from_str(py(&["check", r]).trim()).unwrap();
        // 8 tasks of 40 items; 10 metric values per item set; the planted shapes all checked.
        assert_eq!(counts["values"], 400, "{counts}");
        assert_eq!(counts["means"], 11, "{counts}");
        assert!(counts["planted"].as_u64().unwrap() > 100, "{counts}");
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        let tasks = report["tasks"].as_array().unwrap();
        let tg = tasks.iter().find(|t| t["task"] == "tg").unwrap();
        assert!(
            tg["unread_codes"]["missing_result_tag"].as_u64().unwrap() > 0,
            "{tg}"
        );
        assert_eq!(tg["items"], 40);
        let rl = tasks.iter().find(|t| t["task"] == "rl").unwrap();
        assert_eq!(rl["not_scored"], serde_json::json!(["hit_rate.elements"]));
        let by = tasks[0]["by"].as_object().unwrap();
        assert_eq!(
            by.values()
                .map(|m| m["accuracy"]["n"].as_u64().unwrap())
                .sum::<u64>(),
            40
        );
    }
    // The table says which metrics need a judge instead of printing a number.
    let rel = d.path().join("rel3");
    let o = run(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            rel.join("predictions.jsonl").to_str().unwrap(),
        ],
        d.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("hit_rate.elements") && l.contains("judge")),
        "{text}"
    );
    assert!(text.contains("unread answers by reason:"), "{text}");
}

#[test]
fn prompt_variants_print_table_4_with_paired_differences() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    let r = rel.to_str().unwrap();
    py(&["make", r, "21"]);
    py(&["variants", r, "22"]);
    let mut args = vec!["evaluate".to_string(), r.to_string()];
    for v in ["zero-shot", "mvfnd-cot", "all-mvfnd-cot"] {
        args.push("--variant".into());
        args.push(format!(
            "{v}={}",
            rel.join(format!("var_{v}.jsonl")).display()
        ));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut json = argv.clone();
    json.push("--json");
    let o = run(&json, d.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(rel.join("variants.json"), &o.stdout).unwrap();
    let counts: Value = serde_json::from_str(py(&["check_variants", r]).trim()).unwrap();
    // 2 models × 3 variants; 4 numbers each, 4 more for each of the 4 differences.
    assert_eq!(counts["rows"], 6, "{counts}");
    assert_eq!(counts["numbers"], 40, "{counts}");
    let o = run(&argv, d.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("zero-shot ACC / M-F1"), "{text}");
    assert!(
        text.lines().filter(|l| l.starts_with("tg     m-")).count() == 2,
        "one Table 4 line per model: {text}"
    );
    assert!(text.contains("paired differences from zero-shot"), "{text}");
    // A variant named twice, or without its file.
    for (bad, want) in [
        (
            format!("zero-shot={}", rel.join("var_zero-shot.jsonl").display()),
            "named twice",
        ),
        ("mvfnd-cot".to_string(), "expected NAME=FILE"),
    ] {
        let mut a = argv.clone();
        a.extend(["--variant", bad.as_str()]);
        let o = run(&a, d.path());
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(want), "{want} not in {e}");
    }
}

#[test]
fn predictions_for_unknown_or_repeated_items_exit_2_at_the_line() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    py(&["make", rel.to_str().unwrap(), "5"]);
    let preds = std::fs::read_to_string(rel.join("predictions.jsonl")).unwrap();
    let first = preds.lines().next().unwrap().to_string();
    for (name, text, want) in [
        (
            "unknown.jsonl",
            format!("{first}\n{{\"item_id\": \"v99:sc:0\", \"prediction\": \"A\"}}\n"),
            "unknown.jsonl:2: item_id \"v99:sc:0\" is not in the release",
        ),
        (
            "twice.jsonl",
            format!("{first}\n{first}\n"),
            "twice.jsonl:2: item",
        ),
    ] {
        let p = d.path().join(name);
        write(&p, &text);
        let o = run(
            &["evaluate", rel.to_str().unwrap(), p.to_str().unwrap()],
            d.path(),
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(want), "{want} not in {e}");
    }
}
