//! The model stages against a real OpenAI-compatible server: llama.cpp's server (the xllamacpp
//! wheel scripts/setup.sh installs in data/venv-llama) on 127.0.0.1, serving a tiny random-weight
//! model the test writes itself (tests/llama/make_model.py), with a tiny vision projector
//! (make_mmproj.py) where images are wanted. What is tested is the protocol, not the answers:
//! - relevance: a random model's plain answers are no score, so relevance sends its one reminder
//!   and rejects each video with the raw answer kept;
//! - the server killed with -9 mid-run and started again on its port: the run waits, retries,
//!   and ends with the tables of a run that was never interrupted; killed for good, the run
//!   ends within its retries, naming the service, and a rerun asks only what never came;
//! - structured output: the server's grammar holds a random model to the `ask` stage's schema
//!   (frames and all) and to the judge's of `evaluate --judge`: every answer passes our check at
//!   once, and the judge's second evaluate is answered from its cache;
//! - refusals: an `ask` (vision) stage pointed at the text-only model rejects each video once,
//!   naming the service; batch mode against a server with no batch interface stops at once and
//!   says so; a prompt past the server's context is rejected once with the server's reason;
//!   and `run --dry-run` warns of the vision stage from the server's model list.

use crate::judge::{relevance_pipeline_with, run_with_key, url_manifest};
use crate::llama_server::{Llama, get, mmproj, model, tiny_server};
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn titles(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("clip{i:03}")).collect()
}

/// A relevance pipeline over `n` titles against the server at `url`, `rpm` requests a minute.
pub(crate) fn relevance(dir: &Path, url: &str, n: usize, rpm: u32) -> PathBuf {
    let t = titles(n);
    url_manifest(dir, &t.iter().map(String::as_str).collect::<Vec<_>>());
    relevance_pipeline_with(
        dir,
        url,
        &format!("timeout_secs = 10\nrequests_per_minute = {rpm}"),
        "",
        "retries = 6",
    )
}

/// Starts the run of `p` into `out`, and kills the server (-9) once it has answered `answers`
/// requests: the run, still going.
fn kill_after(p: &Path, out: &Path, server: &mut Llama, answers: usize) -> std::process::Child {
    let run = run_command(p, out)
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.answered() < answers {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill();
    run
}

#[test]
fn relevance_over_llama_cpp_reminds_once_then_rejects_with_the_raw_answer() {
    let d = tempfile::tempdir().unwrap();
    let server = tiny_server(d.path(), &[]);
    let p = relevance(d.path(), &server.url(), 4, 6000);
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), 4, "{rejects:?}");
    for r in &rejects {
        assert_eq!(r["reason"], "unparseable_score", "{r:?}");
        assert!(!r["detail"].is_empty(), "the raw answer is kept: {r:?}");
    }
    // Two answers per video: the first and the one after the reminder.
    let log = server.log_text();
    assert_eq!(server.answered(), 8, "{log}");
    // The answers' `usage` was read: the tokens the cache holds are those the server generated,
    // by its own log ("eval time = ... / N tokens" a request).
    let generated: u64 = log
        .lines()
        .filter(|l| l.contains(" eval time =") && !l.contains("prompt eval time"))
        .map(|l| {
            let after = l.split(" ms /").nth(1).unwrap_or_else(|| panic!("{l}"));
            after
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    let o = run(&["cache", "stats", out.to_str().unwrap()], d.path());
    let text = String::from_utf8_lossy(&o.stdout);
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("openai"))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .collect();
    let (tokens_in, tokens_out): (u64, u64) = (row[6].parse().unwrap(), row[7].parse().unwrap());
    assert!(
        generated > 0 && tokens_out == generated,
        "{generated}: {text}"
    );
    assert!(tokens_in > 8 * 50, "{text}");
}

