//! Batch mode against a fake OpenAI files + batches server on 127.0.0.1: uploads with
//! `purpose=batch`, batches that go validating → in_progress → finalizing → completed (or
//! stay in progress while a test holds them), output and error files whose lines are the real
//! recorded batch output lines of tests/fixtures/llm/openai/batch_output_2lines.jsonl (custom_id
//! and content swapped in; its second line, a `length` finish, served as is).

use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::{
    OPENAI_KEY, err, llm_fixture, openai_says, relevance_pipeline_with, run_with_key, url_manifest,
};
use crate::util::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct FakeBatch {
    id: String,
    input_file_id: String,
    created: Instant,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    total: usize,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Vec<u8>>,
    batches: Vec<FakeBatch>,
    /// How often each title was asked, over batches and live calls.
    asked: HashMap<String, usize>,
}

type Reply = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The fake's knobs: how long a batch stays in progress, a hold that keeps every batch in
/// progress until released, and who answers (the relevance rules of `answer`, or `reply`).
#[derive(Clone)]
pub(crate) struct Fake {
    state: Arc<Mutex<State>>,
    pub(crate) hold: Arc<AtomicBool>,
    run_for: Duration,
    reply: Option<Reply>,
}

fn title_of(body: &Value) -> String {
    let prompt = body["messages"][0]["content"].as_str().unwrap_or("");
    prompt
        .lines()
        .find_map(|l| l.strip_prefix("Title: "))
        .unwrap_or("")
        .to_string()
}

/// The recorded output line `n` (0 or 1) for `custom_id`, its content replaced unless None.
fn output_line(n: usize, custom_id: &str, content: Option<&str>) -> String {
    let text = String::from_utf8(llm_fixture("openai/batch_output_2lines.jsonl")).unwrap();
    let mut v: Value = serde_json::from_str(text.lines().nth(n).unwrap()).unwrap();
    v["custom_id"] = json!(custom_id);
    if let Some(c) = content {
        v["response"]["body"]["choices"][0]["message"]["content"] = json!(c);
    }
    v.to_string()
}

