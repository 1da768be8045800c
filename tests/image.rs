//! The container image, built from this clone by scripts/image.sh (the Containerfile) with the
//! podman scripts/setup.sh installs, and run as users run it: the README's demo in one `podman
//! run` gives the tables the native binary gives over the same inputs; three containers started
//! as a Kubernetes Indexed Job starts them (JOB_COMPLETION_INDEX, --world 3), one killed and
//! started again, write one run on S3 that equals a single local process; the image runs as a
//! non-root user, names the commit it was built from, and holds no key and no path of the
//! machine that built it. `VIDCURATE_TESTS_WITHOUT_CONTAINERS=1` skips these tests (with a note).

use crate::cluster::{bucket, corpus, download, moto_endpoint, wait_for_first_frames};
use crate::need_ffmpeg;
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const DEMO_TABLES: &[&str] = &[
    "source",
    "relevance",
    "probe",
    "frames",
    "ocr_regions",
    "ocr_videos",
    "shots",
    "prescreen",
    "rejects",
];
/// Times and paths: what may differ between two machines' runs of the same inputs (the source's
/// `path` is the clip's absolute path on each).
const VOLATILE: &[&str] = &["rejected_at", "latency_ms", "cost_usd", "path"];

struct Image {
    engine: String,
    /// The --ulimit flags this machine needs (scripts/image.sh --run-flags).
    flags: Vec<String>,
    /// A key that was in the build's environment, which no layer may hold.
    secret: String,
}

impl Image {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.engine);
        c.arg("run").arg("--rm").args(&self.flags);
        c
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn skip() -> bool {
    let off = std::env::var_os("VIDCURATE_TESTS_WITHOUT_CONTAINERS").is_some_and(|v| v == "1");
    if off {
        eprintln!("skipped: VIDCURATE_TESTS_WITHOUT_CONTAINERS=1");
    }
    off
}

fn shown(o: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds the image once for this test binary, as a user would: `scripts/image.sh`, with keys
/// in the environment (the build must not take them in).
fn image() -> &'static Image {
    static I: OnceLock<Image> = OnceLock::new();
    I.get_or_init(|| {
        let engine = std::env::var("VIDCURATE_ENGINE").unwrap_or_else(|_| "podman".into());
        let secret = format!("sk-image-test-{}", u64::from(std::process::id()) * 7919);
        let o = Command::new(repo().join("scripts/image.sh"))
            .env("VIDCURATE_ENGINE", &engine)
            .env("OPENAI_API_KEY", &secret)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "scripts/image.sh: {}", shown(&o));
        let f = Command::new(repo().join("scripts/image.sh"))
            .arg("--run-flags")
            .env("VIDCURATE_ENGINE", &engine)
            .output()
            .unwrap();
        assert!(f.status.success(), "image.sh --run-flags: {}", shown(&f));
        let flags = String::from_utf8_lossy(&f.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        Image {
            engine,
            flags,
            secret,
        }
    })
}

/// The image and the `podman run` flags this machine needs, for other tests that run it (the
/// Slurm array's container line); None where the container tests are skipped.
pub(crate) fn podman_image() -> Option<(String, String)> {
    if skip() {
        return None;
    }
    let img = image();
    Some(("localhost/vidcurate:latest".into(), img.flags.join(" ")))
}

/// Lets the image's user (uid 1000) read `dir` and write where it must.
fn open_up(dir: &Path) {
    let s = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(s.success());
}

