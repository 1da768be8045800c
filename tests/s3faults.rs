//! What S3 in production does to a run, on a real S3 server: a fault-injecting HTTP proxy on
//! 127.0.0.1 in front of moto answers `503 SlowDown` to a share of PUTs, `500 InternalError` to
//! a share of all requests, cuts GET and LIST answers in the middle of their bodies (the headers
//! promise a Content-Length the bytes never reach), and stalls one request for seconds. The
//! probe → frames → ocr pipeline on `s3://` through it must end with the tables of a local run,
//! every kind of fault must have been injected, and the credential must appear in no output.

use crate::cluster::{bucket, download, moto_endpoint};
use crate::need_ffmpeg;
use crate::util::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const TABLES: &[&str] = &["source", "probe", "frames", "ocr_regions", "rejects"];
const VOLATILE: &[&str] = &["rejected_at"];
/// Not moto's key (it takes any): one a leak would show.
const SECRET: &str = "vidcurateFaultProxySecret0123456789abcd";

/// How many faults of each kind the proxy injected, and requests it saw.
#[derive(Default)]
struct Faults {
    requests: AtomicU64,
    puts: AtomicU64,
    lists: AtomicU64,
    gets: AtomicU64,
    slow_down: AtomicU64,
    internal: AtomicU64,
    cut_list: AtomicU64,
    cut_get: AtomicU64,
    stalls: AtomicU64,
}

/// One request as read from the client: its head (with `Connection: close` added, so moto ends
/// the answer by closing) and body.
fn read_request(c: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = vec![];
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn s3_error(c: &mut TcpStream, status: &str, code: &str) {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the test proxy</Message><RequestId>0</RequestId></Error>"
    );
    let _ = write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn handle(mut c: TcpStream, upstream: &str, f: &Faults) {
    let Some((head, body)) = read_request(&mut c) else {
        return;
    };
    let n = f.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let line = head.lines().next().unwrap_or_default().to_string();
    let method = line.split(' ').next().unwrap_or_default();
    let is_list = method == "GET" && line.contains("list-type=2");
    let kind_n = match method {
        "PUT" => f.puts.fetch_add(1, Ordering::SeqCst) + 1,
        "GET" if is_list => f.lists.fetch_add(1, Ordering::SeqCst) + 1,
        "GET" => f.gets.fetch_add(1, Ordering::SeqCst) + 1,
        _ => 0,
    };
    if n == 40 {
        // A stall: the client waits, then gets its answer.
        f.stalls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(4));
    }
    if method == "PUT" && kind_n % 6 == 3 {
        f.slow_down.fetch_add(1, Ordering::SeqCst);
        return s3_error(&mut c, "503 Slow Down", "SlowDown");
    }
    if n % 11 == 5 {
        f.internal.fetch_add(1, Ordering::SeqCst);
        return s3_error(&mut c, "500 Internal Server Error", "InternalError");
    }
    let Ok(mut up) = TcpStream::connect(upstream) else {
        return;
    };
    let (first, rest) = head.split_once("\r\n").unwrap_or((&head, ""));
    let _ = write!(up, "{first}\r\nConnection: close\r\n{rest}");
    let _ = up.write_all(&body);
    let mut answer = vec![];
    let _ = up.read_to_end(&mut answer);
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(answer.len());
    let ok = answer.starts_with(b"HTTP/1.1 200");
    let cut = ok
        && answer.len() - split > 64
        && ((is_list && kind_n % 4 == 2) || (!is_list && method == "GET" && kind_n % 5 == 4));
    if cut {
        if is_list {
            f.cut_list.fetch_add(1, Ordering::SeqCst);
        } else {
            f.cut_get.fetch_add(1, Ordering::SeqCst);
        }
        // Headers with the full Content-Length, half the body, then the connection goes.
        let half = split + (answer.len() - split) / 2;
        let _ = c.write_all(&answer[..half]);
        let _ = c.flush();
        let _ = c.shutdown(Shutdown::Both);
        return;
    }
    let _ = c.write_all(&answer);
}

/// Starts the proxy in front of moto; returns its endpoint and its counters.
fn start_proxy() -> (String, Arc<Faults>) {
    let upstream = moto_endpoint().trim_start_matches("http://").to_string();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let faults = Arc::new(Faults::default());
    let f = faults.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let (f, up) = (f.clone(), upstream.clone());
            std::thread::spawn(move || handle(c, &up, &f));
        }
    });
    (endpoint, faults)
}

fn everything_under(dir: &Path, out: &mut Vec<u8>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            everything_under(&p, out);
        } else {
            out.extend(std::fs::read(&p).unwrap());
        }
    }
}

#[test]
fn a_run_through_slow_downs_500s_cut_bodies_and_a_stall_equals_a_local_run() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let p = crate::verify::demo_pipeline(d.path());
    let want = reference_run(&p, d.path(), TABLES, VOLATILE);

    let url = bucket("faulty");
    let (endpoint, faults) = start_proxy();
    let o = std::process::Command::new(bin())
        .args(["run", p.to_str().unwrap(), "--out", &url, "-q"])
        .current_dir(d.path())
        .env("RUST_LOG", "warn")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    );
    let n = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let seen = format!(
        "requests {} (puts {}, lists {}, gets {}); injected: slow_down {}, internal {}, cut lists {}, cut gets {}, stalls {}",
        n(&faults.requests),
        n(&faults.puts),
        n(&faults.lists),
        n(&faults.gets),
        n(&faults.slow_down),
        n(&faults.internal),
        n(&faults.cut_list),
        n(&faults.cut_get),
        n(&faults.stalls)
    );
    eprintln!("{seen}");
    assert_eq!(o.status.code(), Some(3), "{seen}\n{stderr}");
    for (what, count) in [
        ("503 SlowDown", &faults.slow_down),
        ("500 InternalError", &faults.internal),
        ("a cut LIST body", &faults.cut_list),
        ("a cut GET body", &faults.cut_get),
        ("a stall", &faults.stalls),
    ] {
        assert!(n(count) > 0, "no {what} was injected: {seen}");
    }
    let local = d.path().join("copy");
    download(&url, &local);
    assert_eq!(
        snapshot(&local, TABLES, VOLATILE),
        want,
        "tables as a local run's ({seen})"
    );
    let mut files = vec![];
    everything_under(&local, &mut files);
    let leaked = |hay: &[u8]| hay.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
    assert!(
        !leaked(stdout.as_bytes()) && !leaked(stderr.as_bytes()),
        "secret in output"
    );
    assert!(!leaked(&files), "secret in the run directory");
}