/// The answer for one request: (output line, or error line).
fn answer(title: &str, n: usize, custom_id: &str, repair: bool) -> Result<String, String> {
    match title {
        t if t.starts_with("riot") => Ok(output_line(0, custom_id, Some("9"))),
        "lecture" => Ok(output_line(0, custom_id, Some(" 2\n"))),
        // The recorded `length` line: not a score, so the stage asks again (a repair).
        "cut" if !repair => Ok(output_line(1, custom_id, None)),
        "cut" => Ok(output_line(0, custom_id, Some("8"))),
        // Never answered by a batch: an error line as OpenAI writes them.
        "expire" => Err(json!({"id": format!("batch_req_{n}"), "custom_id": custom_id, "response": null,
            "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}).to_string()),
        other => panic!("unexpected title {other:?}"),
    }
}

/// `reply`'s answer to the request of batch input line `v`, as the recorded output line.
fn replied_line(reply: &Reply, v: &Value) -> String {
    let req = Request {
        method: "POST".into(),
        path: v["url"].as_str().unwrap_or_default().into(),
        query: Default::default(),
        headers: Default::default(),
        body: serde_json::to_vec(&v["body"]).unwrap(),
    };
    let custom_id = v["custom_id"].as_str().unwrap();
    let mut line: Value = serde_json::from_str(&output_line(0, custom_id, None)).unwrap();
    line["response"]["body"] = serde_json::from_slice(&reply(&req).body).unwrap();
    line.to_string()
}

/// The multipart part named `name`: its bytes.
pub(crate) fn multipart_part(r: &Request, name: &str) -> Option<Vec<u8>> {
    let ct = r.headers.get("content-type")?;
    let boundary = ct.split("boundary=").nth(1)?.trim_matches('"');
    let delim = format!("--{boundary}");
    let body = &r.body;
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    let mut at = 0;
    while let Some(start) = find(body, delim.as_bytes(), at) {
        let head_start = start + delim.len() + 2;
        let head_end = find(body, b"\r\n\r\n", head_start)?;
        let head = String::from_utf8_lossy(&body[head_start..head_end]).to_string();
        let next = find(body, format!("\r\n{delim}").as_bytes(), head_end)?;
        if head.contains(&format!("name=\"{name}\"")) {
            return Some(body[head_end + 4..next].to_vec());
        }
        at = next + 2;
    }
    None
}

impl Fake {
    pub(crate) fn new(run_for: Duration) -> Self {
        Self {
            state: Arc::default(),
            hold: Arc::new(AtomicBool::new(false)),
            run_for,
            reply: None,
        }
    }

    /// A fake whose batches `reply` answers, each line as that handler answers the live call,
    /// complete at once (unless held): for callers other than the relevance stage.
    pub(crate) fn answering(reply: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        Self {
            reply: Some(Arc::new(reply)),
            ..Self::new(Duration::ZERO)
        }
    }

    fn status(&self, b: &FakeBatch) -> &'static str {
        if self.reply.is_some() {
            let held = self.hold.load(Ordering::SeqCst);
            return if held { "in_progress" } else { "completed" };
        }
        let t = b.created.elapsed();
        if t < Duration::from_millis(150) {
            "validating"
        } else if self.hold.load(Ordering::SeqCst) || t < self.run_for {
            "in_progress"
        } else if t < self.run_for + Duration::from_millis(150) {
            "finalizing"
        } else {
            "completed"
        }
    }

    /// The batch object as OpenAI returns it; writes the result files when it completes.
    fn batch_json(&self, st: &mut State, i: usize) -> Value {
        let status = self.status(&st.batches[i]);
        if status == "completed" && st.batches[i].output_file_id.is_none() {
            let input = st.files[&st.batches[i].input_file_id].clone();
            let (mut out, mut errs) = (String::new(), String::new());
            for (n, line) in String::from_utf8(input).unwrap().lines().enumerate() {
                let v: Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["method"], "POST");
                assert_eq!(v["url"], "/v1/chat/completions");
                let title = title_of(&v["body"]);
                let repair = v["body"]["messages"][0]["content"]
                    .as_str()
                    .unwrap()
                    .contains("Your previous answer was");
                *st.asked.entry(title.clone()).or_default() += 1;
                let line = match &self.reply {
                    Some(reply) => Ok(replied_line(reply, &v)),
                    None => answer(&title, n, v["custom_id"].as_str().unwrap(), repair),
                };
                match line {
                    Ok(l) => out += &format!("{l}\n"),
                    Err(l) => errs += &format!("{l}\n"),
                }
            }
            let (oid, eid) = (format!("file-out-{i}"), format!("file-err-{i}"));
            st.files.insert(oid.clone(), out.into_bytes());
            st.files.insert(eid.clone(), errs.into_bytes());
            st.batches[i].output_file_id = Some(oid);
            st.batches[i].error_file_id = Some(eid);
        }
        let b = &st.batches[i];
        let done = status == "completed";
        json!({
            "id": b.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": null,
            "input_file_id": b.input_file_id, "completion_window": "24h", "status": status,
            "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
            "created_at": 1734986000, "in_progress_at": null, "expires_at": 1735072400,
            "request_counts": {"total": b.total, "completed": if done { b.total } else { 0 }, "failed": 0},
            "metadata": {}
        })
    }

    pub(crate) fn server(&self) -> FakeServer {
        let me = self.clone();
        FakeServer::start(move |r: &Request| {
            if r.headers.get("authorization").map(String::as_str)
                != Some(&format!("Bearer {OPENAI_KEY}"))
            {
                return Response::json(
                    401,
                    r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
                );
            }
            let mut st = me.state.lock().unwrap();
            match (r.method.as_str(), r.path.as_str()) {
                ("POST", "/v1/files") => {
                    assert_eq!(multipart_part(r, "purpose").as_deref(), Some(&b"batch"[..]));
                    let file = multipart_part(r, "file").expect("a file part");
                    let id = format!("file-in-{}", st.files.len());
                    st.files.insert(id.clone(), file);
                    Response::json(200, json!({"id": id, "object": "file", "purpose": "batch", "filename": "x.jsonl", "bytes": 1, "created_at": 1734986000, "status": "processed"}).to_string())
                }
                ("POST", "/v1/batches") => {
                    let v: Value = serde_json::from_slice(&r.body).unwrap();
                    assert_eq!(v["endpoint"], "/v1/chat/completions");
                    assert_eq!(v["completion_window"], "24h");
                    let input = v["input_file_id"].as_str().unwrap().to_string();
                    let total = String::from_utf8_lossy(&st.files[&input]).lines().count();
                    let i = st.batches.len();
                    st.batches.push(FakeBatch {
                        id: format!("batch_{i}"),
                        input_file_id: input,
                        created: Instant::now(),
                        output_file_id: None,
                        error_file_id: None,
                        total,
                    });
                    Response::json(200, me.batch_json(&mut st, i).to_string())
                }
                ("GET", "/v1/batches") => {
                    let data: Vec<Value> = (0..st.batches.len())
                        .rev()
                        .map(|i| me.batch_json(&mut st, i))
                        .collect();
                    Response::json(
                        200,
                        json!({"object": "list", "data": data, "has_more": false}).to_string(),
                    )
                }
                ("GET", p) if p.starts_with("/v1/batches/") => {
                    let id = &p["/v1/batches/".len()..];
                    let i = st
                        .batches
                        .iter()
                        .position(|b| b.id == id)
                        .expect("a known batch");
                    Response::json(200, me.batch_json(&mut st, i).to_string())
                }
                ("GET", p) if p.starts_with("/v1/files/") && p.ends_with("/content") => {
                    let id = &p["/v1/files/".len()..p.len() - "/content".len()];
                    Response::bytes(200, "application/octet-stream", st.files[id].clone())
                }
                ("POST", "/v1/chat/completions") => {
                    let v: Value = serde_json::from_slice(&r.body).unwrap();
                    let title = title_of(&v);
                    *st.asked.entry(title.clone()).or_default() += 1;
                    if let Some(reply) = &me.reply {
                        return reply(r);
                    }
                    assert_eq!(
                        title, "expire",
                        "only a request the batch could not answer goes live"
                    );
                    openai_says("7")
                }
                other => panic!("unexpected request {other:?}"),
            }
        })
    }

    fn asked(&self, title: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .asked
            .get(title)
            .copied()
            .unwrap_or(0)
    }
}

/// Kills `child` (SIGKILL) once `created()` says its batch exists, then drops the first job's
/// batch id from `jobs` as if the kill had come before it was recorded; the jobs as left.
pub(crate) fn kill_and_forget_the_batch_id(
    child: &mut std::process::Child,
    created: impl Fn() -> bool,
    jobs: &Path,
) -> Value {
    let t0 = Instant::now();
    // Until the run has recorded the id too, so the test is the one that loses it.
    let recorded = || {
        std::fs::read(jobs)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v[0]["batch_id"].is_string())
    };
    while !(created() && recorded()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no batch was created and recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut v: Value = serde_json::from_slice(&std::fs::read(jobs).unwrap()).unwrap();
    v[0]["batch_id"] = Value::Null;
    std::fs::write(jobs, v.to_string()).unwrap();
    v
}

pub(crate) fn posts(s: &FakeServer, path: &str) -> usize {
    s.requests()
        .iter()
        .filter(|(r, _)| r.method == "POST" && r.path == path)
        .count()
}

const TITLES: [&str; 4] = ["riot", "lecture", "cut", "expire"];

fn batch_pipeline(dir: &Path, url: &str, service: &str) -> std::path::PathBuf {
    batch_pipeline_with(dir, url, service, "")
}

fn batch_pipeline_with(dir: &Path, url: &str, service: &str, stage: &str) -> std::path::PathBuf {
    url_manifest(dir, &TITLES);
    relevance_pipeline_with(
        dir,
        url,
        &format!(
            "timeout_secs = 5\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0\nbatch_poll_secs = 0.05\n{service}"
        ),
        "",
        &format!("retries = 1\nselect = {{ min_score = 1 }}\n{stage}"),
    )
}

fn scores(out: &Path) -> HashMap<String, (String, String)> {
    table_rows_file_all(&out.join("relevance"))
        .into_iter()
        .map(|r| {
            (
                r["video_id"].clone(),
                (r["score"].clone(), r["attempts"].clone()),
            )
        })
        .collect()
}

#[test]
fn batch_round_trip_repairs_in_the_next_batch_and_retries_errors_live() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(Duration::from_millis(300));
    let server = fake.server();
    let p = batch_pipeline(dir.path(), &server.url(), "mode = \"batch\"");
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let s = scores(&out);
    assert_eq!(s["riot"], ("9".into(), "1".into()));
    assert_eq!(s["lecture"], ("2".into(), "1".into()));
    assert_eq!(
        s["cut"],
        ("8".into(), "2".into()),
        "repaired in a second batch"
    );
    assert_eq!(s["expire"].0, "7", "batch_expired asked again live");
    // Two batches: the four first requests, then the repair; one upload each, one live call.
    assert_eq!(posts(&server, "/v1/batches"), 2);
    assert_eq!(posts(&server, "/v1/files"), 2);
    assert_eq!(server.count("/v1/chat/completions"), 1);
    assert_eq!(
        (fake.asked("riot"), fake.asked("cut"), fake.asked("expire")),
        (1, 2, 2)
    );
    assert!(
        err(&o).contains("passes: 2 batches answered 5 requests (1 with an error"),
        "{}",
        err(&o)
    );

    // A rerun sends nothing.
    let before = server.requests().len();
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(server.requests().len(), before);

    // `cache stats`: four batch answers at half price, one live.
    let o = run(&["cache", "stats", out.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    eprintln!("{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("openai"))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[2], cols[3]), ("5", "4"), "entries, batch: {text}");
    // Recorded usage: 20 + 22 + 20 + 20 prompt tokens and 10 each from the batch lines (at 1.25
    // and 5 $/Mtok), the live fixture's usage at the full price.
    let live: Value =
        serde_json::from_slice(&llm_fixture("openai/chat_completion_text.json")).unwrap();
    let (li, lo) = (
        live["usage"]["prompt_tokens"].as_f64().unwrap(),
        live["usage"]["completion_tokens"].as_f64().unwrap(),
    );
    let want = (82.0 * 1.25 + 40.0 * 5.0 + li * 2.5 + lo * 10.0) / 1e6;
    let got: f64 = cols[8].parse().unwrap();
    assert!((got - want).abs() < 1e-4, "{got} vs {want}: {text}");
    assert!(text.contains("less than live"), "{text}");
    // Per stage: the batch's answers (filed after the pass, under the stage that queued them)
    // and the live one are all the relevance stage's.
    let staged: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() == 10 && c[1] == "openai")
        .collect();
    assert_eq!(staged.len(), 1, "{text}");
    assert_eq!(
        (staged[0][0], staged[0][3], staged[0][4]),
        ("relevance", "5", "4"),
        "stage, entries, batch: {text}"
    );
    let o = run(&["batch", "status", out.to_str().unwrap()], dir.path());
    let st = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        st.contains("service openai: 0 requests waiting, 2 batches")
            && st.contains("imported: 3 answers, 1 errors"),
        "{st}"
    );

    // A stage can batch through a service that is live for the others.
    let dir3 = tempfile::tempdir().unwrap();
    let p = batch_pipeline_with(dir3.path(), &server.url(), "", "mode = \"batch\"");
    let before = posts(&server, "/v1/batches");
    let o = run_with_key(&p, &dir3.path().join("run"));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(posts(&server, "/v1/batches"), before + 2);
    assert!(
        dir3.path()
            .join("run/batches/openai@batch/jobs.json")
            .exists()
    );

    // With batch_errors = "reject", the expired request rejects its video instead.
    let dir2 = tempfile::tempdir().unwrap();
    let p = batch_pipeline(
        dir2.path(),
        &server.url(),
        "mode = \"batch\"\nbatch_errors = \"reject\"",
    );
    let out2 = dir2.path().join("run");
    let live_before = server.count("/v1/chat/completions");
    let o = run_with_key(&p, &out2);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let rejects = table_rows(&out2.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("expire")
            && rejects.contains("batch_error")
            && rejects.contains("batch_expired"),
        "{rejects}"
    );
    assert_eq!(server.count("/v1/chat/completions"), live_before);
}

#[test]
fn a_run_killed_while_its_batch_runs_resumes_polling_and_submits_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(Duration::from_millis(200));
    fake.hold.store(true, Ordering::SeqCst);
    let server = fake.server();
    let p = batch_pipeline(dir.path(), &server.url(), "mode = \"batch\"");
    let out = dir.path().join("run");
    let creates = |s: &FakeServer| posts(s, "/v1/batches");
    let polls = |s: &FakeServer| {
        s.requests()
            .iter()
            .filter(|(r, _)| r.method == "GET" && r.path.starts_with("/v1/batches/"))
            .count()
    };
    let mut child = run_command(&p, &out)
        .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let jobs_file = out.join("batches/openai/jobs.json");
    let in_progress =
        || std::fs::read_to_string(&jobs_file).is_ok_and(|t| t.contains("\"in_progress\""));
    while !(in_progress() && polls(&server) >= 5) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run never saw its batch in progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // kill -9 while the batch is in progress.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(creates(&server), 1);
    let jobs: Value =
        serde_json::from_slice(&std::fs::read(out.join("batches/openai/jobs.json")).unwrap())
            .unwrap();
    assert_eq!(jobs[0]["batch_id"], "batch_0", "{jobs}");
    assert_eq!(jobs[0]["status"], "in_progress", "{jobs}");

    // The resume polls the same batch; released, it completes the run.
    fake.hold.store(false, Ordering::SeqCst);
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(scores(&out)["cut"].0, "8");
    // The repair is the only other batch.
    assert_eq!(creates(&server), 2);
    assert_eq!(fake.asked("riot"), 1, "the first batch's requests ran once");

    // A kill between creating a batch and recording its id: the next run finds the batch by its
    // input file in the provider's list instead of creating another.
    let dir2 = tempfile::tempdir().unwrap();
    let p2 = batch_pipeline(dir2.path(), &server.url(), "mode = \"batch\"");
    let out2 = dir2.path().join("run");
    fake.hold.store(true, Ordering::SeqCst);
    let before = creates(&server);
    let mut child = run_command(&p2, &out2)
        .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    kill_and_forget_the_batch_id(
        &mut child,
        || creates(&server) > before,
        &out2.join("batches/openai/jobs.json"),
    );
    fake.hold.store(false, Ordering::SeqCst);
    let o = run_with_key(&p2, &out2);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        creates(&server),
        before + 2,
        "the lost batch adopted; only the repair batch is new"
    );
}