#[test]
fn the_demo_in_one_podman_run_equals_the_native_binary() {
    need_ffmpeg!();
    if skip() {
        return;
    }
    let img = image();
    let d = tempfile::tempdir().unwrap();
    let inside = d.path().join("demo");
    std::fs::create_dir(&inside).unwrap();
    // The README's third way, as root runs it: an empty folder, the image makes the rest.
    let o = img
        .command()
        .args(["--user", "0:0", "-v"])
        .arg(format!("{}:/work:Z", inside.display()))
        .args(["--entrypoint", "vidcurate-demo", "vidcurate:latest"])
        .output()
        .unwrap();
    assert!(o.status.success(), "vidcurate-demo: {}", shown(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("demo: done"));
    assert!(inside.join("data/releases/demo/README.md").exists());

    // The native binary over a copy of the same inputs.
    let native = d.path().join("native");
    for part in ["pipelines", "queries", "data/demo"] {
        let to = native.join(part);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let s = Command::new("cp")
            .arg("-r")
            .arg(inside.join(part))
            .arg(&to)
            .status()
            .unwrap();
        assert!(s.success());
    }
    let o = run(&["run", "pipelines/demo.toml", "-q"], &native);
    assert_eq!(o.status.code(), Some(3), "native demo: {}", shown(&o));
    let got = snapshot_from(&inside.join("data/runs/demo"), DEMO_TABLES, "/work");
    let want = snapshot_from(
        &native.join("data/runs/demo"),
        DEMO_TABLES,
        &native.display().to_string(),
    );
    // 12 clips, 4 of them talk the relevance judge filters, a rotated phone clip.
    assert_eq!(want[2].len(), 9, "probe rows: {:?}", want[2]);
    for (i, t) in DEMO_TABLES.iter().chain(&["jpegs"]).enumerate() {
        assert_eq!(
            got[i], want[i],
            "table {t}: the image's run differs from the native one"
        );
    }
}

/// A run's snapshot with `root` (where it read its inputs) written as `<inputs>`: a reject's
/// detail names the file it could not read.
fn snapshot_from(run: &Path, tables: &[&str], root: &str) -> Vec<Vec<String>> {
    let mut all = crate::util::snapshot(run, tables, VOLATILE);
    for rows in &mut all {
        for r in rows.iter_mut() {
            *r = r.replace(root, "<inputs>");
        }
    }
    all
}

/// What deploy/k8s/indexed-job.yaml gives its worker container: the args, the working
/// directory and each volume's mount path by name (the file keeps one `- { name: ..., mountPath:
/// ... }` line per mount, so a line reader is enough without a YAML crate).
struct PodSpec {
    args: Vec<String>,
    workdir: String,
    mounts: Vec<(String, String)>,
}

fn pod_spec() -> PodSpec {
    let text = std::fs::read_to_string(repo().join("deploy/k8s/indexed-job.yaml")).unwrap();
    let field = |l: &str, k: &str| {
        let at = l.find(&format!("{k}: "))? + k.len() + 2;
        Some(l[at..].split([',', '}']).next()?.trim().to_string())
    };
    let (mut spec, mut in_args) = (
        PodSpec {
            args: vec![],
            workdir: String::new(),
            mounts: vec![],
        },
        false,
    );
    for l in text.lines().map(str::trim) {
        if l.starts_with('#') {
            continue;
        }
        if l == "args:" {
            in_args = true;
        } else if in_args && l.starts_with("- ") {
            spec.args.push(l[2..].trim_matches('"').to_string());
        } else {
            in_args = false;
        }
        if let Some(w) = l.strip_prefix("workingDir: ") {
            spec.workdir = w.to_string();
        }
        if let (Some(n), Some(m)) = (field(l, "name"), field(l, "mountPath")) {
            spec.mounts.push((n, m));
        }
    }
    spec
}

/// One worker container as the manifest's Indexed Job runs it: its args (with this test's
/// bucket and world), its working directory, each volume where the manifest mounts it (the
/// ConfigMaps and the data volume from `layout`'s folders, read-only; the emptyDir as a tmpfs:
/// a retry starts empty), the index in JOB_COMPLETION_INDEX.
fn pod(img: &Image, layout: &Path, url: &str, index: u32, name: &str) -> Command {
    let mut args = pod_spec().args;
    for (flag, value) in [("--out", url), ("--world", "3")] {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1] = value.to_string();
    }
    let mut c = pod_base(img, layout, index, name);
    c.args(args);
    c
}

