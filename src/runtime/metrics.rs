//! The metrics endpoint (`run --metrics ADDR`): what the run is doing, in Prometheus' text
//! format, for a Prometheus that scrapes each rank of a long run.
//!
//! Reads the live stage watches of the current pass (funnel per stage, videos computing, records
//! queued in front of each stage) and the response cache's totals per service (answers stored,
//! cache hits and misses, tokens). Writes nothing. Every series carries the rank (`rank`,
//! `world`), so the ranks of an array job are told apart. Only counts and the names of stages
//! and services are shown: no setting, path or key.

use super::cpu::CpuPool;
use super::watch::StageWatch;
use crate::config::ServiceConfig;
use crate::error::RunError;
use crate::store::cache::{CacheHandle, by_service};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one pass shows, as the runner hands it over at the pass's start: its stages in chain
/// order, the channels' capacity, the cache, and the services' prices.
pub(crate) struct PassView {
    pub watches: Vec<Arc<StageWatch>>,
    pub capacity: usize,
    pub cache: CacheHandle,
    pub cpu: CpuPool,
    /// The pipeline's [services.*] tables.
    pub services: BTreeMap<String, ServiceConfig>,
}

/// The run's metrics, shared by the runner (which registers each pass) and the endpoint.
pub struct Hub {
    labels: String,
    pass: Mutex<Option<PassView>>,
    passes: AtomicU64,
    ended: AtomicBool,
    /// Scrapes answered since the run ended (the endpoint stays up for one, `--metrics-hold`).
    scrapes_after_end: AtomicU64,
}

/// Metric families, in the order written: name, type, help. The dashboard in deploy/ and its
/// test name only these.
pub const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "vidcurate_stage_videos_total",
        "counter",
        "Videos per stage and outcome in this invocation's pass (the run summary's funnel: received, computed, reused, rejected, rejected_before, filtered, forwarded, deferred).",
    ),
    (
        "vidcurate_stage_computing",
        "gauge",
        "Videos a stage is computing now.",
    ),
    (
        "vidcurate_stage_queued",
        "gauge",
        "Records waiting in the channel in front of a stage.",
    ),
    (
        "vidcurate_stage_retries_total",
        "counter",
        "Computations tried again after an external failure, by whose wait came first: the service's (Retry-After) or the runtime's backoff.",
    ),
    (
        "vidcurate_stage_retry_wait_seconds_total",
        "counter",
        "Seconds waited before those retries.",
    ),
    (
        "vidcurate_stage_tally_total",
        "counter",
        "A stage's own counters: the OCR stage's frames and lines (and how many were reused), the transcript stage's uploads, and so on.",
    ),
    (
        "vidcurate_queue_capacity",
        "gauge",
        "Capacity of each channel between stages.",
    ),
    (
        "vidcurate_cpu_pool_threads",
        "gauge",
        "Threads of the CPU pool (decoding, OCR, colour).",
    ),
    (
        "vidcurate_cpu_pool_jobs",
        "gauge",
        "CPU-pool jobs per stage, running or queued.",
    ),
    (
        "vidcurate_service_answers_total",
        "counter",
        "Answers of a model or API service in the run's response cache (every call paid for, since the cache began).",
    ),
    (
        "vidcurate_service_lookups_total",
        "counter",
        "Lookups of the response cache per service: hit (no call) or miss (a call).",
    ),
    (
        "vidcurate_service_tokens_total",
        "counter",
        "Tokens of the answers in the response cache per service, input or output.",
    ),
    (
        "vidcurate_service_usd_total",
        "counter",
        "What the answers in the response cache cost at the pipeline's prices (usd_per_mtok_*; batch answers at the batch rate).",
    ),
    (
        "vidcurate_service_calls_in_flight",
        "gauge",
        "Requests to a paid service sent and not yet answered.",
    ),
    (
        "vidcurate_service_requests_total",
        "counter",
        "Requests to a paid service by the HTTP status of the answer (none: no answer came); every attempt, retries included.",
    ),
    (
        "vidcurate_youtube_quota_left",
        "gauge",
        "What is left today (Pacific day) of a YouTube API key's quota bucket (units, or search.list calls), as this process last booked it; key is the key's non-secret id.",
    ),
    (
        "vidcurate_passes",
        "gauge",
        "Passes over the videos so far (more than one when batches answered deferred requests).",
    ),
    (
        "vidcurate_run_ended",
        "gauge",
        "1 once the run has ended (the endpoint then waits for a last scrape).",
    ),
];

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("labels", &self.labels).finish()
    }
}

impl Hub {
    pub fn new(rank: u32, world: u32) -> Arc<Self> {
        Arc::new(Self {
            labels: format!("rank=\"{rank}\",world=\"{world}\""),
            pass: Mutex::new(None),
            passes: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            scrapes_after_end: AtomicU64::new(0),
        })
    }