#[test]
fn offline_mode_exports_requests_and_imports_results() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(Duration::ZERO);
    let server = fake.server();
    let p = batch_pipeline(dir.path(), &server.url(), "mode = \"offline\"");
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    // The hint names the run and the waiting stage: both commands paste as printed.
    let hint = err(&o);
    let r = out.display();
    for cmd in ["export", "import"] {
        let want = format!("`vidcurate batch {cmd} {r} relevance ");
        assert!(hint.contains(&want), "no {want:?} in {hint}");
    }
    assert_eq!(server.requests().len(), 0, "offline mode sends nothing");
    let req = dir.path().join("requests.jsonl");
    let o = run(
        &[
            "batch",
            "export",
            out.to_str().unwrap(),
            "relevance",
            "-o",
            req.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let lines: Vec<Value> = std::fs::read_to_string(&req)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    // What `vllm run-batch` would write: one output line per request.
    let mut results = String::new();
    for (n, l) in lines.iter().enumerate() {
        assert_eq!(l["url"], "/v1/chat/completions");
        assert_eq!(l["body"]["model"], "gpt-4o");
        let title = title_of(&l["body"]);
        results += &format!(
            "{}\n",
            answer(&title, n, l["custom_id"].as_str().unwrap(), false).unwrap_or_else(|e| e)
        );
    }
    results += &output_line(0, "someone-elses-request", Some("3"));
    // A line cut off in a copy: reported by number, the rest still filed.
    results += "\n{\"custom_id\": \"trunc\n";
    let res = dir.path().join("results.jsonl");
    std::fs::write(&res, results).unwrap();
    let o = run(
        &[
            "batch",
            "import",
            out.to_str().unwrap(),
            "relevance",
            res.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        said.contains("3 answers into the response cache, 1 errors, 1 lines that are not requests"),
        "{said}"
    );
    assert!(
        err(&o).contains(
            "1 lines are not batch result lines (no custom_id or key) and were ignored: line 6"
        ),
        "{}",
        err(&o)
    );
    // Into a folder that has no batch queues: refused, nothing created.
    let elsewhere = dir.path().join("not-a-run");
    let o = run(
        &[
            "batch",
            "import",
            elsewhere.to_str().unwrap(),
            "relevance",
            res.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("no batch queues"), "{}", err(&o));
    assert!(!elsewhere.exists());
    // The rerun uses the answers; the repair of `cut` and the expired one wait again.
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    let s = scores(&out);
    assert_eq!((s["riot"].0.as_str(), s["lecture"].0.as_str()), ("9", "2"));
    let o = run(
        &["batch", "export", out.to_str().unwrap(), "relevance"],
        dir.path(),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        2,
        "{}",
        err(&o)
    );
    assert_eq!(server.requests().len(), 0);
}

/// A fake Gemini Batch Mode: `models/M:batchGenerateContent` with inline requests or an
/// uploaded file (the Files API's resumable start + upload/finalize), operations that go
/// BATCH_STATE_PENDING → RUNNING → SUCCEEDED (or stay running while held), results inline or as
/// a `responsesFile` to download, made of the recorded generateContent bodies (text swapped;
/// the recorded SAFETY finish for one), an error item for another, and `generateContent` live
/// for the retry.
fn gemini_batch_fake(hold: Arc<AtomicBool>) -> (FakeServer, Arc<Mutex<Vec<Value>>>) {
    use crate::judge::{GEMINI_KEY, gemini_says};
    let created: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let files: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
    let (c2, b2, f2) = (created.clone(), bodies.clone(), files.clone());
    let op = move |i: usize,
                   at: Instant,
                   body: &Value,
                   hold: bool,
                   files: &mut HashMap<String, Vec<u8>>|
          -> Value {
        let t = at.elapsed();
        let state = if t < Duration::from_millis(100) {
            "BATCH_STATE_PENDING"
        } else if hold || t < Duration::from_millis(300) {
            "BATCH_STATE_RUNNING"
        } else {
            "BATCH_STATE_SUCCEEDED"
        };
        let batch = &body["batch"];
        let input = &batch["input_config"];
        // (key, request) pairs, inline or from the uploaded file.
        let reqs: Vec<(Value, Value)> = match input["file_name"].as_str() {
            Some(f) => String::from_utf8(files[f].clone())
                .unwrap()
                .lines()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    assert_eq!(
                        v.as_object().unwrap().len(),
                        2,
                        "file lines are {{key, request}}: {v}"
                    );
                    (v["key"].clone(), v["request"].clone())
                })
                .collect(),
            None => input["requests"]["requests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["metadata"]["key"].clone(), r["request"].clone()))
                .collect(),
        };
        let mut o = json!({"name": format!("batches/b{i}"), "metadata": {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": "models/gemini-2.5-flash-lite", "displayName": batch["display_name"], "state": state,
            "batchStats": {"requestCount": reqs.len().to_string()}}});
        if state == "BATCH_STATE_SUCCEEDED" {
            let text = |s: &str| -> Value { serde_json::from_slice(&gemini_says(s).body).unwrap() };
            let items: Vec<Value> = reqs
                .iter()
                .map(|(key, req)| {
                    let prompt = req["contents"][0]["parts"][0]["text"].as_str().unwrap();
                    let title = prompt.lines().find_map(|l| l.strip_prefix("Title: ")).unwrap_or("");
                    match title {
                        "riot" => json!({"response": text("9"), "key": key}),
                        "lecture" => json!({"response": text("2"), "key": key}),
                        "unsafe" => json!({"response": serde_json::from_slice::<Value>(&llm_fixture("gemini/generate_content_finish_safety.json")).unwrap(), "key": key}),
                        "expire" => json!({"error": {"code": 4, "message": "Deadline expired before operation could complete.", "status": "DEADLINE_EXCEEDED"}, "key": key}),
                        other => panic!("unexpected title {other:?}"),
                    }
                })
                .collect();
            o["done"] = json!(true);
            o["response"] = if input["file_name"].is_string() {
                let name = format!("files/out-{i}");
                let lines: String = items.iter().map(|it| format!("{it}\n")).collect();
                files.insert(name.clone(), lines.into_bytes());
                json!({"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput",
                    "responsesFile": name})
            } else {
                // Inline items carry the key in their metadata.
                let inline: Vec<Value> = items
                    .into_iter()
                    .map(|mut it| {
                        let key = it.as_object_mut().unwrap().remove("key").unwrap();
                        it["metadata"] = json!({"key": key});
                        it
                    })
                    .collect();
                json!({"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput",
                    "inlinedResponses": {"inlinedResponses": inline}})
            };
        }
        o
    };
    let server = FakeServer::start(move |r: &Request| {
        if r.headers.get("x-goog-api-key").map(String::as_str) != Some(GEMINI_KEY) {
            return Response::json(400, llm_fixture("gemini/error_400_api_key_invalid.json"));
        }
        let mut c = c2.lock().unwrap();
        let mut files = f2.lock().unwrap();
        let held = hold.load(Ordering::SeqCst);
        match (r.method.as_str(), r.path.as_str()) {
            ("POST", "/upload/v1beta/files") => {
                assert_eq!(
                    r.headers.get("x-goog-upload-protocol").map(String::as_str),
                    Some("resumable")
                );
                assert_eq!(
                    r.headers.get("x-goog-upload-command").map(String::as_str),
                    Some("start")
                );
                let host = r.headers["host"].clone();
                let n = files.len();
                Response::json(200, "{}").header(
                    "X-Goog-Upload-URL",
                    &format!("http://{host}/upload-session/{n}"),
                )
            }
            ("POST", p) if p.starts_with("/upload-session/") => {
                assert_eq!(
                    r.headers.get("x-goog-upload-command").map(String::as_str),
                    Some("upload, finalize")
                );
                let name = format!("files/in-{}", &p["/upload-session/".len()..]);
                files.insert(name.clone(), r.body.clone());
                Response::json(200, json!({"file": {"name": name, "mimeType": "application/jsonl", "state": "ACTIVE"}}).to_string())
            }
            ("GET", p) if p.starts_with("/download/v1beta/files/") => {
                assert_eq!(r.query.get("alt").map(String::as_str), Some("media"));
                let name = p["/download/v1beta/".len()..]
                    .trim_end_matches(":download")
                    .to_string();
                Response::bytes(200, "application/octet-stream", files[&name].clone())
            }
            ("POST", "/v1beta/models/gemini-2.5-flash-lite:batchGenerateContent") => {
                let v: Value = serde_json::from_slice(&r.body).unwrap();
                b2.lock().unwrap().push(v.clone());
                c.push((Instant::now(), v));
                let (at, body) = c.last().unwrap().clone();
                Response::json(
                    200,
                    op(c.len() - 1, at, &body, held, &mut files).to_string(),
                )
            }
            ("GET", "/v1beta/batches") => {
                let ops: Vec<Value> = (0..c.len())
                    .map(|i| op(i, c[i].0, &c[i].1.clone(), held, &mut files))
                    .collect();
                Response::json(200, json!({"operations": ops}).to_string())
            }
            ("GET", p) if p.starts_with("/v1beta/batches/b") => {
                let i: usize = p["/v1beta/batches/b".len()..].parse().unwrap();
                let (at, b) = c[i].clone();
                Response::json(200, op(i, at, &b, held, &mut files).to_string())
            }
            ("POST", "/v1beta/models/gemini-2.5-flash-lite:generateContent") => {
                let v: Value = serde_json::from_slice(&r.body).unwrap();
                let prompt = v["contents"][0]["parts"][0]["text"].as_str().unwrap();
                assert!(
                    prompt.contains("Title: expire"),
                    "only the request the batch could not answer goes live"
                );
                gemini_says("6")
            }
            other => panic!("unexpected request {other:?}"),
        }
    });
    (server, bodies)
}

fn gemini_batch_pipeline(dir: &Path, url: &str) -> std::path::PathBuf {
    gemini_batch_pipeline_with(dir, url, "")
}

fn gemini_batch_pipeline_with(dir: &Path, url: &str, service: &str) -> std::path::PathBuf {
    url_manifest(dir, &["riot", "lecture", "unsafe", "expire"]);
    let p = dir.join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "gem"
[services.gemini]
base_url = "{url}v1beta/"
api = "gemini"
api_key_env = "VIDCURATE_TEST_GEMINI_KEY"
mode = "batch"
batch_poll_secs = 0.05
{service}

[source]
type = "local"
manifest = "m.csv"
urls = true

[[stages]]
id = "relevance"
type = "relevance"
compute = {{ service = "gemini", model = "gemini-2.5-flash-lite", event = "a protest turning violent" }}
select = {{ min_score = 1 }}
"#
        ),
    );
    p
}