/// A pod's container as the manifest lays it out, up to the image's name: the command is the
/// caller's.
fn pod_base(img: &Image, layout: &Path, index: u32, name: &str) -> Command {
    let spec = pod_spec();
    let mut c = img.command();
    c.args(["--name", name, "--network", "host", "-w", &spec.workdir]);
    for (volume, at) in &spec.mounts {
        match volume.as_str() {
            "scratch" => c.args([
                "--mount",
                &format!("type=tmpfs,destination={at},tmpfs-mode=1777"),
            ]),
            _ => c
                .arg("-v")
                .arg(format!("{}:{at}:ro", local(layout, &spec, at).display())),
        };
    }
    c.args(["-e", &format!("JOB_COMPLETION_INDEX={index}")])
        .args([
            "-e",
            "AWS_ACCESS_KEY_ID=testing",
            "-e",
            "AWS_SECRET_ACCESS_KEY=testing",
        ])
        .args([
            "-e",
            "AWS_DEFAULT_REGION=us-east-1",
            "-e",
            "AWS_ALLOW_HTTP=true",
        ])
        .args(["-e", &format!("AWS_ENDPOINT_URL={}", moto_endpoint())])
        .args(["-e", "RUST_LOG=warn", "vidcurate:latest"]);
    c
}

/// Where a mount of the pod lies in `layout`, the pod's working directory here.
fn local(layout: &Path, spec: &PodSpec, mount: &str) -> PathBuf {
    let inside = Path::new(mount).strip_prefix(&spec.workdir);
    layout.join(inside.unwrap_or_else(|_| panic!("{mount} is outside {}", spec.workdir)))
}

/// The folders the manifest's volumes hold, where it mounts them under its working directory:
/// the `pipeline` ConfigMap (the pipeline file its args name), the `queries` ConfigMap (every
/// query file), the `data` volume (the inputs, left empty here). Returns the pipeline file.
fn k8s_layout(layout: &Path, pipeline: &str) -> PathBuf {
    let spec = pod_spec();
    let mount = |volume: &str| {
        let (_, at) = spec.mounts.iter().find(|(n, _)| n == volume).unwrap();
        local(layout, &spec, at)
    };
    let file = mount("pipeline").join(Path::new(&spec.args[1]).file_name().unwrap());
    assert_eq!(
        layout.join(&spec.args[1]),
        file,
        "the args name the mounted pipeline"
    );
    write(&file, pipeline);
    copy_dir(&repo().join("queries"), &mount("queries"));
    std::fs::create_dir_all(mount("data")).unwrap();
    file
}

fn finished(c: std::process::Child) {
    let o = c.wait_with_output().unwrap();
    // 3: the corpus holds broken files, rejected as in a single run.
    assert!(
        matches!(o.status.code(), Some(0) | Some(3)),
        "worker: {}",
        shown(&o)
    );
}

