//! Many workers, one run directory on a real S3 server (moto, started here on 127.0.0.1, installed
//! by scripts/setup.sh): ranks 0–3 give the tables a single local process gives; a rank killed
//! with -9 and rerun, and one rank started twice at once, end with no lost and no duplicate row;
//! a worker with another world size is refused; refused credentials stop the run with exit 2.

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vidcurate::store::Store;
use vidcurate::store::objects::ObjectStoreRun;

const TABLES: &[&str] = &["source", "probe", "frames", "rejects"];
const VOLATILE: &[&str] = &["rejected_at"];
const CLIPS: usize = 40;

/// A moto S3 server on 127.0.0.1, one per kind for this test binary. A small shell watchdog
/// stops it when the test binary exits (statics are never dropped).
pub(crate) struct Moto {
    endpoint: String,
    /// The watchdog shell (reaped by the OS when the test binary exits).
    _watchdog: Child,
}

fn start_moto(auth: bool) -> Moto {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/venv-tools/bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: run ./scripts/setup.sh (it installs moto[server] for these tests)",
        bin.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!(
        "\"$0\" -H 127.0.0.1 -p {port} & m=$!; while kill -0 {} 2>/dev/null; do sleep 1; done; kill $m",
        std::process::id()
    );
    let mut c = Command::new("sh");
    c.args(["-c", &script, bin.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if auth {
        // Every request is checked against moto's (empty) IAM: any key is refused.
        c.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
    }
    let watchdog = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Moto {
        endpoint: format!("http://127.0.0.1:{port}"),
        _watchdog: watchdog,
    }
}

pub(crate) fn moto() -> &'static Moto {
    static M: OnceLock<Moto> = OnceLock::new();
    M.get_or_init(|| start_moto(false))
}

/// The moto server's endpoint (for a proxy put in front of it).
pub(crate) fn moto_endpoint() -> String {
    moto().endpoint.clone()
}

/// Creates a bucket (moto accepts the unsigned call).
pub(crate) fn bucket(name: &str) -> String {
    let m = moto();
    let out = Command::new("curl")
        .args(["-sf", "-X", "PUT", &format!("{}/{name}", m.endpoint)])
        .output()
        .unwrap();
    assert!(out.status.success(), "creating bucket {name}");
    format!("s3://{name}/runs/demo")
}

/// Until rank 1 of the run at `url` has committed a frames shard (at most `secs`), with the
/// process that runs it still going: the moment to kill it.
pub(crate) fn wait_for_first_frames(url: &str, rank1: &mut std::process::Child, secs: u64) {
    let s3 = store(url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let listed = rt.block_on(s3.list("frames")).unwrap();
        if listed.iter().any(|f| f.starts_with("frames/r0001-part-")) {
            return;
        }
        assert!(Instant::now() < deadline, "rank 1 wrote no frames shard");
        assert!(
            rank1.try_wait().unwrap().is_none(),
            "rank 1 ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn s3_env(c: &mut Command) -> &mut Command {
    c.env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &moto().endpoint)
        .env("AWS_ALLOW_HTTP", "true")
}

pub(crate) fn store(url: &str) -> ObjectStoreRun {
    ObjectStoreRun::open_with(
        url,
        &[
            ("aws_access_key_id", "testing"),
            ("aws_secret_access_key", "testing"),
            ("aws_region", "us-east-1"),
            ("aws_endpoint", &moto().endpoint),
            ("aws_allow_http", "true"),
        ],
    )
    .unwrap()
}

/// Copies a run directory out of the store, to read it with the same helpers as a local one.
pub(crate) fn download(url: &str, to: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = store(url);
    rt.block_on(async {
        for p in s.list("").await.unwrap() {
            let dest = to.join(&p);
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::write(dest, s.get(&p).await.unwrap()).unwrap();
        }
    });
}

pub(crate) fn corpus(dir: &Path) -> PathBuf {
    let v = dir.join("v");
    std::fs::create_dir_all(&v).unwrap();
    let mut csv = String::from("path,id,label\n");
    for i in 0..CLIPS {
        plain_clip(
            &v.join(format!("c{i}.mp4")),
            1.0 + (i % 4) as f64 * 0.25,
            "160x90",
        );
        csv += &format!("v/c{i}.mp4,clip{i:03},{}\n", ["fake", "real"][i % 2]);
    }
    for i in 0..3 {
        std::fs::write(
            v.join(format!("broken{i}.mp4")),
            b"\x00\x00\x00\x18ftypmp42 junk",
        )
        .unwrap();
        csv += &format!("v/broken{i}.mp4,broken{i},fake\n");
    }
    write(&dir.join("m.csv"), &csv);
    let p = dir.join("p.toml");
    // Small shards, often: many commits, so twins race on slots.
    write(
        &p,
        &pipeline(
            "manifest = \"m.csv\"",
            "{ count = 3 }",
            "[output]\nflush_secs = 0\nmax_rows_per_shard = 4\n[runtime]\nchannel_capacity = 1\n",
        ),
    );
    p
}

fn worker(p: &Path, url: &str, rank: u32, world: u32, work: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args(["run", p.to_str().unwrap(), "--out", url, "-q"])
        .args(["--rank", &rank.to_string(), "--world", &world.to_string()])
        .args(["--work-dir", work.to_str().unwrap()])
        .current_dir(p.parent().unwrap())
        .env("RUST_LOG", "warn");
    s3_env(&mut c);
    c
}

fn finish(c: Child) -> std::process::Output {
    let o = c.wait_with_output().unwrap();
    // 3: some videos rejected (the broken files), as in a single run.
    assert!(
        matches!(o.status.code(), Some(0) | Some(3)),
        "worker: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

pub(crate) fn snapshot(run: &Path) -> Vec<Vec<String>> {
    crate::util::snapshot(run, TABLES, VOLATILE)
}

fn no_duplicates(run: &Path) {
    for t in ["source", "probe"] {
        let ids = column(&run.join(t), "video_id");
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(ids.len(), unique.len(), "{t}: duplicate rows");
    }
}

#[test]
fn four_ranks_on_s3_equal_one_local_process_even_with_kills_and_twins() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let p = corpus(d.path());
    let reference = d.path().join("ref");
    let o = run_into(&p, &reference, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = snapshot(&reference);
    assert_eq!(want[1].len(), CLIPS, "probe rows");

    let url = bucket("cluster");
    let work = |name: &str| d.path().join("work").join(name);
    // Rank 1 is killed as soon as its first frames shard is committed, then rerun; rank 2 runs
    // twice at once; ranks 0 and 3 run plainly.
    let s3 = store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut killed = worker(&p, &url, 1, 4, &work("1a")).spawn().unwrap();
    wait_for_first_frames(&url, &mut killed, 120);
    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    // status names the killed rank (its last run never ended) and those never started.
    let o = s3_env(Command::new(bin()).args(["status", &url]))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(5),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("ranks to run again: 0,1,2,3"), "{out}");
    assert!(out.contains("running"), "{out}");
    let others = vec![
        worker(&p, &url, 0, 4, &work("0"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        worker(&p, &url, 2, 4, &work("2a"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        worker(&p, &url, 2, 4, &work("2b"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        worker(&p, &url, 3, 4, &work("3"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        worker(&p, &url, 1, 4, &work("1b"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ];
    for c in others {
        finish(c);
    }

    let got_dir = d.path().join("from-s3");
    download(&url, &got_dir);
    no_duplicates(&got_dir);
    let got = snapshot(&got_dir);
    for (i, t) in TABLES.iter().chain(&["jpegs"]).enumerate() {
        assert_eq!(
            got[i], want[i],
            "table {t} differs from the single local run"
        );
    }
    // Each rank wrote its own slots and its own manifest; the pin names the world.
    let pin: serde_json::Value =
        serde_json::from_slice(&std::fs::read(got_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(pin["world"], 4);
    for r in 0..4 {
        assert!(
            got_dir
                .join(format!("ranks/r{r:04}/manifest.json"))
                .exists()
        );
    }

    let o = s3_env(Command::new(bin()).args(["status", &url]))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("every rank is complete"), "{out}");
    // rethreshold reads the run in the store and writes its selection there.
    let o = s3_env(Command::new(bin()).args(["rethreshold", &url]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        rt.block_on(s3.exists("selections/pipeline.parquet"))
            .unwrap()
    );

    // A worker with another world is refused before doing anything, naming both values.
    let o = worker(&p, &url, 0, 3, &work("x")).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("run.json has 4, this worker 3"), "{err}");
}

#[test]
fn refused_credentials_stop_the_run_with_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("p.toml");
    std::fs::create_dir_all(d.path().join("v")).unwrap();
    write(&p, &pipeline("dir = \"v\"", "{ count = 1 }", ""));
    let locked = start_moto(true);
    let mut c = worker(&p, "s3://locked/run", 0, 1, &d.path().join("w"));
    // A key id shaped like a real one, so the scrub of AWS-style ids is exercised too.
    let key_id = "AKIAVIDCURATE0TEST42";
    c.env("AWS_ENDPOINT_URL", &locked.endpoint)
        .env("AWS_ACCESS_KEY_ID", key_id)
        .env("AWS_SECRET_ACCESS_KEY", "s3cr3t-vidcurate-test");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("refused our credentials"), "{err}");
    // moto echoes the key id in its error body; neither credential may reach our output.
    assert!(!err.contains(key_id), "{err}");
    assert!(!err.contains("s3cr3t-vidcurate-test"), "{err}");
}

/// A relevance pipeline over titles (no media) on a fake OpenAI endpoint; `again` adds a second
/// stage asking exactly the same questions.
fn judged_pipeline(dir: &Path, url: &str, again: bool) -> PathBuf {
    let mut m = String::from("id,path,title,description\n");
    for i in 0..12 {
        m += &format!("v{i:02},https://example.invalid/v{i:02}.mp4,clip {i},a clip\n");
    }
    write(&dir.join("m.csv"), &m);
    let stage = "compute = { service = \"openai\", model = \"gpt-4o\", event = \"a flood\" }";
    let mut text = format!(
        "name = \"judged\"\n[services.openai]\nbase_url = \"{url}v1/\"\napi_key_env = \"VIDCURATE_TEST_OPENAI_KEY\"\nrequests_per_minute = 60000\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n[output]\nflush_secs = 0\nmax_rows_per_shard = 2\n[[stages]]\nid = \"relevance\"\ntype = \"relevance\"\n{stage}\n"
    );
    if again {
        text += &format!("[[stages]]\nid = \"relevance_again\"\ntype = \"relevance\"\n{stage}\n");
    }
    let p = dir.join(if again { "p2.toml" } else { "p1.toml" });
    write(&p, &text);
    p
}

/// Paid calls are shared through the store: two ranks judge 12 titles once; three new workers
/// (another world, fresh work folders) add a stage asking the same questions and pay for none.
#[test]
fn paid_answers_are_shared_across_workers_and_world_sizes() {
    let d = tempfile::tempdir().unwrap();
    let mut chat: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("llm/openai/chat_completion_text.json")).unwrap(),
    )
    .unwrap();
    chat["choices"][0]["message"]["content"] = serde_json::json!("9");
    let server = crate::fake_http::FakeServer::start(move |_| {
        crate::fake_http::Response::json(200, chat.to_string())
    });
    let url = bucket("shared-cache");
    let spawn = |p: &Path, rank: u32, world: u32, work: &str, repin: bool| {
        let mut c = worker(p, &url, rank, world, &d.path().join("work").join(work));
        if repin {
            c.arg("--repin");
        }
        c.env("VIDCURATE_TEST_OPENAI_KEY", "sk-test-shared")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let p1 = judged_pipeline(d.path(), &server.url(), false);
    let first: Vec<Child> = (0..2)
        .map(|r| spawn(&p1, r, 2, &format!("a{r}"), false))
        .collect();
    for c in first {
        finish(c);
    }
    assert_eq!(server.count("/chat/completions"), 12);

    let p2 = judged_pipeline(d.path(), &server.url(), true);
    let second: Vec<Child> = (0..3)
        .map(|r| spawn(&p2, r, 3, &format!("b{r}"), true))
        .collect();
    for c in second {
        finish(c);
    }
    assert_eq!(
        server.count("/chat/completions"),
        12,
        "a worker paid again for an answer another worker had published"
    );
    let got = d.path().join("from-s3");
    download(&url, &got);
    assert_eq!(column(&got.join("relevance_again"), "score"), vec!["9"; 12]);
    // cache stats of the run in the store: the published answers, once each.
    let o = s3_env(Command::new(bin()).args(["cache", "stats", &url]))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = out
        .lines()
        .find(|l| l.starts_with("openai"))
        .unwrap_or_default();
    assert_eq!(line.split_whitespace().nth(2), Some("12"), "{out}");
}

/// Files under `dir/media`, recursively (hidden temp files too).
fn media_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = vec![];
    walk(&dir.join("media"), &mut out);
    out
}

/// Downloaded media go to the store; later stages (here, of a second worker on another machine,
/// i.e. another work dir) fetch them back; and no worker leaves its local copies behind once its
/// invocation completes.
#[test]
fn media_live_in_the_store_and_work_dirs_are_left_clean() {
    use crate::fake_http::{FakeServer, Request, Response};
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let clip = d.path().join("clip.mp4");
    plain_clip(&clip, 1.5, "160x90");
    let bytes = std::fs::read(&clip).unwrap();
    let served = bytes.clone();
    let server = FakeServer::start(move |r: &Request| match r.path.as_str() {
        "/media/a.mp4" | "/media/b.mp4" => Response::bytes(200, "video/mp4", served.clone()),
        _ => Response::bytes(404, "text/plain", b"no".to_vec()),
    });
    let mut csv = String::from("id,path\n");
    for n in ["a", "b"] {
        csv += &format!("{n},{}media/{n}.mp4\n", server.url());
    }
    write(&d.path().join("m.csv"), &csv);
    let p = d.path().join("p.toml");
    let text = |count: u32| {
        format!(
            "name = \"dl\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n\n[[stages]]\nid = \"download\"\ntype = \"download\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = {{ count = {count} }}\n"
        )
    };
    write(&p, &text(2));
    let url = bucket("media");
    let first = d.path().join("w1");
    let o = worker(&p, &url, 0, 1, &first).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The same bytes from two URLs are stored once, under their hash.
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let rel = format!("media/objects/{}/{hash}.mp4", &hash[..2]);
    let s3 = store(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(s3.get(&rel)).unwrap(), bytes);
    assert_eq!(media_files(&first), Vec::<PathBuf>::new());

    // New frame settings on a fresh work dir: frames are redone from media fetched from the store.
    write(&p, &text(3));
    let second = d.path().join("w2");
    let o = worker(&p, &url, 0, 1, &second)
        .arg("--repin")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let frames: Vec<String> = rt
        .block_on(s3.list("media/frames"))
        .unwrap()
        .into_iter()
        .filter(|f| f.ends_with(".jpg"))
        .collect();
    // 2 frames for each video at the old settings, 3 at the new.
    assert_eq!(frames.len(), 2 * 2 + 2 * 3, "{frames:?}");
    assert_eq!(media_files(&second), Vec::<PathBuf>::new());
    assert_eq!(
        server.requests().len(),
        2,
        "the second worker downloaded again"
    );
}

/// Every file under `dir`, relative, with its bytes (a release folder, to compare two).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn split_and_release_read_a_run_on_s3_as_they_read_a_local_copy() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let p = corpus(dir.path());
    let url = bucket("release-run");
    finish(
        worker(&p, &url, 0, 1, &dir.path().join("work"))
            .spawn()
            .unwrap(),
    );
    let cli = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args).current_dir(dir.path()).env("RUST_LOG", "warn");
        s3_env(&mut c);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    cli(&[
        "split",
        &url,
        "--stratify",
        "label",
        "--ratios",
        "50/50",
        "--names",
        "train,test",
    ]);
    let from_s3 = dir.path().join("release-s3");
    cli(&[
        "release",
        &url,
        "--out",
        from_s3.to_str().unwrap(),
        "--frames",
        "paths",
    ]);
    // The same commands on a local copy of the run (made before the split, so it splits anew).
    let local = dir.path().join("copy");
    download(&url, &local);
    std::fs::remove_dir_all(local.join("splits")).unwrap();
    cli(&[
        "split",
        local.to_str().unwrap(),
        "--stratify",
        "label",
        "--ratios",
        "50/50",
        "--names",
        "train,test",
    ]);
    let from_local = dir.path().join("release-local");
    cli(&[
        "release",
        local.to_str().unwrap(),
        "--out",
        from_local.to_str().unwrap(),
        "--frames",
        "paths",
    ]);
    let (a, b) = (tree(&from_s3), tree(&from_local));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let frames = a.keys().filter(|k| k.ends_with(".jpg")).count();
    assert_eq!(
        frames,
        CLIPS * 3,
        "3 frames of each clip: {:?}",
        a.keys().collect::<Vec<_>>()
    );
    // croissant.json holds the card's checksum, which differs with it; the rest of it must not.
    let without_card = |bytes: &[u8]| {
        let mut c: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        c["distribution"]
            .as_array_mut()
            .unwrap()
            .retain(|f| f["contentUrl"] != "README.md");
        c
    };
    for (k, v) in &a {
        // The card names where the run was read from; everything else is byte for byte.
        if k == "croissant.json" {
            assert_eq!(
                without_card(v),
                without_card(&b[k]),
                "croissant.json differs"
            );
        } else if k != "README.md" {
            assert!(
                v == &b[k],
                "{k} differs between the S3 and the local release"
            );
        }
    }
    // Annotation tasks of the split's videos, from either.
    let tasks = |run: &str, out: &Path| {
        cli(&[
            "annotate",
            "export",
            run,
            "--out",
            out.to_str().unwrap(),
            "--media-url",
            "http://127.0.0.1:9/media",
            "--split",
            "default",
        ]);
        std::fs::read_to_string(out.join("tasks.json")).unwrap()
    };
    let (t1, t2) = (
        tasks(&url, &dir.path().join("ann-s3")),
        tasks(local.to_str().unwrap(), &dir.path().join("ann-local")),
    );
    let n = serde_json::from_str::<serde_json::Value>(&t1)
        .unwrap()
        .as_array()
        .unwrap()
        .len();
    assert!(n > 0);
    assert_eq!(t1, t2);
}
