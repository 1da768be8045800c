//! The judging stages against fake OpenAI and Gemini servers on 127.0.0.1 that answer with the
//! real recorded bodies in tests/fixtures/llm/ (content swapped where a test needs a given
//! answer), and the local MiniLM judge on a hand-labelled title set.

use crate::fake_http::{Calls, FakeServer, Request, Response};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) const OPENAI_KEY: &str = "sk-test-openai-8f2d1c";
pub(crate) const GEMINI_KEY: &str = "AIza-test-gemini-77aa";

pub(crate) fn llm_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join("llm").join(name)).unwrap()
}

/// The real chat.completion body with `content` as the answer.
pub(crate) fn openai_says(content: &str) -> Response {
    let mut v: Value =
        serde_json::from_slice(&llm_fixture("openai/chat_completion_text.json")).unwrap();
    v["choices"][0]["message"]["content"] = json!(content);
    Response::json(200, v.to_string())
}

/// The real generateContent body with `text` as the answer.
pub(crate) fn gemini_says(text: &str) -> Response {
    let mut v: Value =
        serde_json::from_slice(&llm_fixture("gemini/generate_content_text.json")).unwrap();
    v["candidates"][0]["content"]["parts"][0]["text"] = json!(text);
    Response::json(200, v.to_string())
}

/// The video title a relevance prompt names.
pub(crate) fn title_of(prompt: &str) -> String {
    prompt
        .lines()
        .find_map(|l| l.strip_prefix("Title: "))
        .unwrap_or("")
        .to_string()
}

pub(crate) fn prompt_of(r: &Request) -> String {
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let c = &v["messages"][0]["content"];
    match c {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Answers by the video's title, with a first-time failure for some of them.
fn openai_fake() -> FakeServer {
    let seen = Calls::<String>::default();
    FakeServer::start(move |r: &Request| {
        assert_eq!(r.path, "/v1/chat/completions");
        if r.headers.get("authorization").map(String::as_str)
            != Some(&format!("Bearer {OPENAI_KEY}"))
        {
            return Response::json(
                401,
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
            );
        }
        let prompt = prompt_of(r);
        assert!(prompt.starts_with("On a scale from 1 to 10, how likely is this video to contain a protest turning violent video in action but not lecture/tutorial/slides, etc.? Answer with a single integer from 1 (very unlikely) to 10 (very likely)."), "{prompt}");
        let title = title_of(&prompt);
        let n = seen.nth(title.clone());
        let reminded = prompt.contains("Your previous answer was");
        match title.as_str() {
            "riot" => openai_says("9"),
            "lecture" => openai_says(" 2\n"),
            "prose" if !reminded => openai_says("The answer is 7"),
            "prose" => openai_says("7"),
            "refuse" => Response::json(200, llm_fixture("openai/chat_completion_refusal.json")),
            "truncated" => Response::json(
                200,
                llm_fixture("openai/chat_completion_finish_length.json"),
            ),
            "flaky" if n == 1 => {
                Response::json(500, llm_fixture("openai/error_500_server_error.json"))
            }
            "flaky" => openai_says("10"),
            "ratelimit" if n == 1 => {
                Response::json(429, llm_fixture("openai/error_429_rate_limit.json"))
            }
            "ratelimit" => openai_says("9"),
            "slow" if n == 1 => openai_says("1").delayed(Duration::from_millis(2500)),
            "slow" => openai_says("8"),
            "badjson" if n == 1 => Response::json(200, "{\"choices\": [{\"message\": "),
            "badjson" => openai_says("9"),
            "broke" => Response::json(429, llm_fixture("openai/error_429_insufficient_quota.json")),
            other => panic!("unexpected title {other:?}"),
        }
    })
}

/// A `[services.openai]` table pointing at a fake server.
pub(crate) fn openai_service(url: &str) -> String {
    format!(
        "[services.openai]\nbase_url = \"{url}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\n"
    )
}

pub(crate) fn url_manifest(dir: &Path, titles: &[&str]) {
    let mut m = String::from("id,path,title,description\n");
    for t in titles {
        m += &format!("{t},https://example.invalid/{t}.mp4,{t},a clip\n");
    }
    write(&dir.join("m.csv"), &m);
}

/// A pipeline over a URL manifest (`m.csv`) with one relevance stage asking the fake OpenAI
/// server: `service` is extra `[services.openai]` lines, `head` extra top-level tables, `stage`
/// extra lines of the stage.
pub(crate) fn relevance_pipeline_with(
    dir: &Path,
    url: &str,
    service: &str,
    head: &str,
    stage: &str,
) -> PathBuf {
    let p = dir.join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "rel"
[services.openai]
base_url = "{url}v1/"
api_key_env = "VIDCURATE_TEST_OPENAI_KEY"
{service}
{head}
[source]
type = "local"
manifest = "m.csv"
urls = true

[[stages]]
id = "relevance"
type = "relevance"
compute = {{ service = "openai", model = "gpt-4o", event = "a protest turning violent" }}
{stage}
"#
        ),
    );
    p
}

