//! llama-cpp-python's server (`python -m llama_cpp.server`, the other common way to serve a GGUF
//! model; scripts/setup.sh builds it into data/venv-llamapy) serving the tiny random-weight
//! model, as the judge of `evaluate` (issue 68). It refuses `response_format: json_schema` with
//! a 500 validation error and takes `json_object` with a `schema`: one refused request, then
//! every verdict on that rung, checked by us; a second `evaluate` asks nothing.

use crate::llama::{ask_pipeline, dry_run, evaluate};
use crate::llama_server::{get, model, repo};
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    /// With images: its LLaVA chat handler and the tiny vision projector.
    fn start_seeing(dir: &Path) -> Server {
        let proj = crate::llama_server::mmproj(dir);
        let proj = proj.to_str().unwrap().to_string();
        Server::start_with(
            dir,
            &["--chat_format", "llava-1-5", "--clip_model_path", &proj],
        )
    }

    fn start_with(dir: &Path, more: &[&str]) -> Server {
        let python = repo().join("data/venv-llamapy/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run ./scripts/setup.sh (it builds llama-cpp-python's server for this test)",
            python.display()
        );
        let (port, log) = (free_port(), dir.join("llamapy.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(python)
            .args([
                "-m",
                "llama_cpp.server",
                "--host",
                "127.0.0.1",
                "--n_ctx",
                "4096",
            ])
            .arg("--model")
            .arg(model(dir))
            .args(["--port", &port.to_string()])
            .args(more)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let mut s = Server { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(s.port, "/v1/models").is_none_or(|(code, _)| code != 200) {
            if let Some(st) = s.child.try_wait().unwrap() {
                panic!("llama-cpp-python's server exited ({st}): {}", s.log_text());
            }
            assert!(Instant::now() < deadline, "not up: {}", s.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The chat requests it answered, by status (uvicorn's access log).
    fn answered(&self, status: u16) -> usize {
        let line = format!("POST /v1/chat/completions HTTP/1.1\" {status}");
        self.log_text().matches(&line).count()
    }

    fn all_answered(&self) -> usize {
        self.log_text()
            .matches("POST /v1/chat/completions HTTP/1.1\"")
            .count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_judge_over_llama_cpp_python_learns_json_object_in_one_refused_request() {
    let d = tempfile::tempdir().unwrap();
    let server = Server::start(d.path());
    let rel = d.path().join("rel");
    crate::evaluate_tasks::py(&["make", rel.to_str().unwrap(), "31"]);
    let judge = d.path().join("judge.toml");
    write(
        &judge,
        &format!(
            "[services.judge]\nbase_url = \"http://127.0.0.1:{}/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 6000\n\n[judge]\nservice = \"judge\"\nmodel = \"tiny\"\nsamples = 2\ntemperature = 1.0\nmax_tokens = 2048\n",
            server.port
        ),
    );
    // The dry run's bound: each judgment and its one repair, and the one refusal it warns of.
    let o = std::process::Command::new(bin())
        .arg("evaluate")
        .arg(&rel)
        .arg(rel.join("predictions.jsonl"))
        .arg("--judge")
        .arg(&judge)
        .arg("--dry-run")
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let to_make = number_after(&said, "answered by the cache, ");
    let bound = number_after(&said, "to make (");
    assert_eq!(bound, 2.0 * to_make + 1.0, "{said}");
    let report = evaluate(&rel, &judge);
    let tasks = report["tasks"].as_array().unwrap();
    let calls = crate::llama::judge_calls(&report);
    assert_eq!(calls as f64, to_make, "{said}");
    assert!(server.all_answered() as f64 <= bound, "{said}");
    assert!(calls > 50, "{report}");
    // One request refused for its shape, every other one answered.
    assert_eq!(server.answered(500), 1, "{}", server.log_text());
    let ok = server.answered(200);
    assert_eq!(server.all_answered(), ok + 1, "{}", server.log_text());
    // Each call answered once, or repaired once: never retried.
    assert!(
        (calls as usize..=2 * calls as usize).contains(&ok),
        "{ok} answers for {calls} calls"
    );
    for t in tasks.iter().filter(|t| t["judge_calls"] != 0) {
        for (code, _) in t["unjudged"].as_object().unwrap() {
            assert!(
                ["invalid_answer", "cut_at_max_tokens"].contains(&code.as_str()),
                "every verdict checked by us: {t}"
            );
        }
    }
    // Again: from the judge's cache, no request, the same report.
    assert_eq!(evaluate(&rel, &judge), report);
    assert_eq!(server.all_answered(), ok + 1);
}

/// Relevance (a plain answer, no structured output) over llama-cpp-python's server ends as it
/// does over llama.cpp's: a random model's answer is no score, so one reminder, then the video
/// rejected with the raw answer; two requests a video, none refused.
#[test]
fn relevance_over_llama_cpp_python_reminds_once_then_rejects() {
    let d = tempfile::tempdir().unwrap();
    let server = Server::start(d.path());
    let url = format!("http://127.0.0.1:{}/", server.port);
    let p = crate::llama::relevance(d.path(), &url, 4, 6000);
    let out = d.path().join("run");
    let o = crate::judge::run_with_key(&p, &out);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rejects.len(), 4, "{rejects:?}");
    assert!(
        rejects.iter().all(|r| r["reason"] == "unparseable_score"),
        "{rejects:?}"
    );
    assert_eq!(
        (server.answered(200), server.all_answered()),
        (8, 8),
        "{}",
        server.log_text()
    );
}

/// A structured vision stage (MVFNDB's emotion question, two frames a video) over
/// llama-cpp-python's server with its LLaVA handler: one request refused for its shape, then
/// every video on `json_object` with the schema. Its grammar holds the answer to the schema's
/// shape, not its ranges, so a random model's answer may need our repair: each video ends
/// checked by us (an answer in range, or `invalid_answer` / `cut_at_max_tokens`), within the
/// dry run's count and the one refusal it warned of; a rerun asks nothing.
#[test]
fn a_vision_stage_over_llama_cpp_python_learns_its_dialect_once() {
    crate::need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let server = Server::start_seeing(d.path());
    let url = format!("http://127.0.0.1:{}/", server.port);
    let p = ask_pipeline(d.path(), &url);
    let out = d.path().join("run");
    let said = dry_run(&p, &out);
    assert!(
        said.contains("structured output: service vlm, model tiny: 1 request more at most"),
        "{said}"
    );
    let o = crate::judge::run_with_key(&p, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!([Some(0), Some(3)].contains(&o.status.code()), "{stderr}");
    assert_eq!(server.answered(500), 1, "{}", server.log_text());
    let rows = table_rows_file_all(&out.join("emotion"));
    let rejects = table_rows_file_all(&out.join("rejects"));
    assert_eq!(rows.len() + rejects.len(), 3, "{rows:?} {rejects:?}");
    for r in &rows {
        let a: serde_json::Value = serde_json::from_str(&r["answer"]).unwrap();
        for k in ["arousal", "dominance"] {
            assert!((1..=9).contains(&a[k].as_i64().unwrap()), "{a}");
        }
        assert_eq!(r["images"], "2", "{r:?}");
    }
    for r in &rejects {
        assert!(
            ["invalid_answer", "cut_at_max_tokens"].contains(&r["reason"].as_str()),
            "{r:?}"
        );
    }
    // Each video asked once, repaired at most as often as the stage's retries allow.
    let asked = server.answered(200);
    assert_eq!(server.all_answered(), asked + 1);
    // Within the dry run's bound: a call and its repair a video, and the one refusal.
    assert!(
        said.contains("total: 3 model calls (7 requests at most)"),
        "{said}"
    );
    assert!((3..=6).contains(&asked), "{asked} answers for 3 videos");
    // Again: the same tables, no request.
    let o = crate::judge::run_with_key(&p, &out);
    assert!([Some(0), Some(3)].contains(&o.status.code()));
    assert_eq!(table_rows_file_all(&out.join("emotion")), rows);
    assert_eq!(server.all_answered(), asked + 1, "{}", server.log_text());
}