#[test]
fn gemini_batch_mode_round_trip_and_a_lost_batch_name_is_found_again() {
    let dir = tempfile::tempdir().unwrap();
    let hold = Arc::new(AtomicBool::new(true));
    let (server, bodies) = gemini_batch_fake(hold.clone());
    let p = gemini_batch_pipeline(dir.path(), &server.url());
    let out = dir.path().join("run");
    let creates = |s: &FakeServer| {
        posts(
            s,
            "/v1beta/models/gemini-2.5-flash-lite:batchGenerateContent",
        )
    };
    let mut child = run_command(&p, &out)
        .env("VIDCURATE_TEST_GEMINI_KEY", crate::judge::GEMINI_KEY)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // As if killed before the batch's name was recorded: the rerun must find it by display name.
    let jobs = kill_and_forget_the_batch_id(
        &mut child,
        || creates(&server) > 0,
        &out.join("batches/gemini/jobs.json"),
    );
    assert_eq!(jobs[0]["model"], "gemini-2.5-flash-lite", "{jobs}");
    hold.store(false, Ordering::SeqCst);
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(
        creates(&server),
        1,
        "one batch, found again after the lost name"
    );
    let body = bodies.lock().unwrap()[0].clone();
    let reqs = body["batch"]["input_config"]["requests"]["requests"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs.iter()
            .all(|r| r["metadata"]["key"].as_str().is_some_and(|k| k.len() == 64))
    );
    let s = scores(&out);
    assert_eq!(
        (
            s["riot"].0.as_str(),
            s["lecture"].0.as_str(),
            s["expire"].0.as_str()
        ),
        ("9", "2", "6")
    );
    let rejects = table_rows(&out.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("unsafe") && rejects.contains("blocked") && rejects.contains("SAFETY"),
        "{rejects}"
    );
    assert_eq!(
        server.count(":generateContent"),
        1,
        "the DEADLINE_EXCEEDED item asked again live"
    );
    // Cached answers rerun without a call.
    let n = server.requests().len();
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(server.requests().len(), n);
}

