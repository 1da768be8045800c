//! What S3 in production does to a run, on a real S3 server: a fault-injecting HTTP proxy on
//! 127.0.0.1 in front of moto answers `503 SlowDown` to a share of PUTs, `500 InternalError` to
//! a share of all requests, cuts GET and LIST answers in the middle of their bodies (the headers
//! promise a Content-Length the bytes never reach), and stalls one request for seconds. The
//! probe → frames → ocr pipeline on `s3://` through it must end with the tables of a local run,
//! every kind of fault must have been injected, and the credential must appear in no output.
//! A worker killed with -9 in the middle of a multipart upload leaves nothing a reader sees, and
//! `vidcurate gc` lists and aborts the upload it left (and no other run's).

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

/// Sends one request upstream as a close-delimited exchange; returns the whole answer.
fn forward(upstream: &str, head: &str, body: &[u8]) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).ok()?;
    let (first, rest) = head.split_once("\r\n").unwrap_or((head, ""));
    let _ = write!(up, "{first}\r\nConnection: close\r\n{rest}");
    let _ = up.write_all(body);
    let mut answer = vec![];
    let _ = up.read_to_end(&mut answer);
    Some(answer)
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
    let Some(answer) = forward(upstream, &head, &body) else {
        return;
    };
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

/// Starts a proxy in front of moto that gives each connection to `handler` with moto's
/// address; returns the proxy's endpoint.
fn proxy(handler: impl Fn(TcpStream, &str) + Send + Sync + 'static) -> String {
    let upstream = moto_endpoint().trim_start_matches("http://").to_string();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let (h, up) = (handler.clone(), upstream.clone());
            std::thread::spawn(move || h(c, &up));
        }
    });
    endpoint
}

