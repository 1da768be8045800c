//! The metrics endpoint (`run --metrics`, issue 49), scraped by a real Prometheus (Debian's
//! package, installed by scripts/setup.sh) on 127.0.0.1: two ranks of one run, each with its
//! own endpoint; at the end Prometheus' query API answers every stage's funnel per rank, equal to
//! what each rank's run printed. The endpoint itself: every family the dashboard in
//! deploy/grafana/ queries, no key in its text, a bad address or a port in use refused before
//! any work.

use crate::fake_http::{Calls, FakeServer, Request, Response};
use crate::judge::{
    OPENAI_KEY, llm_fixture, openai_says, prompt_of, relevance_pipeline_with, title_of,
    url_manifest,
};
use crate::need_ffmpeg;
use crate::util::*;
use crate::youtube::{KEY as YT_KEY, youtube_fake, yt_pipeline};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// GET `path` on 127.0.0.1:`port`: (status, body), or None when nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A key in the environment of every run here: no metric may show it.
const SECRET: &str = "sk-metrics-test-secret";

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Prometheus scraping `targets` every second, its API on the returned port.
fn prometheus(dir: &Path, targets: &[u16]) -> (Prometheus, u16) {
    let bin = Path::new("/usr/bin/prometheus");
    assert!(
        bin.exists(),
        "prometheus is not installed: run ./scripts/setup.sh (it installs Debian's prometheus)"
    );
    let list: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let cfg = dir.join("prometheus.yml");
    write(
        &cfg,
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: vidcurate\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        ),
    );
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    let p = Prometheus(child);
    let t0 = Instant::now();
    while get(port, "/-/ready").is_none_or(|(s, _)| s != 200) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus did not start: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (p, port)
}

/// Instant query of the last value of `series` in the last 10 minutes (a finished rank's series
/// are stale once its endpoint is gone, and a plain query no longer shows them): each series'
/// labels and value.
fn query(port: u16, series: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let q = format!("last_over_time({series}[10m])");
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = get(port, &format!("/api/v1/query?query={enc}")).unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = r["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            (labels, r["value"][1].as_str().unwrap().parse().unwrap())
        })
        .collect()
}

/// The funnel a run printed: stage -> [received, computed, reused, rejected, filtered, forwarded].
fn printed_funnel(stderr: &str) -> BTreeMap<String, Vec<u64>> {
    stderr
        .lines()
        .skip_while(|l| !l.starts_with("stage "))
        .skip(1)
        .map_while(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n: Option<Vec<u64>> = f.get(1..7)?.iter().map(|x| x.parse().ok()).collect();
            Some((f[0].to_string(), n?))
        })
        .collect()
}

/// Six 1 s clips and a broken file (a reject in the funnel), probe and 2 frames a clip.
fn small_run(dir: &Path) -> PathBuf {
    let videos = dir.join("videos");
    std::fs::create_dir_all(&videos).unwrap();
    for i in 0..6 {
        let out = videos.join(format!("clip{i}.mp4"));
        ffmpeg(&[
            "-f",
            "lavfi",
            "-i",
            &format!("testsrc=size=160x120:rate=10:duration=1,hue=h={}", i * 60),
            "-pix_fmt",
            "yuv420p",
            out.to_str().unwrap(),
        ]);
    }
    write(&videos.join("broken.mp4"), "not a video");
    let p = dir.join("p.toml");
    write(
        &p,
        &pipeline(
            &format!("dir = \"{}\"", videos.display()),
            "{ count = 2 }",
            "",
        ),
    );
    p
}

fn run_with_metrics(p: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = run_command(p, out);
    c.args(extra).env("OPENAI_API_KEY", SECRET);
    c
}

