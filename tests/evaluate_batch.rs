//! `vidcurate evaluate --judge FILE` with the judge's service in `mode = "batch"`: the stand-in
//! judge of tests/evaluate_tasks.rs answers both a live fake server and the fake OpenAI batch
//! server of tests/batch.rs (files + batches, every batch complete at its first poll), so the
//! batch judge's scores can be held against the live judge's, its calls counted by kind, and a
//! killed evaluate's batch found again instead of paid for twice.

use crate::batch::{Fake, kill_and_forget_the_batch_id, multipart_part, posts};
use crate::evaluate_tasks::{py, stand_in_judge};
use crate::fake_http::FakeServer;
use crate::judge::OPENAI_KEY;
use crate::util::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;

fn judge_file(path: &Path, url: &str, service: &str) {
    write(
        path,
        &format!(
            "[services.judge]\nbase_url = \"{url}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0\n{service}\n\n[judge]\nservice = \"judge\"\nmodel = \"stand-in-judge\"\nsamples = 2\n"
        ),
    );
}

const BATCH: &str = "mode = \"batch\"\nbatch_poll_secs = 0.05";

fn evaluate_command(rel: &Path, judge: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.arg("evaluate")
        .arg(rel)
        .arg(rel.join("predictions.jsonl"))
        .arg("--judge")
        .arg(judge)
        .args(extra)
        .current_dir(rel)
        .env("RUST_LOG", "warn")
        .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY);
    c
}

fn evaluate(rel: &Path, judge: &Path, extra: &[&str]) -> Output {
    let o = evaluate_command(rel, judge, extra).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    o
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The dollars at the end of a dry run's line.
fn usd(dry: &Output) -> f64 {
    let text = String::from_utf8_lossy(&dry.stdout);
    let after = text.split('$').nth(1).unwrap_or_else(|| panic!("{text}"));
    let n: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    n.parse().unwrap()
}

/// The request bodies a server was sent live, in a canonical text, sorted.
fn live_bodies(s: &FakeServer) -> Vec<String> {
    let mut out: Vec<String> = s
        .requests()
        .iter()
        .filter(|(r, _)| r.path == "/v1/chat/completions")
        .map(|(r, _)| {
            serde_json::from_slice::<Value>(&r.body)
                .unwrap()
                .to_string()
        })
        .collect();
    out.sort();
    out
}

/// The request bodies of every batch input file uploaded to a server, as `live_bodies`.
fn batch_bodies(s: &FakeServer) -> Vec<String> {
    let mut out = vec![];
    for (r, _) in s.requests() {
        if r.method == "POST" && r.path == "/v1/files" {
            let file = multipart_part(&r, "file").unwrap();
            for line in String::from_utf8(file).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["url"], "/v1/chat/completions");
                out.push(v["body"].to_string());
            }
        }
    }
    out.sort();
    out
}

