//! The caption stage and structured output, against fake OpenAI and Gemini servers on 127.0.0.1
//! that replay the real recorded structured-output bodies in tests/fixtures/llm/ (a recorded
//! `json_schema` answer, a recorded structured refusal, a recorded `responseJsonSchema` answer),
//! with the caption text swapped in where a test needs a given answer.

use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{GEMINI_KEY, err, llm_fixture, prompt_of, run_with_key};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A recorded structured answer with `text` as the model's JSON.
/// The `[services.openai]` entry of a pipeline file for a fake server (key from the test's
/// variable, no rate limit to speak of).
pub(crate) fn openai_fast(server: &crate::fake_http::FakeServer) -> String {
    crate::judge::openai_service(&server.url()) + "requests_per_minute = 6000\n"
}

pub(crate) fn openai_structured(text: &str) -> Response {
    let mut v: Value =
        serde_json::from_slice(&llm_fixture("openai/chat_completion_json_schema.json")).unwrap();
    v["choices"][0]["message"]["content"] = json!(text);
    Response::json(200, v.to_string())
}

pub(crate) fn gemini_structured(text: &str) -> Response {
    let mut v: Value =
        serde_json::from_slice(&llm_fixture("gemini/generate_content_json_schema.json")).unwrap();
    v["candidates"][0]["content"]["parts"][0]["text"] = json!(text);
    Response::json(200, v.to_string())
}

/// The width of the first image of a request (each clip has its own size).
pub(crate) fn first_width(images: &[&str]) -> u32 {
    use base64::Engine;
    let b64 = images[0].trim_start_matches("data:image/jpeg;base64,");
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    image::load_from_memory(&jpeg).unwrap().width()
}

/// Clips of three sizes, each with captions beside it (the transcript stage reads them, so no
/// speech service is needed): "<name> speaks here".
pub(crate) fn clips(dir: &Path, names: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("v")).unwrap();
    for (name, size) in names {
        plain_clip(&dir.join(format!("v/{name}.mp4")), 1.0, size);
        write(
            &dir.join(format!("v/{name}.en.json3")),
            &format!(
                r#"{{"events":[{{"tStartMs":100,"dDurationMs":800,"segs":[{{"utf8":"{name} speaks here"}}]}}]}}"#
            ),
        );
    }
}

pub(crate) fn caption_pipeline(dir: &Path, services: &str, stage: &str) -> std::path::PathBuf {
    let p = dir.join("p.toml");
    let transcript = "\n[[stages]]\nid = \"transcript\"\ntype = \"transcript\"\ncompute = { service = \"asr\", model = \"whisper-1\" }\n";
    write(
        &p,
        &(pipeline(
            "dir = \"v\"",
            "{ mode = \"uniform\", count = 4 }",
            &format!(
                "{services}\n[services.asr]\nbase_url = \"http://127.0.0.1:9/v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n"
            ),
        ) + transcript
            + "\n[[stages]]\nid = \"caption\"\ntype = \"caption\"\n"
            + stage),
    );
    p
}

#[test]
fn captions_over_openai_json_schema_are_validated_repaired_and_paid_once() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    clips(
        dir.path(),
        &[
            ("alpha", "160x90"),
            ("beta", "192x108"),
            ("gamma", "224x126"),
        ],
    );
    let seen: Arc<Mutex<HashMap<u32, usize>>> = Arc::default();
    let server = FakeServer::start(move |r: &Request| {
        assert_eq!(r.path, "/v1/chat/completions");
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        // The structured-output request as OpenAI documents it.
        let rf = &v["response_format"];
        assert_eq!(rf["type"], "json_schema", "{rf}");
        assert_eq!(rf["json_schema"]["name"], "caption");
        assert_eq!(rf["json_schema"]["strict"], true);
        assert_eq!(rf["json_schema"]["schema"]["required"], json!(["caption"]));
        let images: Vec<&str> = v["messages"][0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["image_url"]["url"].as_str())
            .collect();
        assert_eq!(images.len(), 4);
        let width = first_width(&images);
        let prompt = prompt_of(r);
        let n = {
            let mut s = seen.lock().unwrap();
            let c = s.entry(width).or_default();
            *c += 1;
            *c
        };
        match width {
            160 => {
                assert!(
                    prompt.contains("Title: (none)"),
                    "a folder source has no titles: {prompt}"
                );
                assert!(prompt.contains("Transcript: alpha speaks here"), "{prompt}");
                openai_structured(
                    r#"{"caption":"A test pattern; a voice says alpha speaks here."}"#,
                )
            }
            // The recorded answer as it came (another schema's object): repaired once.
            192 if n == 1 => {
                Response::json(200, llm_fixture("openai/chat_completion_json_schema.json"))
            }
            192 => {
                assert!(
                    prompt.contains("does not follow the schema") && prompt.contains("caption"),
                    "{prompt}"
                );
                openai_structured(r#"{"caption":"Moving colour bars."}"#)
            }
            224 => Response::json(
                200,
                llm_fixture("openai/chat_completion_json_schema_refusal.json"),
            ),
            w => panic!("unexpected width {w}"),
        }
    });
    let services = openai_fast(&server);
    let p = caption_pipeline(
        dir.path(),
        &services,
        "compute = { service = \"openai\", model = \"gpt-4o-mini\", max_images = 4 }\n",
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "one video rejected: {}", err(&o));
    let rows = table_rows_file_all(&out.join("caption"));
    let by_caption: HashMap<&str, (&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["caption"].as_str(),
                (r["attempts"].as_str(), r["transcript_chars"].as_str()),
            )
        })
        .collect();
    assert_eq!(by_caption.len(), 2, "{rows:?}");
    assert_eq!(
        by_caption["A test pattern; a voice says alpha speaks here."],
        ("1", "17")
    );
    assert_eq!(by_caption["Moving colour bars."].0, "2");
    let rejects = table_rows(&out.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("refused") && rejects.contains("can't assist"),
        "{rejects}"
    );
    let calls = server.requests().len();
    assert_eq!(calls, 4, "alpha once, beta twice, gamma once");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(server.requests().len(), calls, "a rerun makes no call");
}

#[test]
fn captions_over_gemini_send_the_response_json_schema() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    clips(dir.path(), &[("delta", "160x90")]);
    let server = FakeServer::start(move |r: &Request| {
        assert_eq!(
            r.headers.get("x-goog-api-key").map(String::as_str),
            Some(GEMINI_KEY)
        );
        assert!(
            r.path
                .starts_with("/v1beta/models/gemini-2.5-flash:generateContent")
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let g = &v["generationConfig"];
        assert_eq!(g["responseMimeType"], "application/json");
        assert_eq!(
            g["responseJsonSchema"]["properties"]["caption"]["type"],
            "string"
        );
        let text = v["contents"][0]["parts"][0]["text"].as_str().unwrap();
        assert!(text.contains("Transcript: delta speaks here"), "{text}");
        gemini_structured(r#"{"caption": "Bars and a tone."}"#)
    });
    let services = format!(
        "[services.gemini]\nbase_url = \"{}v1beta/\"\napi = \"gemini\"\napi_key_env = \"VIDCURATE_TEST_GEMINI_KEY\"\n",
        server.url()
    );
    let p = caption_pipeline(
        dir.path(),
        &services,
        "compute = { service = \"gemini\", model = \"gemini-2.5-flash\", max_images = 2 }\n",
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert!(o.status.success(), "{}", err(&o));
    let rows = table_rows_file_all(&out.join("caption"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["caption"], "Bars and a tone.");
    assert_eq!(rows[0]["images"], "2");
    assert_eq!(server.requests().len(), 1);
}