#[test]
fn llama_cpp_killed_mid_run_and_started_again_gives_the_uninterrupted_tables() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let n = 120;
    let volatile = ["rejected_at", "latency_ms", "cost_usd"];

    let calm_dir = d.path().join("calm");
    std::fs::create_dir(&calm_dir).unwrap();
    let calm = Llama::start(&m, free_port(), &calm_dir.join("server.log"));
    let p = relevance(&calm_dir, &calm.url(), n, 6000);
    let o = run_with_key(&p, &calm_dir.join("run"));
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    drop(calm);

    let dir = d.path().join("killed");
    std::fs::create_dir(&dir).unwrap();
    let port = free_port();
    let log = dir.join("server.log");
    let mut server = Llama::start(&m, port, &log);
    // 1200 requests a minute: the run lasts about 12 s, long enough to kill the server in it.
    let p = relevance(&dir, &server.url(), n, 1200);
    let run = kill_after(&p, &dir.join("run"), &mut server, 40);
    std::thread::sleep(Duration::from_secs(2));
    let server = Llama::start(&m, port, &log);
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no answer (timeout or connection error)"),
        "the run never met the dead server: {err}"
    );
    // Every answer that arrived was kept: two per video in all, over both lives of the server
    // (one more where the kill took an answer on its way).
    let answered = server.answered();
    assert!(
        (2 * n..=2 * n + 1).contains(&answered),
        "{answered} answers for {n} videos"
    );
    for t in ["relevance", "rejects"] {
        assert_eq!(
            table_rows(&dir.join("run").join(t), &volatile),
            table_rows(&calm_dir.join("run").join(t), &volatile),
            "{t}: a run through a killed server differs from one without"
        );
    }
    drop(server);
}

/// Three clips under `dir` and a pipeline over them whose last stage, `stage` (TOML), calls the
/// service `vlm`: the server at `url`.
pub(crate) fn clips_pipeline(dir: &Path, url: &str, stage: &str) -> PathBuf {
    let mut csv = String::from("path,id,label\n");
    std::fs::create_dir_all(dir.join("v")).unwrap();
    for i in 0..3 {
        plain_clip(&dir.join(format!("v/c{i}.mp4")), 1.0, "160x90");
        csv += &format!("v/c{i}.mp4,clip{i},fake\n");
    }
    write(&dir.join("m.csv"), &csv);
    let service = format!(
        "[services.vlm]\nbase_url = \"{url}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000"
    );
    let p = dir.join("p.toml");
    write(
        &p,
        &(pipeline("manifest = \"m.csv\"", "{ count = 2 }", &service) + stage),
    );
    p
}

/// MVFNDB's emotion question (an `ask` stage) of the server at `url`, two frames a video.
pub(crate) fn ask_pipeline(dir: &Path, url: &str) -> PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    clips_pipeline(
        dir,
        url,
        &format!(
            "\n[[stages]]\nid = \"emotion\"\ntype = \"ask\"\nretries = 6\ncompute = {{ service = \"vlm\", model = \"tiny\", prompt = \"{root}/pipelines/prompts/mvfndb-emotion.txt\", schema = \"{root}/pipelines/schemas/mvfndb-emotion.json\", max_images = 2 }}\n"
        ),
    )
}

#[test]
fn a_server_that_never_comes_back_ends_the_rest_as_rejects_naming_the_service() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let n = 60;
    let mut server = Llama::start(&m, free_port(), &d.path().join("server.log"));
    let t = titles(n);
    url_manifest(d.path(), &t.iter().map(String::as_str).collect::<Vec<_>>());
    // 1200 requests a minute: the run lasts about 6 s; two retries a call.
    let p = relevance_pipeline_with(
        d.path(),
        &server.url(),
        "timeout_secs = 5\nrequests_per_minute = 1200",
        "",
        "retries = 2",
    );
    let out = d.path().join("run");
    let run = kill_after(&p, &out, &mut server, 40);
    let answered = server.answered();
    let started = Instant::now();
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the run should end once its retries are spent: {:?}",
        started.elapsed()
    );
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), n, "every video ends, one way or the other");
    let (gone, judged): (Vec<_>, Vec<_>) = rejects
        .iter()
        .partition(|r| r["reason"] == "service_unavailable");
    for r in &gone {
        assert_eq!(
            r["detail"], "openai: no answer (timeout or connection error)",
            "{r:?}"
        );
    }
    assert!(judged.iter().all(|r| r["reason"] == "unparseable_score"));
    assert!(!gone.is_empty() && judged.len() * 2 <= answered);

    // Every answer that arrived was kept: the server back and the run again in the same
    // directory ask only what never came (one more where the kill took an answer on its way).
    let port = server.port;
    let server = Llama::start(&m, port, &d.path().join("again.log"));
    let o = run_with_key(&p, &out);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let asked = server.answered();
    assert!(
        (2 * n - answered..=2 * n - answered + 1).contains(&asked),
        "{asked} asked again after {answered} of {} answers",
        2 * n
    );
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), n);
    assert!(rejects.iter().all(|r| r["reason"] == "unparseable_score"));
}