    /// A new pass's stages (the previous pass's counts are replaced: the summary is the last's).
    pub(crate) fn pass_started(&self, v: PassView) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        *self.pass.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
    }

    pub fn run_ended(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    /// The exposition text, in Prometheus' text format 0.0.4.
    pub fn render(&self) -> String {
        let mut lines: Vec<(&str, String)> = vec![];
        let mut put = |family: &'static str, extra: &str, value: f64| {
            let sep = if extra.is_empty() { "" } else { "," };
            let line = format!("{family}{{{}{sep}{extra}}} {value}", self.labels);
            lines.push((family, line));
        };
        if let Some(p) = &*self.pass.lock().unwrap_or_else(|e| e.into_inner()) {
            stage_lines(p, &mut put);
            service_lines(p, &mut put);
        }
        quota_lines(&mut put);
        call_lines(&mut put);
        put(
            "vidcurate_passes",
            "",
            self.passes.load(Ordering::Relaxed) as f64,
        );
        let ended = self.ended.load(Ordering::Relaxed);
        put("vidcurate_run_ended", "", f64::from(u8::from(ended)));
        let mut out = String::new();
        for (name, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (_, l) in lines.iter().filter(|(f, _)| f == name) {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// After the run: waits until a scrape has read the final counts, at most `hold`.
    pub async fn hold(&self, hold: Duration) {
        let until = tokio::time::Instant::now() + hold;
        while self.scrapes_after_end.load(Ordering::Relaxed) == 0
            && tokio::time::Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What is left of each YouTube quota bucket today, per key (by its non-secret id), as the
/// client last booked it. Process-wide: the client that books it knows no run.
static QUOTA_LEFT: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());

/// The YouTube client's report after booking a call (or finding a bucket spent).
pub fn quota_left(key_id: &str, bucket: &str, left: u64) {
    let mut q = QUOTA_LEFT.lock().unwrap_or_else(|e| e.into_inner());
    q.insert((key_id.to_string(), bucket.to_string()), left);
}

fn quota_lines(put: &mut Put) {
    let q = QUOTA_LEFT.lock().unwrap_or_else(|e| e.into_inner());
    for ((key, bucket), left) in q.iter() {
        let l = format!("key=\"{}\",bucket=\"{}\"", escape(key), escape(bucket));
        put("vidcurate_youtube_quota_left", &l, *left as f64);
    }
}

/// Calls of each paid service (by its [services.*] name) this process has going and has had
/// answered, by HTTP status ("none": no answer came). Process-wide, as the quota.
#[derive(Default)]
struct Calls {
    in_flight: u64,
    answered: BTreeMap<String, u64>,
}

static CALLS: Mutex<BTreeMap<String, Calls>> = Mutex::new(BTreeMap::new());

fn calls<T>(service: &str, f: impl FnOnce(&mut Calls) -> T) -> T {
    let mut m = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    f(m.entry(service.to_string()).or_default())
}

/// One call of `service` on its way: counted in flight until dropped.
pub struct InFlight(String);

impl Drop for InFlight {
    fn drop(&mut self) {
        calls(&self.0, |c| c.in_flight = c.in_flight.saturating_sub(1));
    }
}

/// A client sends a request to `service`; `answered` when its answer (or none) is in.
pub fn call_started(service: &str) -> InFlight {
    calls(service, |c| c.in_flight += 1);
    InFlight(service.to_string())
}

pub fn call_answered(service: &str, status: Option<u16>) {
    let status = status.map_or_else(|| "none".to_string(), |s| s.to_string());
    calls(service, |c| *c.answered.entry(status).or_default() += 1);
}

fn call_lines(put: &mut Put) {
    let m = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    for (service, c) in m.iter() {
        let l = format!("service=\"{}\"", escape(service));
        put("vidcurate_service_calls_in_flight", &l, c.in_flight as f64);
        for (status, n) in &c.answered {
            let l = format!("{l},status=\"{status}\"");
            put("vidcurate_service_requests_total", &l, *n as f64);
        }
    }
}

/// A metric line: family, the labels after the rank's, value.
type Put<'a> = dyn FnMut(&'static str, &str, f64) + 'a;

fn stage_lines(p: &PassView, put: &mut Put) {
    for (i, w) in p.watches.iter().enumerate() {
        let s = w.sample(i.checked_sub(1).map(|u| &*p.watches[u]));
        let stage = format!("stage=\"{}\"", escape(&w.name));
        let f = &s.funnel;
        for (outcome, n) in [
            ("received", f.received),
            ("computed", f.computed),
            ("reused", f.reused),
            ("rejected", f.rejected),
            ("rejected_before", f.rejected_before),
            ("filtered", f.filtered),
            ("forwarded", f.forwarded),
            ("deferred", f.deferred),
        ] {
            let l = format!("{stage},outcome=\"{outcome}\"");
            put("vidcurate_stage_videos_total", &l, n as f64);
        }
        put("vidcurate_stage_computing", &stage, s.computing as f64);
        if i > 0 {
            put("vidcurate_stage_queued", &stage, s.queued as f64);
        }
        for (i, wait) in ["service", "backoff"].iter().enumerate() {
            let l = format!("{stage},wait=\"{wait}\"");
            put("vidcurate_stage_retries_total", &l, s.retries[i] as f64);
            let secs = s.retry_wait_ms[i] as f64 / 1000.0;
            put("vidcurate_stage_retry_wait_seconds_total", &l, secs);
        }
        for (name, n) in &s.tally {
            let l = format!("{stage},name=\"{}\"", escape(name));
            put("vidcurate_stage_tally_total", &l, *n as f64);
        }
    }
    put("vidcurate_queue_capacity", "", p.capacity as f64);
    let snap = p.cpu.snapshot();
    put("vidcurate_cpu_pool_threads", "", snap.threads as f64);
    for (name, queued, running, _) in &snap.stages {
        let stage = format!("stage=\"{}\"", escape(name));
        let jobs = "vidcurate_cpu_pool_jobs";
        put(jobs, &format!("{stage},state=\"running\""), *running as f64);
        put(jobs, &format!("{stage},state=\"queued\""), *queued as f64);
    }
}

/// The cache's totals per service (none when the run has called nothing yet).
fn service_lines(p: &PassView, put: &mut Put) {
    let Some(rows) = p.cache.get().ok().and_then(|c| c.stats().ok()) else {
        return;
    };
    for s in by_service(&rows) {
        let price = p
            .services
            .get(&s.service)
            .map(|c| c.prices())
            .unwrap_or_default();
        let service = format!("service=\"{}\"", escape(&s.service));
        let n = |v: i64| v.max(0) as f64;
        put("vidcurate_service_answers_total", &service, n(s.entries));
        let lookups = "vidcurate_service_lookups_total";
        put(lookups, &format!("{service},result=\"hit\""), n(s.hits));
        put(lookups, &format!("{service},result=\"miss\""), n(s.misses));
        for (kind, v) in [("input", s.input_tokens), ("output", s.output_tokens)] {
            let l = format!("{service},kind=\"{kind}\"");
            put("vidcurate_service_tokens_total", &l, n(v));
        }
        put("vidcurate_service_usd_total", &service, s.usd(&price).0);
    }
}

/// A label value as the text format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Binds the endpoint's address, before any work: a bad address or a port in use is an error
/// naming the option.
pub fn bind(addr: &str) -> Result<std::net::TcpListener, RunError> {
    let parsed: std::net::SocketAddr = addr.parse().map_err(|_| {
        RunError::Config(format!(
            "--metrics {addr:?}: not an address and port (e.g. 127.0.0.1:9464 or 0.0.0.0:9464)"
        ))
    })?;
    let l = std::net::TcpListener::bind(parsed).map_err(|e| {
        RunError::Config(match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "--metrics {addr}: the port is in use (another run or exporter): pick another"
            ),
            _ => format!("--metrics {addr}: {e}"),
        })
    })?;
    l.set_nonblocking(true)
        .map_err(|e| RunError::Config(format!("--metrics {addr}: {e}")))?;
    Ok(l)
}