/// `a` and `b` hold the same values, numbers to 1e-12 (a standard error's last digit depends on
/// the order its sums run in).
fn assert_same(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                "{at}: {x} != {y}"
            );
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (k, v) in x {
                assert_same(v, &y[k], &format!("{at}.{k}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                assert_same(v, w, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

fn count(s: &FakeServer, method: &str, path: impl Fn(&str) -> bool) -> usize {
    s.requests()
        .iter()
        .filter(|(r, _)| r.method == method && path(&r.path))
        .count()
}

#[test]
fn a_batch_judge_scores_as_the_live_one_through_batches_only_and_pays_once() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    py(&["make", rel.to_str().unwrap(), "31"]);
    let live = FakeServer::start(stand_in_judge);
    let live_judge = d.path().join("live.toml");
    judge_file(&live_judge, &live.url(), "");
    let live_cache = d.path().join("live/responses.sqlite");
    let lc = ["--judge-cache", live_cache.to_str().unwrap()];
    let fake = Fake::answering(stand_in_judge);
    let server = fake.server();
    let judge = d.path().join("judge.toml");
    judge_file(&judge, &server.url(), BATCH);

    // The dry run prices batch mode at the batch rate (half the live one by default).
    let live_usd = usd(&evaluate(
        &rel,
        &live_judge,
        &[&lc[..], &["--dry-run"]].concat(),
    ));
    let dry = evaluate(&rel, &judge, &["--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.contains("at batch prices"), "{text}");
    assert!(live_usd > 0.001, "{live_usd}");
    assert!(
        (usd(&dry) - live_usd / 2.0).abs() < 2e-4,
        "{text} vs {live_usd}"
    );
    assert_eq!(server.requests().len(), 0, "a dry run calls nothing");

    let want: Value = serde_json::from_slice(
        &evaluate(&rel, &live_judge, &[&lc[..], &["--json"]].concat()).stdout,
    )
    .unwrap();
    let o = evaluate(&rel, &judge, &["--json"]);
    let got: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Every number, the unjudged counts and the judge's self-agreement as the live judge's.
    assert_same(&got, &want, "report");
    assert_eq!(got["judge"]["model"], "stand-in-judge");
    assert_eq!(got["judge"]["service"], "judge");
    let unjudged: u64 = got["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["unjudged"].as_object().unwrap().values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(unjudged > 0, "some answers break their schema: {got}");
    let e = stderr(&o);
    assert!(e.contains("sent in 1 batch(es); waiting for them"), "{e}");

    // Only the batch protocol: the first judgments, then their repairs in a second batch.
    assert_eq!(posts(&server, "/v1/chat/completions"), 0, "no live call");
    assert_eq!(posts(&server, "/v1/files"), 2);
    assert_eq!(posts(&server, "/v1/batches"), 2);
    assert!(count(&server, "GET", |p| p.starts_with("/v1/batches/")) >= 2);
    assert!(count(&server, "GET", |p| p.ends_with("/content")) >= 2);
    // The batches asked what the live judge asked, once each.
    assert_eq!(batch_bodies(&server), live_bodies(&live));
    let calls = server.requests().len();

    // Again: everything from the cache, not one call; the table names the judge.
    let o = evaluate(&rel, &judge, &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("judged by stand-in-judge on judge"), "{text}");
    assert!(!stderr(&o).contains("sent in"), "{}", stderr(&o));
    assert_eq!(
        server.requests().len(),
        calls,
        "a second evaluate calls nothing"
    );
    let dry = evaluate(&rel, &judge, &["--dry-run"]);
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("0 to make"),
        "{}",
        String::from_utf8_lossy(&dry.stdout)
    );
}

#[test]
fn an_evaluate_killed_while_its_batch_runs_finds_that_batch_again() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    py(&["make", rel.to_str().unwrap(), "37"]);
    let fake = Fake::answering(stand_in_judge);
    fake.hold.store(true, Ordering::SeqCst);
    let server = fake.server();
    let judge = d.path().join("judge.toml");
    judge_file(&judge, &server.url(), BATCH);
    let mut child = evaluate_command(&rel, &judge, &["--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let jobs = rel.join(".judge/batches/judge/jobs.json");
    // The kill loses the batch id too: the next evaluate finds the batch by its input file.
    kill_and_forget_the_batch_id(&mut child, || posts(&server, "/v1/batches") == 1, &jobs);
    fake.hold.store(false, Ordering::SeqCst);
    let o = evaluate(&rel, &judge, &["--json"]);
    let e = stderr(&o);
    assert!(e.contains("an earlier evaluate sent are not in yet"), "{e}");
    // One batch of first judgments (created once, before the kill), one of repairs.
    assert_eq!(posts(&server, "/v1/batches"), 2, "{e}");
    assert_eq!(posts(&server, "/v1/files"), 2, "{e}");
    assert_eq!(posts(&server, "/v1/chat/completions"), 0);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["judge"]["model"], "stand-in-judge");
    for t in r["tasks"].as_array().unwrap() {
        assert_eq!(t["not_scored"], serde_json::json!([]), "{t}");
    }
}

#[test]
fn an_offline_judge_exits_2_naming_its_file_and_key() {
    let d = tempfile::tempdir().unwrap();
    let rel = d.path().join("rel");
    py(&["make", rel.to_str().unwrap(), "41"]);
    let judge = d.path().join("judge.toml");
    judge_file(&judge, "http://127.0.0.1:9/", "mode = \"offline\"");
    let o = evaluate_command(&rel, &judge, &[]).output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("judge.toml:7") && e.contains("services.judge.mode") && e.contains("\"batch\""),
        "{e}"
    );
}