/// Starts the fault-injecting proxy; returns its endpoint and its counters.
fn start_proxy() -> (String, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let f = faults.clone();
    (proxy(move |c, up| handle(c, up, &f)), faults)
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
    let through_proxy = |args: &[&str]| {
        std::process::Command::new(bin())
            .args(args)
            .current_dir(d.path())
            .env("RUST_LOG", "warn")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .output()
            .unwrap()
    };
    let o = through_proxy(&["run", p.to_str().unwrap(), "--out", &url, "-q"]);
    // OCR reads the frames as decoded, so the run itself reads few objects: `verify` reads
    // every one of them through the same faults.
    let v = through_proxy(&["verify", &url]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&v.stderr),
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
    assert_eq!(v.status.code(), Some(0), "verify: {seen}\n{stderr}");
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

/// The incomplete uploads moto holds in `bucket` (its own listing, not ours): (key, upload id,
/// initiated).
fn moto_uploads(bucket: &str) -> Vec<(String, String, String)> {
    let out = std::process::Command::new("curl")
        .args(["-sf", &format!("{}/{bucket}?uploads", moto_endpoint())])
        .output()
        .unwrap();
    assert!(out.status.success(), "listing uploads of {bucket}");
    let xml = String::from_utf8_lossy(&out.stdout).to_string();
    let tag = |u: &str, t: &str| {
        let from = u.find(&format!("<{t}>")).unwrap() + t.len() + 2;
        u[from..from + u[from..].find('<').unwrap()].to_string()
    };
    xml.split("<Upload>")
        .skip(1)
        .map(|u| (tag(u, "Key"), tag(u, "UploadId"), tag(u, "Initiated")))
        .collect()
}

#[test]
fn a_worker_killed_mid_upload_leaves_nothing_readers_see_and_gc_aborts_its_upload() {
    use crate::cluster::{s3_env, store};
    use crate::fake_http::{FakeServer, Request, Response};
    use std::process::{Command, Stdio};
    use vidcurate::store::Store;
    let d = tempfile::tempdir().unwrap();
    // 20 MiB: three parts of the store's 8 MiB multipart upload.
    let media: Vec<u8> = (0..20u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let served = media.clone();
    let server = FakeServer::start(move |r: &Request| match r.path.as_str() {
        "/media/big.mp4" => Response::bytes(200, "video/mp4", served.clone()),
        _ => Response::bytes(404, "text/plain", b"no".to_vec()),
    });
    write(
        &d.path().join("m.csv"),
        &format!("id,path\nbig,{}media/big.mp4\n", server.url()),
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        "name = \"orphans\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n\n[[stages]]\nid = \"download\"\ntype = \"download\"\n",
    );
    let url = crate::cluster::bucket("orphans");
    // Another run's upload in the same bucket: gc of this run must not touch it.
    let other = Command::new("curl")
        .args(["-sf", "-X", "POST"])
        .arg(format!(
            "{}/orphans/runs/other/keep.bin?uploads",
            moto_endpoint()
        ))
        .output()
        .unwrap();
    assert!(other.status.success(), "creating another run's upload");

    // The proxy passes everything to moto but holds the second part of a multipart upload
    // unanswered, and says so: the worker is killed while its upload is under way.
    let (held_tx, held_rx) = std::sync::mpsc::channel::<String>();
    let held_tx = std::sync::Mutex::new(held_tx);
    let endpoint = proxy(move |mut c, up| {
        let Some((head, body)) = read_request(&mut c) else {
            return;
        };
        let line = head.lines().next().unwrap_or_default().to_string();
        let query = line
            .split(' ')
            .nth(1)
            .and_then(|target| target.split_once('?'))
            .map_or("", |(_, q)| q);
        if line.starts_with("PUT ") && query.split('&').any(|kv| kv == "partNumber=2") {
            let _ = held_tx.lock().unwrap().send(line);
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        if let Some(answer) = forward(up, &head, &body) {
            let _ = c.write_all(&answer);
        }
    });
    let worker = |endpoint: &str| {
        let mut c = Command::new(bin());
        c.args(["run", p.to_str().unwrap(), "--out", &url, "-q"])
            .args(["--work-dir", d.path().join("w").to_str().unwrap()])
            .current_dir(d.path())
            .env("RUST_LOG", "warn");
        s3_env(&mut c).env("AWS_ENDPOINT_URL", endpoint);
        c
    };
    let mut child = worker(&endpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = held_rx.recv_timeout(Duration::from_secs(180));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let held = held.expect("the worker never uploaded a second part");
    assert!(held.contains("uploadId="), "{held}");

    let hash = blake3::hash(&media).to_hex().to_string();
    let key = format!("media/objects/{}/{hash}.mp4", &hash[..2]);
    let s3 = store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listed = rt.block_on(s3.list("")).unwrap();
    assert!(
        !listed
            .iter()
            .any(|p| p.starts_with("media/objects/") || p.starts_with("download/")),
        "a reader sees what the killed worker was uploading: {listed:?}"
    );
    let ours = |ups: &[(String, String, String)]| {
        ups.iter()
            .filter(|(k, _, _)| k.starts_with("runs/demo/"))
            .cloned()
            .collect::<Vec<_>>()
    };
    let orphans = ours(&moto_uploads("orphans"));
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].0, format!("runs/demo/{key}"));

    let gc = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.arg("gc").arg(&url).args(args);
        let o = s3_env(&mut c).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    // moto 5 dates every upload 2010-11-10T20:48:33Z (a constant in its templates), so the age
    // that keeps it is counted from there: an upload younger than --older-than is kept, since a
    // live worker may be uploading it right now.
    let initiated = chrono::DateTime::parse_from_rfc3339(&orphans[0].2).unwrap();
    let days = (chrono::Utc::now() - initiated.with_timezone(&chrono::Utc)).num_days() + 1;
    let young = gc(&["--dry-run", "--older-than", &format!("{days}d")]);
    assert!(
        young.contains(&format!(
            "would abort 0 incomplete uploads; kept 1 younger than {}s",
            days * 86400
        )),
        "{young}"
    );
    let dry = gc(&["--older-than", "0", "--dry-run"]);
    let line = format!(
        "would abort incomplete upload of {key} (begun {}, upload id {})",
        initiated
            .with_timezone(&chrono::Utc)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        orphans[0].1
    );
    assert!(dry.contains(&line), "{dry}");
    assert!(
        dry.contains("would abort 1 incomplete uploads; kept 0"),
        "{dry}"
    );
    assert!(
        !dry.contains("keep.bin"),
        "another run's upload listed: {dry}"
    );
    assert_eq!(ours(&moto_uploads("orphans")).len(), 1, "a dry run aborted");

    let done = gc(&["--older-than", "0"]);
    assert!(
        done.contains(&format!("aborted incomplete upload of {key} (begun ")),
        "{done}"
    );
    assert!(
        done.contains("aborted 1 incomplete uploads; kept 0"),
        "{done}"
    );
    let left = moto_uploads("orphans");
    assert_eq!(ours(&left), vec![], "the upload is still there");
    assert!(
        left.iter().any(|(k, _, _)| k == "runs/other/keep.bin"),
        "another run's upload was aborted: {left:?}"
    );
    assert!(gc(&["--older-than", "0", "--dry-run"]).contains("would abort 0 incomplete uploads"));

    // The rerun, with nothing in its way, stores the media whole.
    let o = worker(&moto_endpoint()).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(rt.block_on(s3.get(&key)).unwrap(), media);
    assert_eq!(ours(&moto_uploads("orphans")), vec![]);
}