#[test]
fn prometheus_scrapes_two_ranks_and_their_counters_equal_the_funnel() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let p = small_run(d.path());
    let ports = [free_port(), free_port()];
    let (_prom, api) = prometheus(d.path(), &ports);
    let run_dir = d.path().join("run");
    let mut printed = BTreeMap::new();
    for rank in 0..2 {
        let addr = format!("127.0.0.1:{}", ports[rank]);
        let o = run_with_metrics(
            &p,
            &run_dir,
            &[
                "--rank",
                &rank.to_string(),
                "--world",
                "2",
                "--metrics",
                &addr,
            ],
        )
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(matches!(o.status.code(), Some(0 | 3)), "{err}");
        printed.insert(rank.to_string(), printed_funnel(&err));
    }
    // Prometheus read each rank's last counts before its run let go (--metrics-hold).
    let ended = query(api, "vidcurate_run_ended");
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert!(ended.iter().all(|(_, v)| *v == 1.0), "{ended:?}");
    let mut scraped: BTreeMap<(String, String), BTreeMap<String, f64>> = BTreeMap::new();
    for (l, v) in query(api, "vidcurate_stage_videos_total") {
        scraped
            .entry((l["rank"].clone(), l["stage"].clone()))
            .or_default()
            .insert(l["outcome"].clone(), v);
        assert_eq!(l["world"], "2");
    }
    let mut stages = 0;
    for (rank, funnel) in &printed {
        assert_eq!(funnel.len(), 3, "source, probe, frames: {funnel:?}");
        for (stage, n) in funnel {
            let s = &scraped[&(rank.clone(), stage.clone())];
            let got = [
                s["received"],
                s["computed"],
                s["reused"],
                s["rejected"] + s["rejected_before"],
                s["filtered"],
                s["forwarded"],
            ];
            let want: Vec<f64> = n.iter().map(|x| *x as f64).collect();
            assert_eq!(got.to_vec(), want, "rank {rank} stage {stage}");
            stages += 1;
        }
    }
    assert_eq!(stages, 6);
    // The ranks split the seven files between them (both have frames to take), and the broken
    // one is a reject on one of them.
    let received: f64 = ["0", "1"]
        .iter()
        .map(|r| scraped[&(r.to_string(), "source".to_string())]["received"])
        .sum();
    assert_eq!(received, 7.0);
    for r in ["0", "1"] {
        assert!(
            scraped[&(r.to_string(), "frames".to_string())]["computed"] > 0.0,
            "rank {r}"
        );
    }
    let rejected: f64 = query(api, "vidcurate_stage_videos_total{outcome=\"rejected\"}")
        .iter()
        .map(|(_, v)| v)
        .sum();
    assert_eq!(rejected, 1.0);
}

/// Runs `p` into `out` with `env` and the endpoint on a free port, scraping it until the run
/// ends: the last text, the exit code and the port.
fn run_scraped(p: &Path, out: &Path, env: (&str, &str)) -> (String, Option<i32>, u16) {
    let port = free_port();
    let mut child = run_command(p, out)
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .env(env.0, env.1)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let body = scrape_to_end(port);
    (body, child.wait().unwrap().code(), port)
}

