//! Structured output on servers that take it in another dialect (issue 68): a refusal of the
//! request's shape is never retried, whatever its status; a refusal of how structured output
//! was asked moves the (service, model) down the ladder once, kept in the run's cache, so the
//! rerun and every later request start there. Each server is a fake on 127.0.0.1 answering with
//! the bodies the real ones sent (tests/fixtures/llm/refusals, sources in its README).

use crate::caption::openai_structured;
use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{err, run_with_key};
use crate::llama::{clips_pipeline, dry_run};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::Value;
use std::path::Path;

fn refusal(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llm/refusals")
        .join(name);
    std::fs::read(p).unwrap()
}

/// MVFNDB's emotion question (its prompt followed by `more`) over the server at `url`, three
/// clips, six retries a video.
fn ask(dir: &Path, url: &str, more: &str) -> std::path::PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    let prompt = dir.join("emotion.txt");
    let shipped = std::fs::read_to_string(format!("{root}/pipelines/prompts/mvfndb-emotion.txt"));
    write(&prompt, &(shipped.unwrap() + more));
    clips_pipeline(
        dir,
        url,
        &format!(
            "\n[[stages]]\nid = \"emotion\"\ntype = \"ask\"\nretries = 6\ncompute = {{ service = \"vlm\", model = \"tiny\", prompt = \"{}\", schema = \"{root}/pipelines/schemas/mvfndb-emotion.json\", max_images = 2 }}\n",
            prompt.display()
        ),
    )
}

fn response_format(r: &Request) -> Value {
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    body["response_format"].clone()
}

const ANSWER: &str = r#"{"arousal": 7, "dominance": 3, "reason": "Crowds and smoke."}"#;

/// llama-cpp-python's server: `json_schema` refused with its 500 validation body, `json_object`
/// with the schema answered. One refused request, then every video on the learnt rung; a second
/// stage in the same run directory starts there (no refusal); a rerun asks nothing.
#[test]
fn a_server_refusing_json_schema_costs_one_request_and_the_rung_is_kept() {
    need_ffmpeg!();
    let body = refusal("llama_cpp_python_500_validation.json");
    let server = FakeServer::start(move |r: &Request| {
        let rf = response_format(r);
        if rf["type"] == "json_schema" {
            return Response::json(500, body.clone());
        }
        assert_eq!(rf["type"], "json_object", "{rf}");
        assert!(rf["schema"]["properties"]["arousal"].is_object(), "{rf}");
        openai_structured(ANSWER)
    });
    let d = tempfile::tempdir().unwrap();
    let p = ask(d.path(), &server.url(), "");
    let out = d.path().join("run");
    // The dry run counts the one refused request a server may cost, until the run has learnt.
    let note = "structured output: service vlm, model tiny: 1 request more at most";
    assert!(dry_run(&p, &out).contains(note));
    // And calls nothing but, at most, the model list (README: "no model or search call").
    assert!(
        server
            .requests()
            .iter()
            .all(|(r, _)| r.method == "GET" && r.path.ends_with("/models")),
        "{:?}",
        server
            .requests()
            .iter()
            .map(|(r, _)| &r.path)
            .collect::<Vec<_>>()
    );
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!dry_run(&p, &out).contains(note));
    let sent: Vec<Value> = server
        .requests()
        .iter()
        .map(|(r, _)| response_format(r))
        .collect();
    // One refused request; the rest on the learnt rung (the three clips are alike, so their
    // requests may be one, answered once and then from the cache).
    assert_eq!(sent[0]["type"], "json_schema", "{sent:?}");
    assert!(
        sent[1..].iter().all(|f| f["type"] == "json_object"),
        "{sent:?}"
    );
    assert!((2..=4).contains(&sent.len()), "{sent:?}");
    assert!(
        err(&o).contains("json_object with the schema"),
        "{}",
        err(&o)
    );
    // The run's summary says which rung the server was learnt to take.
    assert!(
        err(&o).contains("structured output: service vlm, model tiny: json_object with the schema (the server refused json_schema)"),
        "{}",
        err(&o)
    );
    let answers = column(&out.join("emotion"), "answer");
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert!(
        answers.iter().all(|a| a.contains("\"arousal\":7")),
        "{answers:?}"
    );
    let o = run(&["cache", "stats", out.to_str().unwrap()], d.path());
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        said.contains("structured output: service vlm, model tiny: json_object with the schema (the server refused json_schema)"),
        "{said}"
    );

    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(server.requests().len(), sent.len(), "a rerun asks nothing");
    // Another question of the same model in the same run directory: it starts on the learnt
    // rung, in this process and the next (the rung is kept in the run's cache).
    let p = ask(d.path(), &server.url(), "\nAnswer for a first-time viewer.");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let again: Vec<Value> = server
        .requests()
        .iter()
        .map(|(r, _)| response_format(r))
        .collect();
    assert!(again.len() > sent.len(), "{again:?}");
    assert!(
        again[sent.len()..]
            .iter()
            .all(|f| f["type"] == "json_object"),
        "{again:?}"
    );
}

/// A server that refuses every request with one of the recorded bodies, whatever the status:
/// each video is asked once on the rung the refusals leave (the first walks the ladder down as
/// far as the bodies teach), never again for the stage's six retries, and ends as a
/// `request_refused` reject with the server's words.
#[test]
fn a_refusal_of_the_requests_shape_is_never_retried() {
    need_ffmpeg!();
    // (body, status, requests: the first video's rungs + one for each other video)
    for (name, status, requests) in [
        // json_schema refused, json_object listed: json_object with the schema, refused too.
        ("llama_cpp_python_500_validation.json", 500, 2 + 2),
        // json_object refused, json_schema listed: strict json_schema is the rung; refused.
        ("lmstudio_400_json_object.json", 400, 1 + 2),
        // json_schema refused, nothing listed: json_object, then the prompt only.
        ("openai_400_json_schema_model.json", 400, 3 + 2),
        ("gateway_400_invalid_parameter.json", 400, 2 + 2),
        // The refusal names no structured-output field: nothing to learn.
        ("cerebras_400_wrong_api_format.json", 400, 1 + 2),
        // A 422 in plain text (DeepSeek in 2025) and its 400 today: json_schema refused.
        ("deepseek_422_json_schema_unavailable.txt", 422, 3 + 2),
        ("deepseek_400_response_format_unavailable.json", 400, 3 + 2),
    ] {
        let body = refusal(name);
        let kind = if name.ends_with(".txt") {
            "text/plain"
        } else {
            "application/json"
        };
        let server =
            FakeServer::start(move |_: &Request| Response::bytes(status, kind, body.clone()));
        let d = tempfile::tempdir().unwrap();
        let p = ask(d.path(), &server.url(), "");
        let out = d.path().join("run");
        let o = run_with_key(&p, &out);
        assert_eq!(o.status.code(), Some(3), "{name}: {}", err(&o));
        assert_eq!(server.requests().len(), requests, "{name}");
        let rejects = table_rows_file_all(&out.join("rejects"));
        assert_eq!(rejects.len(), 3, "{name}");
        assert!(
            rejects.iter().all(|r| r["reason"] == "request_refused"
                && r["detail"].starts_with(&format!("{status}: "))),
            "{name}: {rejects:?}"
        );
    }
}