/// `run --dry-run` of `p`: what it prints.
pub(crate) fn dry_run(p: &Path, out: &Path) -> String {
    let o = run_command(p, out)
        .arg("--dry-run")
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

#[test]
fn a_vision_stage_pointed_at_a_text_only_model_rejects_each_video_once_naming_the_service() {
    crate::need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let server = tiny_server(dir, &[]);
    let p = ask_pipeline(dir, &server.url());
    let out = dir.join("run");
    // The dry run asks the server's model list first, and says what the run would do.
    let dry = dry_run(&p, &out);
    assert!(
        dry.contains("warning: stage `emotion` sends frames to `tiny` of service `vlm`, whose model list says it takes text only: every video would be rejected (images_not_supported)"),
        "{dry}"
    );
    assert_eq!(server.answered(), 0, "the dry run asks no model");
    let o = run_with_key(&p, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), 3, "{rejects:?}");
    for r in &rejects {
        assert_eq!(r["reason"], "images_not_supported", "{r:?}");
        assert!(
            r["detail"].contains("service `vlm`") && r["detail"].contains("takes no images"),
            "{r:?}"
        );
    }
    // One request per video: a refusal no retry can change is not retried.
    let asked = server
        .log_text()
        .matches("image input is not supported")
        .count();
    assert!(!err.contains("Retrying"), "{err}");
    assert!(asked <= 3, "{asked} refusals for 3 videos");
}

#[test]
fn batch_mode_against_a_server_without_a_batch_api_stops_at_once_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    let server = tiny_server(d.path(), &[]);
    let t = titles(3);
    url_manifest(d.path(), &t.iter().map(String::as_str).collect::<Vec<_>>());
    let p = relevance_pipeline_with(
        d.path(),
        &server.url(),
        "mode = \"batch\"\nbatch_poll_secs = 1",
        "",
        "",
    );
    let mut run = run_command(&p, &d.path().join("run"))
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Not a hang: the first upload's 404 ends it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = run.kill();
            panic!("a batch run against a server without /v1/files still runs after 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("openai file upload was refused: 404: not_found_error")
            && err.contains("no batch interface: set mode = \"live\""),
        "{err}"
    );
}

#[test]
fn a_prompt_past_the_context_is_rejected_once_with_the_servers_reason() {
    let d = tempfile::tempdir().unwrap();
    // 128 tokens of context (llama.cpp rounds it up to 256): less than the relevance prompt.
    let server = tiny_server(d.path(), &["--ctx", "128"]);
    let p = relevance(d.path(), &server.url(), 3, 6000);
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        !err.contains("Retrying"),
        "a prompt too long is not retried: {err}"
    );
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), 3, "{rejects:?}");
    for r in &rejects {
        assert_eq!(r["reason"], "request_refused", "{r:?}");
        assert!(
            r["detail"].starts_with("400: exceed_context_size_error: request (")
                && r["detail"].contains("exceeds the available context size (256 tokens)"),
            "{r:?}"
        );
    }
}