fn relevance_pipeline(dir: &Path, url: &str) -> PathBuf {
    relevance_pipeline_with(
        dir,
        url,
        "timeout_secs = 1\nrequests_per_minute = 6000\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0",
        "",
        "retries = 3\nselect = { min_score = 9 }",
    )
}

pub(crate) fn run_with_key(p: &Path, out: &Path) -> std::process::Output {
    run_command(p, out)
        .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
        .env("VIDCURATE_TEST_GEMINI_KEY", GEMINI_KEY)
        .output()
        .unwrap()
}

pub(crate) fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn relevance_parses_retries_rejects_and_never_pays_twice() {
    let dir = tempfile::tempdir().unwrap();
    let server = openai_fake();
    let titles = [
        "riot",
        "lecture",
        "prose",
        "refuse",
        "truncated",
        "flaky",
        "ratelimit",
        "slow",
        "badjson",
    ];
    url_manifest(dir.path(), &titles);
    let p = relevance_pipeline(dir.path(), &server.url());
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let rows = table_rows_file_all(&out.join("relevance"));
    let score = |id: &str| {
        rows.iter()
            .find(|r| r["video_id"] == id)
            .map(|r| (r["score"].clone(), r["attempts"].clone()))
    };
    assert_eq!(score("riot"), Some(("9".into(), "1".into())));
    assert_eq!(score("lecture"), Some(("2".into(), "1".into())));
    assert_eq!(
        score("prose"),
        Some(("7".into(), "2".into())),
        "one reminder"
    );
    assert_eq!(score("flaky").unwrap().0, "10", "500 retried");
    assert_eq!(
        score("ratelimit").unwrap().0,
        "9",
        "429 rate_limit_exceeded retried"
    );
    assert_eq!(score("slow").unwrap().0, "8", "a timeout retried");
    assert_eq!(score("badjson").unwrap().0, "9", "malformed JSON retried");
    let rejects = table_rows(&out.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("refuse") && rejects.contains("refused"),
        "{rejects}"
    );
    assert!(
        rejects.contains("truncated")
            && rejects.contains("unparseable_score")
            && rejects.contains("finish: length"),
        "{rejects}"
    );
    // Kept at 9: riot, flaky, ratelimit, badjson.
    assert!(err(&o).contains("relevance"), "{}", err(&o));
    let summary = err(&o);
    let line = summary
        .lines()
        .find(|l| l.starts_with("relevance"))
        .unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[5], "3", "filtered: lecture, prose, slow: {line}");
    assert_eq!(cols[6], "4", "forwarded: {line}");
    // 9 videos + reminder (prose) + second try (truncated) + one retry each for flaky,
    // ratelimit, slow and badjson.
    let calls = server.requests().len();
    assert_eq!(calls, 15);

    // A rerun pays for nothing.
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(server.requests().len(), calls);

    // Re-thresholding: zero calls, and the funnel moves.
    let o = run(
        &[
            "rethreshold",
            out.to_str().unwrap(),
            "--set",
            "relevance.min_score=7",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("relevance"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let out_col = |l: &str| l.split_whitespace().last().unwrap().to_string();
    assert_eq!(out_col(lines[0]), "4", "{text}");
    assert_eq!(out_col(lines[1]), "6", "{text}");
    assert_eq!(server.requests().len(), calls);
    let sel = text
        .lines()
        .find_map(|l| l.strip_prefix("selection: "))
        .unwrap();
    let kept = vidcurate::stages::rethreshold::selected_ids(Path::new(sel)).unwrap();
    assert!(kept.contains("prose") && kept.contains("slow") && !kept.contains("lecture"));
    // A threshold a pipeline file could not hold is refused here too, naming stage.key.
    for bad in ["relevance.min_score=0", "relevance.min_score=11"] {
        let o = run(
            &["rethreshold", out.to_str().unwrap(), "--set", bad],
            dir.path(),
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
        assert!(
            err(&o).contains("relevance.min_score: min_score must be 1..10"),
            "{bad}: {}",
            err(&o)
        );
    }

    // cache stats: one entry per distinct request, tokens and a cost from the prices.
    let o = run(&["cache", "stats", out.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("openai"), "{text}");
    assert!(text.contains("estimated cost"), "{text}");
    // The key is nowhere in the run directory.
    let mut leaked = false;
    for e in walk(&out) {
        if std::fs::read(&e)
            .unwrap()
            .windows(OPENAI_KEY.len())
            .any(|w| w == OPENAI_KEY.as_bytes())
        {
            leaked = true;
        }
    }
    assert!(!leaked);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn insufficient_quota_stops_the_run_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let server = openai_fake();
    url_manifest(dir.path(), &["broke", "riot", "lecture"]);
    let p = relevance_pipeline_with(
        dir.path(),
        &server.url(),
        "timeout_secs = 1\nrequests_per_minute = 6000",
        "",
        "retries = 0\nmax_in_flight = 1\nselect = { min_score = 9 }",
    );
    let o = run_with_key(&p, &dir.path().join("run"));
    let e = err(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("insufficient_quota") && e.contains("VIDCURATE_TEST_OPENAI_KEY"),
        "{e}"
    );
    assert!(!e.contains(OPENAI_KEY));
    // Not retried (429 with insufficient_quota is final).
    let broke = server
        .requests()
        .iter()
        .filter(|(r, _)| prompt_of(r).contains("Title: broke"))
        .count();
    assert_eq!(broke, 1);
    // A wrong key: also a clear stop, no key in the message.
    let o = run_command(&p, &dir.path().join("run2"))
        .env("VIDCURATE_TEST_OPENAI_KEY", "sk-wrong-999")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("invalid_api_key") && !err(&o).contains("sk-wrong-999"));
}

/// Three clips of different sizes; the fake Gemini server knows each by its first image's width.
fn gemini_fake(answers: HashMap<u32, Vec<Response>>) -> FakeServer {
    let seen = Calls::<u32>::default();
    let throttled = Arc::new(Mutex::new(false));
    FakeServer::start(move |r: &Request| {
        if r.headers.get("x-goog-api-key").map(String::as_str) != Some(GEMINI_KEY) {
            return Response::json(400, llm_fixture("gemini/error_400_api_key_invalid.json"));
        }
        assert!(
            r.path
                .starts_with("/v1beta/models/gemini-2.5-flash-lite:generateContent"),
            "{}",
            r.path
        );
        // One rate-limit answer for the first request of the run.
        {
            let mut t = throttled.lock().unwrap();
            if !*t {
                *t = true;
                return Response::json(
                    429,
                    llm_fixture("gemini/error_429_resource_exhausted.json"),
                )
                .header("Retry-After", "0.2");
            }
        }
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let parts = v["contents"][0]["parts"].as_array().unwrap();
        assert!(
            parts[0]["text"]
                .as_str()
                .unwrap()
                .starts_with("You are a video analysis expert")
        );
        assert_eq!(
            v["generationConfig"]["responseMimeType"],
            "application/json"
        );
        let b64 = parts[1]["inline_data"]["data"].as_str().unwrap();
        use base64::Engine;
        let jpeg = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let width = image::load_from_memory(&jpeg).unwrap().width();
        let n = seen.nth(width) - 1;
        let list = &answers[&width];
        list[n.min(list.len() - 1)].clone()
    })
}

fn rubric(scores: [u8; 12]) -> String {
    let names = vidcurate::stages::model_inputs::CRITERIA;
    let objs: Vec<Value> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"category_number": i + 1, "category_name": names[i], "score": s}))
        .collect();
    Value::Array(objs).to_string()
}

