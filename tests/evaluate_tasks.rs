//! `vidcurate evaluate` on a benchmark-task release: every format's metric against an
//! independent scorer (tests/readers/check_task_scores.py: numpy, scikit-learn, rouge-score) on
//! a generated release with messy answers, and predictions that cannot be scored.

use crate::caption::openai_structured;
use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{OPENAI_KEY, prompt_of};
use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

pub(crate) fn py(args: &[&str]) -> String {
    crate::release::reader("check_task_scores.py", args)
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

/// The stand-in judge (not a model): an element is stated when the answer holds its first
/// word; an element with "smoke" gets an answer that is never JSON (unjudged after its repair);
/// the ratings are 3, 4 and 2, and the second sample (seed 1) rates completeness 1.
pub(crate) fn stand_in_judge(r: &Request) -> Response {
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let prompt = prompt_of(r);
    if let Some(rest) = prompt.split("Reference element: ").nth(1) {
        let element = rest.split('\n').next().unwrap().to_lowercase();
        let answer = prompt
            .split("The answer:\n")
            .nth(1)
            .unwrap()
            .split("\n\nDoes the answer")
            .next()
            .unwrap()
            .to_lowercase();
        if element.contains("smoke") {
            return openai_structured("I would rather not say.");
        }
        let first = element.split_whitespace().next().unwrap_or("");
        let hit = answer.contains(first);
        return openai_structured(&serde_json::json!({"hit": hit, "reason": "read"}).to_string());
    }
    let props = &v["response_format"]["json_schema"]["schema"]["properties"];
    let mut out = serde_json::Map::new();
    for (k, x) in [
        ("factual_consistency", 3),
        ("theme_relevance", 4),
        ("completeness", 2),
    ] {
        if props.get(k).is_some() {
            let x = if k == "completeness" && v["seed"] == 1 {
                1
            } else {
                x
            };
            out.insert(k.into(), serde_json::json!(x));
        }
    }
    out.insert("reason".into(), serde_json::json!("rated"));
    openai_structured(&Value::Object(out).to_string())
}

#[test]
fn judged_metrics_are_paid_once_named_by_their_judge_and_never_guessed() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    let r = rel.to_str().unwrap();
    py(&["make", r, "31"]);
    let server = FakeServer::start(stand_in_judge);
    let judge = d.path().join("judge.toml");
    write(
        &judge,
        &format!(
            "[services.judge]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0\n\n[judge]\nservice = \"judge\"\nmodel = \"stand-in-judge\"\nsamples = 2\n",
            server.url()
        ),
    );
    let preds = rel.join("predictions.jsonl");
    let evaluate = |extra: &[&str]| {
        let mut args = vec![
            "evaluate",
            r,
            preds.to_str().unwrap(),
            "--judge",
            judge.to_str().unwrap(),
        ];
        args.extend(extra);
        Command::new(bin())
            .args(&args)
            .current_dir(d.path())
            .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
            .output()
            .unwrap()
    };
    let o = evaluate(&["--dry-run"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dry = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(dry.contains("0 answered by the cache"), "{dry}");
    assert_eq!(server.requests().len(), 0, "a dry run calls nothing");
    let items = rel.join("items.jsonl");
    let o = evaluate(&["--json", "--items-out", items.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(rel.join("judged.json"), &o.stdout).unwrap();
    let calls = server.requests().len();
    // The report's first line says which split it scored (every item: the release has no
    // test split); the judge's line follows.
    assert!(
        dry.starts_with(
            "split: all (320 items; the release has no test split, its splits: train)\n"
        ),
        "{dry}"
    );
    let judge_line = dry.lines().find(|l| l.starts_with("judge ")).unwrap();
    let planned = crate::util::number_after(judge_line, ": ") as u64;
    // Every planned judgment, plus one repair for each that never answers in JSON.
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let unjudged: u64 = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["unjudged"].as_object().unwrap().values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(calls as u64, planned + unjudged, "{dry}");
    assert!(unjudged > 0, "some elements stay unjudged");
    let counts: Value = serde_json::from_str(py(&["check_judged", r]).trim()).unwrap();
    assert!(counts["items"].as_u64().unwrap() > 20, "{counts}");
    assert_eq!(report["judge"]["model"], "stand-in-judge");
    let ot = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == "ot")
        .unwrap();
    // Completeness 2 for every answer read; 0 for those missing or unread (wrong, no call).
    let read = ot["read"].as_f64().unwrap();
    let mean = ot["metrics"]["completeness"]["mean"].as_f64().unwrap();
    assert!((mean - 2.0 * read / 40.0).abs() < 1e-12, "{ot}");
    assert_eq!(ot["not_scored"], serde_json::json!([]));
    // Two samples: completeness 2 then 1 disagrees on every item; hits agree.
    assert!(
        ot["self_agreement"]["completeness"].as_f64().unwrap() < 0.5,
        "{ot}"
    );
    let rl = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == "rl")
        .unwrap();
    assert_eq!(rl["self_agreement"]["hit_rate.elements"], 1.0, "{rl}");
    // Again: every judgment comes from the cache, and the dry run says so.
    let o = evaluate(&[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("judged by stand-in-judge on judge"), "{text}");
    assert!(text.contains("unjudged"), "{text}");
    assert_eq!(
        server.requests().len(),
        calls,
        "a second evaluate makes no judge call"
    );
    let o = evaluate(&["--dry-run"]);
    let dry2 = String::from_utf8_lossy(&o.stdout);
    // Every answer of the judge is cached, those it gave in no JSON too (and their repairs).
    assert!(
        dry2.contains(&format!(
            "{planned} calls, {planned} answered by the cache, 0 to make"
        )),
        "{dry2}"
    );
}

#[test]
fn a_judge_file_that_cannot_be_used_exits_2_at_its_line_and_key() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    py(&["make", rel.to_str().unwrap(), "41"]);
    let preds = rel.join("predictions.jsonl");
    for (text, want) in [
        (
            "[services.judge]\nbase_url = \"http://127.0.0.1:9/v1/\"\n\n[judge]\nservice = \"other\"\nmodel = \"m\"\n",
            "judge.toml:5",
        ),
        (
            "[services.judge]\nbase_url = \"http://127.0.0.1:9/v1/\"\n\n[judge]\nservice = \"judge\"\nmodel = \"m\"\nsamples = 3\n",
            "samples",
        ),
        (
            "[services.judge]\nbase_url = \"http://127.0.0.1:9/v1/\"\n\n[judge]\nservice = \"judge\"\nmodle = \"m\"\n",
            "modle",
        ),
    ] {
        let judge = d.path().join("judge.toml");
        write(&judge, text);
        let o = run(
            &[
                "evaluate",
                rel.to_str().unwrap(),
                preds.to_str().unwrap(),
                "--judge",
                judge.to_str().unwrap(),
            ],
            d.path(),
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(want) && e.contains("judge.toml"),
            "{want} not in {e}"
        );
    }
}

/// A release with train / validation / test files (the generator's `splits`; the answers cover
/// every split): `evaluate` scores the test split by default, equal to the independent scorer
/// over the rows whose `split` is test, which also counts them; `--split all` scores every
/// item, `--split validation` that split, an unknown name exits 2 naming the splits; prompt
/// variants, the judge and the project for people take the test split too.
#[test]
fn the_test_split_is_scored_by_default_and_every_split_on_request() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    let r = rel.to_str().unwrap();
    py(&["make", r, "7", "splits"]);
    let preds = rel.join("predictions.jsonl");
    let items = rel.join("items.jsonl");
    let evaluate = |extra: &[&str]| -> std::process::Output {
        let mut args = vec!["evaluate", r, preds.to_str().unwrap()];
        args.extend(extra);
        run(&args, d.path())
    };
    let stdout = |o: &std::process::Output| {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let mut scored = BTreeMap::new();
    for (split, flags) in [
        ("test", vec![]),
        ("all", vec!["--split", "all"]),
        ("validation", vec!["--split", "validation"]),
    ] {
        let mut args = flags.clone();
        args.extend(["--json", "--by", "label", "--items-out"]);
        args.push(items.to_str().unwrap());
        let out = stdout(&evaluate(&args));
        std::fs::write(rel.join("report.json"), &out).unwrap();
        // Every item value, mean, standard error and Macro-F1 over the split's rows alone.
        let counts: Value = serde_json::from_str(py(&["check", r, split]).trim()).unwrap();
        let report: Value = serde_json::from_str(&out).unwrap();
        let s = &report["split"];
        assert_eq!(s["name"], split, "{s}");
        assert_eq!(s["default"], split == "test", "{s}");
        assert_eq!(s["scored"], counts["items"], "{s} {counts}");
        assert_eq!(s["total"], counts["release_items"], "{s} {counts}");
        assert_eq!(
            s["other_predictions"], counts["other_predictions"],
            "{s} {counts}"
        );
        assert_eq!(
            report["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["items"].as_u64().unwrap())
                .sum::<u64>(),
            counts["items"].as_u64().unwrap()
        );
        let (n, total, other) = (
            &counts["items"],
            &counts["release_items"],
            &counts["other_predictions"],
        );
        let first = if split == "all" {
            format!("split: all ({total} items; every split: test, train, validation)")
        } else {
            format!(
                "split: {split} ({n} of {total} items; {other} predictions of other splits not scored; --split all for every split)"
            )
        };
        let text = stdout(&evaluate(&flags));
        assert_eq!(text.lines().next(), Some(first.as_str()), "{text}");
        scored.insert(split, n.as_u64().unwrap());
    }
    // 8 tasks of 40 items; 4 of the 15 videos are test, 2 validation.
    assert_eq!(scored["all"], 320);
    assert!(
        0 < scored["test"] && scored["test"] + scored["validation"] < 320,
        "{scored:?}"
    );
    let o = evaluate(&["--split", "dev"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--split dev:") && e.contains("(its splits: test, train, validation; or all"),
        "{e}"
    );

    // Prompt variants on the test split: the independent scorer over its tagged items.
    py(&["variants", r, "8"]);
    let mut args = vec!["evaluate".to_string(), r.to_string(), "--json".into()];
    for v in ["zero-shot", "mvfnd-cot", "all-mvfnd-cot"] {
        args.push("--variant".into());
        args.push(format!(
            "{v}={}",
            rel.join(format!("var_{v}.jsonl")).display()
        ));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = stdout(&run(&argv, d.path()));
    std::fs::write(rel.join("variants.json"), &out).unwrap();
    let counts: Value = serde_json::from_str(py(&["check_variants", r, "test"]).trim()).unwrap();
    assert_eq!(counts["rows"], 6, "{counts}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["split"]["name"], "test");
    assert_eq!(
        report["rows"][0]["scores"]["accuracy"]["n"],
        counts["items"]
    );

    // The judge judges the test split's answers only; its hit rates as the replayed rule's.
    let server = FakeServer::start(stand_in_judge);
    let judge = d.path().join("judge.toml");
    write(
        &judge,
        &format!(
            "[services.judge]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n\n[judge]\nservice = \"judge\"\nmodel = \"stand-in-judge\"\n",
            server.url()
        ),
    );
    let judged = |extra: &[&str]| {
        let mut args = vec!["evaluate", r, preds.to_str().unwrap(), "--judge"];
        args.push(judge.to_str().unwrap());
        args.extend(extra);
        Command::new(bin())
            .args(&args)
            .current_dir(d.path())
            .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
            .output()
            .unwrap()
    };
    let dry = stdout(&judged(&["--dry-run"]));
    assert!(dry.starts_with("split: test ("), "{dry}");
    let all_dry = stdout(&judged(&["--dry-run", "--split", "all"]));
    let calls = |t: &str| -> u64 {
        let l = t.lines().find(|l| l.starts_with("judge ")).unwrap();
        l.split(": ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        0 < calls(&dry) && calls(&dry) < calls(&all_dry),
        "{dry}{all_dry}"
    );
    let out = stdout(&judged(&["--json", "--items-out", items.to_str().unwrap()]));
    std::fs::write(rel.join("judged.json"), &out).unwrap();
    let counts: Value = serde_json::from_str(py(&["check_judged", r, "test"]).trim()).unwrap();
    assert!(counts["items"].as_u64().unwrap() > 0, "{counts}");

    // The project for people holds the test split's answers only.
    let people = d.path().join("people");
    stdout(&evaluate(&["--people-out", people.to_str().unwrap()]));
    let test_items: std::collections::BTreeSet<String> = table_rows_file_all(&rel.join("tasks/rl"))
        .into_iter()
        .chain(table_rows_file_all(&rel.join("tasks/ot")))
        .filter(|r| r["split"] == "test")
        .map(|r| r["item_id"].clone())
        .collect();
    let tasks: Value =
        serde_json::from_slice(&std::fs::read(people.join("tasks.json")).unwrap()).unwrap();
    let ids: Vec<&str> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["data"]["item_id"].as_str().unwrap())
        .collect();
    assert!(!ids.is_empty());
    assert!(ids.iter().all(|i| test_items.contains(*i)), "{ids:?}");
}