#[test]
fn hundreds_of_videos_through_small_channels_go_out_in_several_batches() {
    // 300 videos, 2-slot channels, 4 in flight, at most 120 requests a batch: the first pass
    // must set every video aside without backing up, and three batches answer them all.
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(Duration::from_millis(200));
    let server = fake.server();
    let titles: Vec<String> = (0..300).map(|i| format!("riot{i}")).collect();
    let t: Vec<&str> = titles.iter().map(String::as_str).collect();
    url_manifest(dir.path(), &t);
    let p = relevance_pipeline_with(
        dir.path(),
        &server.url(),
        "mode = \"batch\"\nbatch_poll_secs = 0.05\nbatch_max_requests = 120",
        "[runtime]\nchannel_capacity = 2",
        "max_in_flight = 4\nselect = { min_score = 1 }",
    );
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(posts(&server, "/v1/batches"), 3);
    assert_eq!(server.count("/v1/chat/completions"), 0);
    let s = scores(&out);
    assert_eq!(s.len(), 300);
    assert!(
        s.values()
            .all(|(score, attempts)| score == "9" && attempts == "1")
    );
    let jobs: Value =
        serde_json::from_slice(&std::fs::read(out.join("batches/openai/jobs.json")).unwrap())
            .unwrap();
    let sizes: Vec<u64> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![120, 120, 60]);
}