/// Scrapes until the run has ended (it holds the endpoint for this last scrape): the last text.
fn scrape_to_end(port: u16) -> String {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run did not end"
        );
        match get(port, "/metrics") {
            Some((200, b)) if b.contains("vidcurate_run_ended{rank=\"0\",world=\"1\"} 1") => {
                return b;
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The value of the one series of `family` whose labels include every one of `labels`.
fn value(body: &str, family: &str, labels: &[&str]) -> f64 {
    let found: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{family} {labels:?} in\n{body}");
    found[0]
}

/// A relevance stage against a fake OpenAI (its recorded bodies): one title answered at once, one
/// after a 429 whose body asks for a wait, one after a 500 (our backoff). The endpoint counts the
/// retries by whose wait it was, and the answers, tokens and USD of the service.
#[test]
fn retries_answers_tokens_and_usd_of_a_model_service() {
    let d = tempfile::tempdir().unwrap();
    let seen = Calls::<String>::default();
    let server = FakeServer::start(move |r: &Request| {
        let title = title_of(&prompt_of(r));
        let n = seen.nth(title.clone());
        match (title.as_str(), n) {
            ("ratelimit", 1) => {
                Response::json(429, llm_fixture("openai/error_429_rate_limit.json"))
            }
            ("flaky", 1) => Response::json(500, llm_fixture("openai/error_500_server_error.json")),
            _ => openai_says("9"),
        }
    });
    url_manifest(d.path(), &["riot", "ratelimit", "flaky"]);
    let p = relevance_pipeline_with(
        d.path(),
        &server.url(),
        "requests_per_minute = 6000\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0",
        "",
        "retries = 2",
    );
    let env = ("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY);
    let (body, code, _) = run_scraped(&p, &d.path().join("run"), env);
    assert_eq!(code, Some(0));
    let rel = "stage=\"relevance\"";
    let retries = "vidcurate_stage_retries_total";
    assert_eq!(value(&body, retries, &[rel, "wait=\"service\""]), 1.0);
    assert_eq!(value(&body, retries, &[rel, "wait=\"backoff\""]), 1.0);
    let waited = "vidcurate_stage_retry_wait_seconds_total";
    assert!(value(&body, waited, &[rel, "wait=\"backoff\""]) > 0.0);
    let openai = "service=\"openai\"";
    assert_eq!(
        value(&body, "vidcurate_service_answers_total", &[openai]),
        3.0
    );
    // The recorded body's usage: 14 prompt and 37 completion tokens an answer.
    let tokens = "vidcurate_service_tokens_total";
    assert_eq!(value(&body, tokens, &[openai, "kind=\"input\""]), 42.0);
    assert_eq!(value(&body, tokens, &[openai, "kind=\"output\""]), 111.0);
    // Every attempt by its answer's status: 3 answers, the 429 and the 500; none in flight.
    let requests = "vidcurate_service_requests_total";
    for (status, n) in [("200", 3.0), ("429", 1.0), ("500", 1.0)] {
        let s = format!("status=\"{status}\"");
        assert_eq!(value(&body, requests, &[openai, &s]), n, "{status}");
    }
    assert_eq!(
        value(&body, "vidcurate_service_calls_in_flight", &[openai]),
        0.0
    );
    let usd = value(&body, "vidcurate_service_usd_total", &[openai]);
    assert!(
        (usd - (42.0 * 2.5 + 111.0 * 10.0) / 1e6).abs() < 1e-12,
        "{usd}"
    );
    assert!(!body.contains(OPENAI_KEY));
}

/// A YouTube collection against the fake Data API: the quota left per bucket after the run's
/// two searches and one videos.list, under the key's id, never the key.
#[test]
fn the_youtube_quota_left_per_bucket() {
    let d = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    let p = yt_pipeline(
        d.path(),
        &fake.server.url(),
        "search_calls_per_day = 10\nunits_per_day = 50",
    );
    let env = ("VIDCURATE_TEST_YT_KEY", YT_KEY);
    let (body, code, _) = run_scraped(&p, &d.path().join("run"), env);
    assert!(matches!(code, Some(0 | 3)));
    assert_eq!(
        (fake.server.count("/search"), fake.server.count("/videos")),
        (2, 1)
    );
    let left = "vidcurate_youtube_quota_left";
    assert_eq!(value(&body, left, &["bucket=\"search.list\""]), 8.0);
    assert_eq!(value(&body, left, &["bucket=\"units\""]), 49.0);
    assert!(!body.contains(YT_KEY));
}

/// Metric names a PromQL expression uses.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = vec![];
    let mut rest = expr;
    while let Some(i) = rest.find("vidcurate_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_endpoint_serves_what_the_dashboard_queries_and_no_key() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let p = small_run(d.path());
    // With OCR: its frames and lines are counted live (the tally family).
    let mut text = std::fs::read_to_string(&p).unwrap();
    text += "\n[[stages]]\nid = \"ocr\"\ntype = \"ocr\"\n";
    write(&p, &text);
    let env = ("OPENAI_API_KEY", SECRET);
    let (body, code, port) = run_scraped(&p, &d.path().join("run"), env);
    assert!(matches!(code, Some(0 | 3)));
    let frames =
        "vidcurate_stage_tally_total{rank=\"0\",world=\"1\",stage=\"ocr\",name=\"frames\"} 12\n";
    assert!(body.contains(frames), "six clips of two frames: {body}");
    assert!(body.contains(
        "vidcurate_stage_retries_total{rank=\"0\",world=\"1\",stage=\"ocr\",wait=\"backoff\"} 0\n"
    ));
    assert!(!body.contains(SECRET));
    assert!(
        !body.contains(&d.path().display().to_string()),
        "a path: {body}"
    );
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let dash = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/vidcurate.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dash).unwrap()).unwrap();
    let mut queried = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let names = names_in(expr);
            assert!(!names.is_empty(), "{expr}");
            for n in names {
                assert!(
                    families.contains(&n.as_str()),
                    "{expr}: {n} is not exported"
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 8, "{queried} names queried");
    assert!(
        get(port, "/metrics").is_none(),
        "the endpoint outlived its run"
    );
}

#[test]
fn a_bad_metrics_address_or_a_port_in_use_stops_before_any_work() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("p.toml");
    write(&p, &pipeline("dir = \"videos\"", "{ count = 2 }", ""));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = taken.local_addr().unwrap().to_string();
    for (addr, says) in [
        ("localhost", "not an address and port"),
        ("127.0.0.1:99999", "not an address and port"),
        (in_use.as_str(), "the port is in use"),
    ] {
        let run_dir = d.path().join("run");
        let o = run_with_metrics(&p, &run_dir, &["--metrics", addr])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{addr}: {err}");
        assert!(
            err.contains(&format!("--metrics")) && err.contains(says),
            "{addr}: {err}"
        );
        assert!(!run_dir.exists(), "{addr}: work was done");
    }
}