#[test]
fn three_indexed_job_pods_on_s3_equal_one_local_process_with_one_killed_and_retried() {
    need_ffmpeg!();
    if skip() {
        return;
    }
    let img = image();
    let d = tempfile::tempdir().unwrap();
    // The walkthrough's shipped pipeline, laid out as the manifest mounts it, finds its query
    // file (issue 67: every pod exited 2 on `../queries/protest.toml`).
    let demo = d.path().join("k8s-demo");
    let demo_text = std::fs::read_to_string(repo().join("pipelines/demo.toml")).unwrap();
    k8s_layout(&demo, &demo_text);
    open_up(&demo);
    let o = pod_base(
        img,
        &demo,
        0,
        &format!("vidcurate-test-{}-v", std::process::id()),
    )
    .args(["validate", &pod_spec().args[1]])
    .output()
    .unwrap();
    assert!(
        o.status.success(),
        "the walkthrough's pipeline in the pod: {}",
        shown(&o)
    );
    // The pods' run: a many-clip corpus in the data volume, read through `../data/`.
    let layout = d.path().join("k8s");
    corpus(&layout.join("data"));
    let text = std::fs::read_to_string(layout.join("data/p.toml")).unwrap();
    std::fs::remove_file(layout.join("data/p.toml")).unwrap();
    let p = k8s_layout(
        &layout,
        &text.replace("manifest = \"m.csv\"", "manifest = \"../data/m.csv\""),
    );
    open_up(d.path());
    let reference = d.path().join("ref");
    let o = run_into(&p, &reference, &layout);
    assert_eq!(o.status.code(), Some(3), "{}", shown(&o));
    let tables = ["source", "probe", "frames", "rejects"];
    let want = snapshot_from(&reference, &tables, &layout.display().to_string());
    let inputs = layout;

    let url = bucket("image");
    let tag = std::process::id();
    let names: Vec<String> = (0..4)
        .map(|i| format!("vidcurate-test-{tag}-{i}"))
        .collect();
    let mut killed = pod(img, &inputs, &url, 1, &names[1]).spawn().unwrap();
    wait_for_first_frames(&url, &mut killed, 300);
    let k = Command::new(&img.engine)
        .args(["kill", &names[1]])
        .output()
        .unwrap();
    assert!(k.status.success(), "kill: {}", shown(&k));
    killed.wait().unwrap();
    // Kubernetes' per-index retry: a new pod with the same index and an empty scratch.
    let pods = vec![
        pod(img, &inputs, &url, 0, &names[0])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        pod(img, &inputs, &url, 2, &names[2])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        pod(img, &inputs, &url, 1, &names[3])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ];
    for c in pods {
        finished(c);
    }

    let got_dir = d.path().join("from-s3");
    download(&url, &got_dir);
    let got = snapshot_from(&got_dir, &tables, &pod_spec().workdir);
    for (i, t) in tables.iter().chain(&["jpegs"]).enumerate() {
        assert_eq!(
            got[i], want[i],
            "table {t} differs from the single local run"
        );
    }
    let o = crate::cluster::s3_env(Command::new(bin()).args(["status", &url]))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    assert!(out.contains("every rank is complete"), "{out}");
}

#[test]
fn the_image_runs_as_a_user_names_its_commit_and_holds_no_key_or_build_path() {
    if skip() {
        return;
    }
    let img = image();
    let o = img
        .command()
        .args(["--entrypoint", "id", "vidcurate:latest", "-u"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", shown(&o));
    let uid = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_ne!(uid, "0", "the image's user is root");

    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let o = img
        .command()
        .args(["vidcurate:latest", "--version"])
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", shown(&o));
    assert!(
        version.contains(&format!("(commit {head})")),
        "{version} does not name {head}"
    );

    // Every layer and the config, as the engine saves them, uncompressed.
    let d = tempfile::tempdir().unwrap();
    let saved = d.path().join("saved");
    let o = Command::new(&img.engine)
        .args(["save", "--format", "docker-dir", "-o"])
        .arg(&saved)
        .arg("vidcurate:latest")
        .output()
        .unwrap();
    assert!(o.status.success(), "save: {}", shown(&o));
    let home = std::env::var("HOME").unwrap_or_default();
    let mut needles = vec![img.secret.clone(), repo().display().to_string()];
    for p in [".cargo", ".rustup"] {
        needles.push(format!("{home}/{p}"));
    }
    for n in &needles {
        let g = Command::new("grep")
            .args(["-r", "-a", "-l", "-F", "-e", n])
            .arg(&saved)
            .output()
            .unwrap();
        let hits = String::from_utf8_lossy(&g.stdout);
        assert!(
            g.status.code() == Some(1),
            "the image holds {:?}: {hits}",
            if n == &img.secret {
                "a key from the build's environment"
            } else {
                n.as_str()
            }
        );
    }
}