#[test]
fn a_gemini_batch_over_the_inline_limit_goes_as_an_uploaded_file() {
    let dir = tempfile::tempdir().unwrap();
    let (server, bodies) = gemini_batch_fake(Arc::new(AtomicBool::new(false)));
    // Every job is over a limit of 0 MiB: uploaded as a JSONL file, results downloaded.
    let p = gemini_batch_pipeline_with(dir.path(), &server.url(), "batch_inline_mib = 0");
    let out = dir.path().join("run");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(posts(&server, "/upload/v1beta/files"), 1);
    let body = bodies.lock().unwrap()[0].clone();
    assert!(
        body["batch"]["input_config"]["file_name"]
            .as_str()
            .is_some_and(|f| f.starts_with("files/in-")),
        "{body}"
    );
    assert_eq!(server.count("/download/v1beta/files/out-0"), 1);
    let s = scores(&out);
    assert_eq!(
        (
            s["riot"].0.as_str(),
            s["lecture"].0.as_str(),
            s["expire"].0.as_str()
        ),
        ("9", "2", "6")
    );
    let jobs: Value =
        serde_json::from_slice(&std::fs::read(out.join("batches/gemini/jobs.json")).unwrap())
            .unwrap();
    assert_eq!(jobs[0]["file_id"], "files/in-0", "{jobs}");
}
