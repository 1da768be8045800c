//! The tokens-per-minute budget against a fake OpenAI server that enforces a limit on the
//! tokens its answers really used, over a sliding minute (as OpenAI's limiter counts), with
//! usage that differs from our estimate (3 characters a token where we guess 4, and a
//! one-token answer where we reserve `max_tokens`). The stage must stay under the limit (no
//! 429 at all) and still use at least 95 % of it. This takes a little over a minute: the limit
//! is per minute.

use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{err, llm_fixture, run_with_key};
use crate::util::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LIMIT: u64 = 30_000;

#[test]
fn the_token_budget_holds_a_stage_just_under_a_real_usage_limit() {
    let dir = tempfile::tempdir().unwrap();
    // (when, tokens) of every answer served.
    let served: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let s2 = served.clone();
    let server = FakeServer::start(move |r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let prompt = v["messages"][0]["content"].as_str().unwrap();
        let (prompt_tokens, completion_tokens) = (prompt.len().div_ceil(3) as u64, 1u64);
        let used = prompt_tokens + completion_tokens;
        let now = Instant::now();
        let mut log = s2.lock().unwrap();
        let in_window: u64 = log
            .iter()
            .filter(|(t, _)| now.duration_since(*t) < Duration::from_secs(60))
            .map(|(_, n)| n)
            .sum();
        if in_window + used > LIMIT {
            eprintln!(
                "429 at {:?} after the first answer: {in_window} + {used} in the last minute",
                log.first().map(|(t, _)| now.duration_since(*t))
            );
            return Response::json(429, llm_fixture("openai/error_429_rate_limit.json"));
        }
        log.push((now, used));
        let mut body: Value =
            serde_json::from_slice(&llm_fixture("openai/chat_completion_text.json")).unwrap();
        body["choices"][0]["message"]["content"] = json!("5");
        body["usage"] = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": used});
        Response::json(200, body.to_string())
    });
    // ~400 tokens a request: the limit allows ~75 a minute; 90 videos keep the stage busy for
    // more than a minute.
    let mut m = String::from("id,path,title,description\n");
    for i in 0..90 {
        let desc = "word ".repeat(180 + (i * 37) % 120);
        m += &format!("v{i},https://example.invalid/v{i}.mp4,clip {i},{desc}\n");
    }
    write(&dir.path().join("m.csv"), &m);
    let p = dir.path().join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "tpm"
[services.openai]
base_url = "{}v1/"
api_key_env = "VIDCURATE_TEST_OPENAI_KEY"
tokens_per_minute = {LIMIT}

[source]
type = "local"
manifest = "m.csv"
urls = true

[[stages]]
id = "relevance"
type = "relevance"
max_in_flight = 8
retries = 0
compute = {{ service = "openai", model = "gpt-4o", event = "a protest turning violent", description_chars = 2000 }}
select = {{ min_score = 1 }}
"#,
            server.url()
        ),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    let refused = server.requests().iter().filter(|(_, s)| *s == 429).count();
    assert_eq!(refused, 0, "the server refused {refused} requests");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let log = served.lock().unwrap().clone();
    assert_eq!(log.len(), 90);
    let span = log.last().unwrap().0.duration_since(log[0].0);
    assert!(
        span > Duration::from_secs(60),
        "the run must outlast a minute: {span:?}"
    );
    // The busiest minute that starts at an answer.
    let best = log
        .iter()
        .map(|(t0, _)| {
            log.iter()
                .filter(|(t, _)| *t >= *t0 && t.duration_since(*t0) < Duration::from_secs(60))
                .map(|(_, n)| n)
                .sum::<u64>()
        })
        .max()
        .unwrap();
    let share = best as f64 / LIMIT as f64;
    eprintln!(
        "busiest minute: {best} of {LIMIT} tokens ({:.1} %)",
        share * 100.0
    );
    assert!((0.95..=1.0).contains(&share), "{share}");
}