#[test]
fn a_vision_stage_gets_schema_valid_answers_from_the_servers_grammar() {
    crate::need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let proj = mmproj(dir);
    let server = tiny_server(dir, &["--ctx", "2048", "--mmproj", proj.to_str().unwrap()]);
    let (code, models) = get(server.port, "/v1/models").unwrap();
    assert_eq!(code, 200);
    assert!(
        models.contains(r#""input_modalities":["text","image""#),
        "{models}"
    );
    let p = ask_pipeline(dir, &server.url());
    let out = dir.join("run");
    assert!(!dry_run(&p, &out).contains("warning"));
    let o = run_with_key(&p, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(table_rows_file_all(&out.join("rejects")).is_empty());
    let rows = table_rows_file_all(&out.join("emotion"));
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows {
        // A random model's answer, valid only because the server's grammar held it to the
        // schema (integers in 1..9, a reason of at most 400 characters): no repair was asked.
        assert_eq!(r["attempts"], "1", "{r:?}");
        let a: serde_json::Value = serde_json::from_str(&r["answer"]).unwrap();
        for k in ["arousal", "dominance"] {
            let v = a[k].as_i64().unwrap_or_else(|| panic!("{k} in {a}"));
            assert!((1..=9).contains(&v), "{a}");
        }
        assert!(a["reason"].as_str().unwrap().chars().count() <= 400, "{a}");
        assert_eq!(a.as_object().unwrap().len(), 3, "{a}");
    }
    // The frames went with each question (the text-only server refuses them, above).
    assert!(rows.iter().all(|r| r["images"] == "2"), "{rows:?}");
    assert_eq!(server.answered(), 3, "{}", server.log_text());
}

/// The judge's calls over every task of an `evaluate --json` report.
pub(crate) fn judge_calls(report: &serde_json::Value) -> u64 {
    (report["tasks"].as_array().unwrap().iter())
        .map(|t| t["judge_calls"].as_u64().unwrap())
        .sum()
}

/// `evaluate --judge` of the release `rel` by the judge file `judge`, `--json`: the report.
pub(crate) fn evaluate(rel: &Path, judge: &Path) -> serde_json::Value {
    let o = Command::new(bin())
        .arg("evaluate")
        .arg(rel)
        .arg(rel.join("predictions.jsonl"))
        .arg("--judge")
        .arg(judge)
        .arg("--json")
        .current_dir(rel)
        .env("RUST_LOG", "warn")
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_judge_of_evaluate_gets_schema_valid_verdicts_and_pays_once() {
    let d = tempfile::tempdir().unwrap();
    let server = tiny_server(d.path(), &["--ctx", "4096"]);
    let rel = d.path().join("rel");
    crate::evaluate_tasks::py(&["make", rel.to_str().unwrap(), "31"]);
    let judge_file = |name: &str, settings: &str| {
        let f = d.path().join(name);
        write(
            &f,
            &format!(
                "[services.judge]\nbase_url = \"{}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n\n[judge]\nservice = \"judge\"\nmodel = \"tiny\"\n{settings}\n",
                server.url()
            ),
        );
        f
    };
    // At temperature 0 a random model repeats itself inside the `reason` string until
    // max_tokens: every verdict is cut, repaired once, cut again, and counted as such.
    let greedy = judge_file("greedy.toml", "max_tokens = 48");
    let cut = evaluate(&rel, &greedy);
    for t in cut["tasks"].as_array().unwrap() {
        let calls = t["judge_calls"].as_u64().unwrap();
        let by_code = t["unjudged"].as_object().unwrap();
        if calls > 0 {
            assert_eq!(by_code.len(), 1, "{t}");
            assert_eq!(by_code["cut_at_max_tokens"].as_u64(), Some(calls), "{t}");
        }
    }
    let asked = server.answered();
    // Sampled, two samples a call (seeds 0 and 1), room to close the string: it closes it.
    let judge = judge_file(
        "judge.toml",
        "samples = 2\ntemperature = 1.0\nmax_tokens = 2048",
    );
    let report = evaluate(&rel, &judge);
    let tasks = report["tasks"].as_array().unwrap();
    let calls = judge_calls(&report);
    let judged: Vec<_> = tasks.iter().filter(|t| t["judge_calls"] != 0).collect();
    assert_eq!(
        judged.len(),
        2,
        "the hit-rate and the ratings tasks: {report}"
    );
    for t in &judged {
        // Every verdict the grammar shaped passed our own schema check at the first answer.
        assert_eq!(t["unjudged"], serde_json::json!({}), "{t}");
        assert_eq!(t["unjudged_items"], serde_json::json!({}), "{t}");
        assert!(!t["self_agreement"].as_object().unwrap().is_empty(), "{t}");
    }
    assert!(calls > 50, "{report}");
    assert_eq!(
        (server.answered() - asked) as u64,
        calls,
        "one answer a call, no repair"
    );

    // Again: every verdict from the judge's cache, not one request, the same report.
    assert_eq!(evaluate(&rel, &judge), report);
    assert_eq!((server.answered() - asked) as u64, calls);
}