#[test]
fn quality_rubric_on_frames_validates_repairs_and_rethresholds_without_calls() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let vids = dir.path().join("v");
    std::fs::create_dir_all(&vids).unwrap();
    for (name, size) in [("a", "160x90"), ("b", "192x108"), ("c", "224x126")] {
        plain_clip(&vids.join(format!("{name}.mp4")), 1.0, size);
    }
    let mut answers = HashMap::new();
    answers.insert(
        160,
        vec![gemini_says(&format!(
            "Here is the analysis:\n```json\n{}\n```",
            rubric([2; 12])
        ))],
    );
    let mut eleven: Vec<Value> = serde_json::from_str(&rubric([2; 12])).unwrap();
    eleven.pop();
    answers.insert(
        192,
        vec![
            gemini_says(&Value::Array(eleven).to_string()),
            gemini_says(&rubric([2, 2, 1, 2, 2, 2, 2, 2, 0, 2, 2, 1])),
        ],
    );
    answers.insert(
        224,
        vec![Response::json(
            200,
            llm_fixture("gemini/generate_content_finish_safety.json"),
        )],
    );
    let server = gemini_fake(answers);
    let p = dir.path().join("p.toml");
    let services = format!(
        "[services.gemini]\nbase_url = \"{}v1beta/\"\napi = \"gemini\"\napi_key_env = \"VIDCURATE_TEST_GEMINI_KEY\"\n",
        server.url()
    );
    write(
        &p,
        &(pipeline(
            "dir = \"v\"",
            "{ mode = \"uniform\", count = 4 }",
            &services,
        ) + "\n[[stages]]\nid = \"quality\"\ntype = \"quality\"\ncompute = { service = \"gemini\", model = \"gemini-2.5-flash-lite\", max_images = 4 }\nselect = { min_twos = 10 }\n"),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let rows = table_rows_file_all(&out.join("quality"));
    assert_eq!(rows.len(), 2);
    let by_twos: HashMap<String, String> = rows
        .iter()
        .map(|r| (r["twos"].clone(), r["attempts"].clone()))
        .collect();
    assert_eq!(
        by_twos.get("12").map(String::as_str),
        Some("1"),
        "fenced JSON accepted"
    );
    assert_eq!(
        by_twos.get("9").map(String::as_str),
        Some("2"),
        "11 objects, repaired"
    );
    let b = rows.iter().find(|r| r["twos"] == "9").unwrap();
    assert_eq!(b["q09_banner_text"], "0");
    assert_eq!(b["q03_time_date"], "1");
    let rejects = table_rows(&out.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("blocked") && rejects.contains("SAFETY"),
        "{rejects}"
    );
    // 429 once + a + b twice + c once.
    let calls = server.requests().len();
    assert_eq!(calls, 5);
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(server.requests().len(), calls, "a rerun makes no call");
    let o = run(
        &[
            "rethreshold",
            out.to_str().unwrap(),
            "--set",
            "quality.min_twos=9",
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let q: Vec<&str> = text.lines().filter(|l| l.starts_with("quality")).collect();
    assert_eq!(q[0].split_whitespace().last(), Some("1"), "{text}");
    assert_eq!(q[1].split_whitespace().last(), Some("2"), "{text}");
    assert_eq!(server.requests().len(), calls, "rethreshold makes no call");

    // A refused key stops at once and never shows the key.
    let o = run_command(&p, &dir.path().join("run2"))
        .env("VIDCURATE_TEST_GEMINI_KEY", "AIza-wrong")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("API_KEY_INVALID") && !err(&o).contains("AIza-wrong"),
        "{}",
        err(&o)
    );
}

#[test]
fn committee_votes_are_stored_and_the_hardness_rule_is_reappliable() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let vids = dir.path().join("v");
    std::fs::create_dir_all(&vids).unwrap();
    plain_clip(&vids.join("split.mp4"), 1.0, "160x90");
    plain_clip(&vids.join("clear.mp4"), 1.0, "192x108");
    write(
        &dir.path().join("m.csv"),
        "id,path,label\nsplit,v/split.mp4,no\nclear,v/clear.mp4,no\n",
    );
    // Members m1..m5: on the 160-wide clip three say yes, two no; on the other all say yes.
    let server = FakeServer::start(|r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let model = v["model"].as_str().unwrap().to_string();
        let parts = v["messages"][0]["content"].as_array().unwrap();
        assert!(
            parts[0]["text"]
                .as_str()
                .unwrap()
                .contains("a fight breaking out")
        );
        let url = parts[1]["image_url"]["url"].as_str().unwrap();
        use base64::Engine;
        let jpeg = base64::engine::general_purpose::STANDARD
            .decode(url.trim_start_matches("data:image/jpeg;base64,"))
            .unwrap();
        let w = image::load_from_memory(&jpeg).unwrap().width();
        let yes = w != 160 || ["m1", "m2", "m3"].contains(&model.as_str());
        openai_says(if yes { "Yes." } else { "no" })
    });
    let members: Vec<String> = (1..=5)
        .map(|i| format!("{{ service = \"openai\", model = \"m{i}\" }}"))
        .collect();
    let p = dir.path().join("p.toml");
    let services = openai_service(&server.url());
    write(
        &p,
        &(pipeline(
            "manifest = \"m.csv\"",
            "{ mode = \"uniform\", count = 2 }",
            &services,
        ) + &format!(
            "\n[[stages]]\nid = \"committee\"\ntype = \"committee\"\ncompute = {{ event = \"a fight breaking out\", members = [{}] }}\n",
            members.join(", ")
        )),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows = table_rows_file_all(&out.join("committee"));
    assert_eq!(rows.len(), 10, "one row per video and member");
    let split: Vec<&std::collections::BTreeMap<String, String>> =
        rows.iter().filter(|r| r["video_id"] == "split").collect();
    assert!(
        split
            .iter()
            .all(|r| r["yes_votes"] == "3" && r["no_votes"] == "2")
    );
    assert_eq!(server.requests().len(), 10);
    let line = err(&o)
        .lines()
        .find(|l| l.starts_with("committee"))
        .unwrap()
        .to_string();
    assert_eq!(
        line.split_whitespace().last(),
        Some("1"),
        "only the 3-2 split is hard: {line}"
    );
    // Against the reference label "no": 5 members contradict it on `clear`, 3 on `split`.
    let o = run(
        &[
            "rethreshold",
            out.to_str().unwrap(),
            "--set",
            "committee.rule=disagree_with_label",
            "--set",
            "committee.min_disagree=4",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let sel = text
        .lines()
        .find_map(|l| l.strip_prefix("selection: "))
        .unwrap();
    let kept = vidcurate::stages::rethreshold::selected_ids(Path::new(sel)).unwrap();
    assert_eq!(
        kept.into_iter().collect::<Vec<_>>(),
        vec!["clear".to_string()]
    );
    assert_eq!(server.requests().len(), 10);
}

/// The local judge on a small hand-labelled title set (tests/fixtures/relevance_titles.csv):
/// every relevant title must outrank every irrelevant one of its domain, and the paper's cut
/// at 9 must separate them.
#[test]
fn local_relevance_judge_ranks_the_labelled_titles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !root.join("data/models/minilm/model.safetensors").exists() {
        panic!("data/models/minilm missing: run scripts/setup.sh");
    }
    let labelled =
        std::fs::read_to_string(root.join("tests/fixtures/relevance_titles.csv")).unwrap();
    for domain in ["protest", "arson"] {
        let dir = tempfile::tempdir().unwrap();
        let mut m = String::from("id,path,title,description,relevant\n");
        let mut truth = HashMap::new();
        let mut rdr = csv::Reader::from_reader(labelled.as_bytes());
        for r in rdr.records() {
            let r = r.unwrap();
            if &r[1] == domain {
                m += &format!(
                    "{},https://example.invalid/{}.mp4,\"{}\",\"{}\",{}\n",
                    &r[0], &r[0], &r[3], &r[4], &r[2]
                );
                truth.insert(r[0].to_string(), &r[2] == "1");
            }
        }
        write(&dir.path().join("m.csv"), &m);
        let p = dir.path().join("p.toml");
        write(
            &p,
            &format!(
                "name = \"l\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n[[stages]]\nid = \"relevance\"\ntype = \"relevance\"\ncompute = {{ service = \"local\", queries = \"{}\" }}\n",
                root.join(format!("queries/{domain}.toml")).display()
            ),
        );
        let out = dir.path().join("run");
        let o = run_command(&p, &out)
            .env("VIDCURATE_MODELS", root.join("data/models"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let rows = table_rows_file_all(&out.join("relevance"));
        assert_eq!(rows.len(), truth.len());
        let margin = |r: &std::collections::BTreeMap<String, String>| {
            r["pos_sim"].parse::<f64>().unwrap() - r["neg_sim"].parse::<f64>().unwrap()
        };
        let lowest_relevant = rows
            .iter()
            .filter(|r| truth[&r["video_id"]])
            .map(margin)
            .fold(f64::MAX, f64::min);
        let highest_other = rows
            .iter()
            .filter(|r| !truth[&r["video_id"]])
            .map(margin)
            .fold(f64::MIN, f64::max);
        assert!(
            lowest_relevant > highest_other,
            "{domain}: ranking overlaps"
        );
        for r in &rows {
            let s: u8 = r["score"].parse().unwrap();
            assert_eq!(
                s >= 9,
                truth[&r["video_id"]],
                "{domain} {}: score {s}",
                r["video_id"]
            );
        }
    }
}

/// JSON mode over the OpenAI API: the recorded JSON-content answer (an object, not the rubric's
/// array) is refused with a repair request, the repaired answer accepted.
#[test]
fn quality_over_openai_json_mode_repairs_a_wrong_json_answer() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let vids = dir.path().join("v");
    std::fs::create_dir_all(&vids).unwrap();
    plain_clip(&vids.join("a.mp4"), 1.0, "160x90");
    let server = FakeServer::start(|r: &Request| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["response_format"]["type"], "json_object");
        assert_eq!(v["temperature"], 0.0);
        let text = prompt_of(r);
        if text.contains("Your previous answer was invalid") {
            assert!(text.contains("no JSON array"), "{text}");
            openai_says(&rubric([2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 2]))
        } else {
            Response::json(200, llm_fixture("openai/chat_completion_json_content.json"))
        }
    });
    let p = dir.path().join("p.toml");
    let services = openai_service(&server.url());
    write(
        &p,
        &(pipeline(
            "dir = \"v\"",
            "{ mode = \"uniform\", count = 2 }",
            &services,
        ) + "\n[[stages]]\nid = \"quality\"\ntype = \"quality\"\ncompute = { service = \"openai\", model = \"gpt-4o\" }\n"),
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows = table_rows_file_all(&out.join("quality"));
    assert_eq!(rows[0]["twos"], "11");
    assert_eq!(rows[0]["attempts"], "2");
    assert_eq!(rows[0]["q11_camera_perspective"], "1");
    assert_eq!(server.requests().len(), 2);
}

/// The stall detector reports once, naming the stage that waits and what it holds, when nothing
/// finishes for `stall_secs`; a run that then moves on at its own (slow) pace is not reported
/// again, because the limit grows with the slowest stage's recent per-video time.
#[test]
fn a_stall_is_reported_once_with_what_each_stage_waits_on() {
    let server =
        FakeServer::start(|_r: &Request| openai_says("9").delayed(Duration::from_millis(3000)));
    let d = tempfile::tempdir().unwrap();
    url_manifest(d.path(), &["slow_a", "slow_b"]);
    let p = relevance_pipeline_with(
        d.path(),
        &server.url(),
        "timeout_secs = 30",
        "[runtime]\nstall_secs = 1",
        "max_in_flight = 1",
    );
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    let log = err(&o);
    assert!(o.status.success(), "{log}");
    assert_eq!(log.matches("Stalled").count(), 1, "{log}");
    let report = &log[log.find("Stalled").unwrap()..];
    eprintln!("{report}");
    assert!(
        report.contains(
            "relevance: taking input; received 1, finished 0, computing 1, waiting to send 0, 1/16 queued in front"
        ),
        "{report}"
    );
    assert!(report.contains("cpu pool"), "{report}");
    assert!(!log.contains(OPENAI_KEY));
    assert_eq!(server.count("/chat/completions"), 2);
}

/// Waits a server asks for are made safe: `Retry-After: -1`, `inf`, `1e30`, `abc` and a body's
/// "try again in 56s" with `max_wait_secs = 5` neither crash the run nor make it wait past 5 s.
#[test]
fn absurd_retry_waits_from_a_server_are_clamped_not_fatal() {
    let seen = Calls::<String>::default();
    let server = FakeServer::start(move |r: &Request| {
        let prompt = prompt_of(r);
        let title = title_of(&prompt);
        let n = seen.nth(title.clone());
        if n > 1 {
            return openai_says("9");
        }
        let limited = Response::json(429, llm_fixture("openai/error_429_rate_limit.json"));
        match title.as_str() {
            "neg" => limited.header("Retry-After", "-1"),
            "inf" => limited.header("Retry-After", "inf"),
            "huge" => limited.header("Retry-After", "1e30"),
            "abc" => limited.header("Retry-After", "abc"),
            "long" => Response::json(
                429,
                r#"{"error":{"message":"Rate limit reached. Please try again in 56s.","type":"requests","code":"rate_limit_exceeded"}}"#,
            ),
            other => panic!("unexpected title {other:?}"),
        }
    });
    let d = tempfile::tempdir().unwrap();
    url_manifest(d.path(), &["neg", "inf", "huge", "abc", "long"]);
    let p = relevance_pipeline_with(
        d.path(),
        &server.url(),
        "max_wait_secs = 5",
        "",
        "retries = 2",
    );
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    let log = err(&o);
    assert!(o.status.success(), "{log}");
    assert_eq!(column(&out.join("relevance"), "score"), vec!["9"; 5]);
    assert_eq!(server.count("/chat/completions"), 10);
    let waits: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("Retrying."))
        .filter_map(|l| l.split("wait_ms=").nth(1))
        .map(|w| w.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(waits.len(), 5, "{log}");
    assert!(waits.iter().all(|&w| w <= 5000), "{waits:?}");
    // The infinite, huge and 56 s asks were cut to the cap; the others fell back to backoff.
    assert_eq!(waits.iter().filter(|&&w| w == 5000).count(), 3, "{waits:?}");
}

/// The prompt's text is part of the fingerprint: editing it redoes that stage and the later ones
/// (and pays for their calls again), never the earlier ones.
#[test]
fn an_edited_prompt_redoes_its_stage_and_the_later_ones_only() {
    let server = FakeServer::start(|_r: &Request| openai_says("9"));
    let d = tempfile::tempdir().unwrap();
    url_manifest(d.path(), &["a", "b"]);
    let p = d.path().join("p.toml");
    let pipeline = |first: &str, second: &str| {
        format!(
            r#"name = "prompts"
{}
[source]
type = "local"
manifest = "m.csv"
urls = true

[[stages]]
id = "first"
type = "relevance"
compute = {{ service = "openai", model = "gpt-4o", event = "a flood", prompt = "{first}" }}

[[stages]]
id = "second"
type = "relevance"
compute = {{ service = "openai", model = "gpt-4o", event = "a flood", prompt = "{second}" }}
"#,
            openai_service(&server.url())
        )
    };
    let out = d.path().join("run");
    let c = |s: &str, k: &str| counts(&out, s)[k].as_u64().unwrap();
    let run = |text: String| {
        write(&p, &text);
        let o = run_with_key(&p, &out);
        assert!(o.status.success(), "{}", err(&o));
    };
    run(pipeline(
        "Is [risk event] shown? 1-10.",
        "Rate [risk event], 1-10.",
    ));
    assert_eq!(server.count("/chat/completions"), 4);
    // Same prompts: nothing is asked again.
    run(pipeline(
        "Is [risk event] shown? 1-10.",
        "Rate [risk event], 1-10.",
    ));
    assert_eq!(server.count("/chat/completions"), 4);
    assert_eq!((c("first", "reused"), c("second", "reused")), (2, 2));
    // The second prompt edited: only the second stage asks again.
    run(pipeline(
        "Is [risk event] shown? 1-10.",
        "Rate how much [risk event], 1-10.",
    ));
    assert_eq!(server.count("/chat/completions"), 6);
    assert_eq!((c("first", "reused"), c("second", "computed")), (2, 2));
    // The first prompt edited: both stages are redone, the source is kept. The second stage's
    // prompts are those of the run before, so its answers come from the response cache.
    run(pipeline(
        "Does it show [risk event]? 1-10.",
        "Rate how much [risk event], 1-10.",
    ));
    assert_eq!(server.count("/chat/completions"), 8);
    assert_eq!((c("first", "computed"), c("second", "computed")), (2, 2));
    assert_eq!(c("source", "reused"), 2);
    let prompts: Vec<String> = server
        .requests()
        .iter()
        .map(|(r, _)| prompt_of(r))
        .collect();
    assert!(
        prompts[4].starts_with("Rate how much a flood, 1-10."),
        "{prompts:?}"
    );
    assert!(
        prompts[7].starts_with("Does it show a flood? 1-10."),
        "{prompts:?}"
    );
}

/// One retry owner: a dead endpoint costs each video the stage's `retries` + 1 attempts, not a
/// product of the runner's and the client's retries; `max_retries` on a model service is refused
/// with a message saying where attempts are set.
#[test]
fn a_dead_endpoint_costs_at_most_retries_plus_one_attempts_per_video() {
    let server = FakeServer::start(|_r: &Request| {
        Response::json(500, llm_fixture("openai/error_500_server_error.json"))
    });
    let d = tempfile::tempdir().unwrap();
    url_manifest(d.path(), &["a", "b"]);
    let p = relevance_pipeline_with(d.path(), &server.url(), "", "", "retries = 2");
    let out = d.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(server.count("/chat/completions"), 2 * 3);
    let rejects = table_rows(&out.join("rejects"), &["rejected_at", "stage_fingerprint"]);
    assert_eq!(rejects.len(), 2, "{rejects:#?}");
    assert!(
        rejects
            .iter()
            .all(|r| r.contains("reason=service_unavailable"))
    );

    let p = relevance_pipeline_with(d.path(), &server.url(), "max_retries = 5", "", "");
    let o = run_with_key(&p, &d.path().join("run2"));
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("stage's `retries`"), "{}", err(&o));
    assert_eq!(server.count("/chat/completions"), 6);
}