/// Serves `GET /metrics` on `listener` until the process ends (inside a tokio runtime).
pub fn serve(listener: std::net::TcpListener, hub: Arc<Hub>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            let hub = hub.clone();
            tokio::spawn(async move {
                let _ = answer(conn, &hub).await;
            });
        }
    });
    Ok(())
}

/// One HTTP/1.1 exchange: the request head, then the metrics (or 404), then close.
async fn answer(mut conn: tokio::net::TcpStream, hub: &Hub) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let ended = hub.ended.load(Ordering::Relaxed);
    let (status, kind, body) = match path.split('?').next() {
        Some("/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            hub.render(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "vidcurate serves /metrics only\n".to_string(),
        ),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(reply.as_bytes()).await?;
    conn.shutdown().await?;
    if ended && status.starts_with("200") {
        hub.scrapes_after_end.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type_and_labels_are_escaped() {
        let hub = Hub::new(1, 4);
        let text = hub.render();
        for (name, kind, _) in FAMILIES {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        }
        assert!(text.contains("vidcurate_run_ended{rank=\"1\",world=\"4\"} 0\n"));
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_bad_address_or_a_port_in_use_names_the_option() {
        let e = bind("localhost").unwrap_err().to_string();
        assert!(
            e.starts_with("--metrics \"localhost\": not an address"),
            "{e}"
        );
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = bind(&addr).unwrap_err().to_string();
        assert!(e.contains("in use"), "{e}");
    }
}
