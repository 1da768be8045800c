//! The annotation round trip against a real Label Studio (PyPI `label-studio`, in the venv
//! scripts/setup.sh makes, started here on 127.0.0.1 with its SQLite default): our label config
//! is accepted, our tasks import, annotations submitted through its API come back through
//! `annotate import` with the invalid ones named; then two spreadsheet annotators and their
//! agreement.

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const TOKEN: &str = "0123456789abcdef0123456789abcdef01234567";

/// A Label Studio server in its own process group, stopped when dropped.
pub(crate) struct LabelStudio {
    url: String,
    child: Child,
}

impl Drop for LabelStudio {
    fn drop(&mut self) {
        // Its development server does not stop on SIGTERM.
        let pgid = self.child.id() as i32;
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{pgid}")])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `GET /health` answers 200 (a plain HTTP/1.0 request: no client needed).
fn health_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    if c.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}

/// Spawns Label Studio on a free port with `data` as its data folder and waits until `/health`
/// answers; fails the test with its log after `limit`.
fn label_studio_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/venv-labelstudio/bin/label-studio")
}

fn spawn_label_studio(data: &Path, limit: Duration) -> LabelStudio {
    let bin = label_studio_bin();
    assert!(
        bin.exists(),
        "{} is missing: run ./scripts/setup.sh (it installs label-studio for this test)",
        bin.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(data.join("label-studio.log")).unwrap();
    let child = Command::new(&bin)
        .args([
            "start",
            "--no-browser",
            "--internal-host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "--username",
            "annotator@example.org",
            "--password",
            "vidcurate-test-1",
        ])
        .args(["--user-token", TOKEN, "--enable-legacy-api-token"])
        .env("LABEL_STUDIO_BASE_DATA_DIR", data)
        .env("LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN", "true")
        .env("LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK", "true")
        // No error reports to sentry.io (no network here, and none wanted from a test).
        .env("SENTRY_DSN", "")
        .env("FRONTEND_SENTRY_DSN", "")
        .env("SENTRY_RATE", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap();
    let ls = LabelStudio {
        url: format!("http://127.0.0.1:{port}"),
        child,
    };
    let deadline = Instant::now() + limit;
    while !health_ok(port) {
        assert!(
            Instant::now() < deadline,
            "Label Studio did not come up: {}",
            std::fs::read_to_string(data.join("label-studio.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    ls
}

/// A data folder whose SQLite database is migrated and has the test user: a first start
/// migrates for over a minute of CPU, a start on a copy takes seconds. Made once per Label
/// Studio install (named by its script's mtime) under the tests' temporary folder, and only
/// ever copied from.
fn migrated_template() -> &'static Path {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let installed = std::fs::metadata(label_studio_bin())
            .and_then(|m| m.modified())
            .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
            .unwrap_or(0);
        let dir = tmp.join(format!("label-studio-migrated-{installed}"));
        if !dir.exists() {
            let fresh = tempfile::Builder::new()
                .prefix("label-studio-migrating")
                .tempdir_in(tmp)
                .unwrap();
            drop(spawn_label_studio(fresh.path(), Duration::from_secs(300)));
            // A test process beside this one may have got there first: either copy is whole.
            let fresh = fresh.keep();
            if std::fs::rename(&fresh, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&fresh);
            }
        }
        dir
    })
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else if e.file_name() != "label-studio.log" {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

pub(crate) fn start_label_studio(data: &Path) -> LabelStudio {
    copy_tree(migrated_template(), data);
    spawn_label_studio(data, Duration::from_secs(120))
}

/// Starts Label Studio, runs the driver `script` (tests/readers) against it with its URL, the
/// token and `args`, stops it, and returns what the driver printed (one JSON line).
pub(crate) fn drive_label_studio(dir: &Path, script: &str, args: &[&str]) -> serde_json::Value {
    let ls = start_label_studio(dir);
    let o = Command::new("python3")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/readers")
                .join(script),
        )
        .args([ls.url.as_str(), TOKEN])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    drop(ls);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn annotations(run: &Path) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    table_rows_file(&run.join("annotations/annotations.parquet"))
        .into_iter()
        .map(|r| ((r["video_id"].clone(), r["annotator"].clone()), r))
        .collect()
}

pub(crate) fn vidcurate(args: &[&str], cwd: &Path) -> String {
    let o = run(args, cwd);
    assert!(
        o.status.success(),
        "vidcurate {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn label_studio_round_trip_then_spreadsheet_annotators() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    make_corpus(
        &dir.join("demo"),
        &["--clips", "6", "--seconds", "3", "--seed", "3"],
    );
    write(
        &dir.join("p.toml"),
        "name = \"a\"\n[source]\ntype = \"local\"\nmanifest = \"demo/manifest.csv\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
    );
    let run_dir = dir.join("run");
    let o = run_into(&dir.join("p.toml"), &run_dir, dir);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = run_dir.to_str().unwrap();
    let export = dir.join("export");
    let out = vidcurate(
        &[
            "annotate",
            "export",
            r,
            "--out",
            export.to_str().unwrap(),
            "--media-url",
            "http://127.0.0.1:9/videos/",
        ],
        dir,
    );
    assert!(out.starts_with("7 tasks"), "{out}");
    let tasks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(export.join("tasks.json")).unwrap()).unwrap();
    let first = &tasks[0]["data"];
    assert_eq!(first["video"], "http://127.0.0.1:9/videos/demo000.mp4");
    let fps = first["fps"].as_f64().unwrap();
    assert!(fps > 0.0);

    // --where narrows the tasks by source columns (the corpus's label).
    let some = dir.join("export-fake");
    let out = vidcurate(
        &[
            "annotate",
            "export",
            r,
            "--out",
            some.to_str().unwrap(),
            "--media-url",
            "http://x",
            "--where",
            "label = 'fake'",
        ],
        dir,
    );
    let fakes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(some.join("tasks.json")).unwrap()).unwrap();
    let n = fakes.as_array().unwrap().len();
    assert!(
        n > 0 && n < 7 && out.starts_with(&format!("{n} tasks")),
        "{out}"
    );

    let (json1, json2) = (dir.join("ls-1.json"), dir.join("ls-2.json"));
    let driven = drive_label_studio(
        dir,
        "label_studio_roundtrip.py",
        &[
            export.to_str().unwrap(),
            json1.to_str().unwrap(),
            "--revise",
            json2.to_str().unwrap(),
        ],
    );
    let task = |v: &str| driven["tasks"][v].as_i64().unwrap().to_string();

    let out = vidcurate(&["annotate", "import", r, json1.to_str().unwrap()], dir);
    assert!(
        out.contains("2 annotations stored (2 new or replaced)"),
        "{out}"
    );
    assert!(out.contains("1 cancelled"), "{out}");
    // Kept out, naming the task and the field.
    assert!(
        out.contains(&format!("task {} video demo003", task("demo003")))
            && out.contains("risk_signal_end: ends at"),
        "{out}"
    );
    assert!(
        out.contains(&format!("task {} video demo004", task("demo004")))
            && out.contains("risk_signal_description: missing"),
        "{out}"
    );
    let a = annotations(&run_dir);
    let row = &a[&("demo000".to_string(), "1".to_string())];
    assert_eq!(row["risk_label"], "yes");
    let start: f64 = row["risk_signal_start"].parse().unwrap();
    assert!((start - 30.0 / fps).abs() < 1e-9, "{row:?}");
    assert_eq!(
        row["risk_signal_description"],
        "First: smoke appears; Then: people run; Afterwards: the door bursts"
    );
    assert_eq!(row["risk_visual_indicators"], "smoke near the door");
    assert_eq!(
        a[&("demo000".to_string(), "adjudicated".to_string())]["risk_label"],
        "yes"
    );
    assert_eq!(
        a[&("demo001".to_string(), "adjudicated".to_string())]["risk_label"],
        "no"
    );

    // The same export again changes nothing; the revised export replaces one annotation.
    let out = vidcurate(&["annotate", "import", r, json1.to_str().unwrap()], dir);
    assert!(out.contains("(0 new or replaced)"), "{out}");
    assert_eq!(annotations(&run_dir), a);
    let out = vidcurate(&["annotate", "import", r, json2.to_str().unwrap()], dir);
    assert!(
        out.contains("2 annotations stored (1 new or replaced)"),
        "{out}"
    );
    assert_eq!(
        annotations(&run_dir)[&("demo001".to_string(), "adjudicated".to_string())]["risk_label"],
        "yes"
    );

    // Two annotators in spreadsheets: Cohen's kappa 0.4 on three videos, span IoU 1/3.
    let sheet = |who: &str, rows: &[(&str, &str, &str)]| {
        let mut s = String::from(
            "video_id,risk_signal_start,risk_signal_end,risk_signal_first,risk_label\n",
        );
        for (v, span, l) in rows {
            s += &format!(
                "{v},{span},{},{l}\n",
                if *l == "yes" { "it starts" } else { "" }
            );
        }
        let p = dir.join(format!("{who}.csv"));
        write(&p, &s);
        p
    };
    let a_csv = sheet(
        "a",
        &[
            ("demo005", "1.0,2.0", "yes"),
            ("demo_rotated", ",", "no"),
            ("demo002", "0.5,1.0", "yes"),
        ],
    );
    let b_csv = sheet(
        "b",
        &[
            ("demo005", "1.5,2.5", "yes"),
            ("demo_rotated", ",", "no"),
            ("demo002", ",", "no"),
        ],
    );
    vidcurate(
        &[
            "annotate",
            "import",
            r,
            a_csv.to_str().unwrap(),
            "--annotator",
            "a",
        ],
        dir,
    );
    let out = vidcurate(
        &[
            "annotate",
            "import",
            r,
            b_csv.to_str().unwrap(),
            "--annotator",
            "b",
        ],
        dir,
    );
    assert!(out.contains("cohen kappa 0.400"), "{out}");
    assert!(out.contains("mean IoU 0.333 over 1 pairs"), "{out}");
    // demo002: one yes, one no: a tie under the majority rule.
    assert!(
        out.contains("tied on the label (not adjudicated): demo002"),
        "{out}"
    );
    let out = vidcurate(
        &[
            "annotate",
            "import",
            r,
            b_csv.to_str().unwrap(),
            "--annotator",
            "b",
            "--rule",
            "reviewer:b",
        ],
        dir,
    );
    assert!(!out.contains("tied"), "{out}");
    assert_eq!(
        annotations(&run_dir)[&("demo002".to_string(), "adjudicated".to_string())]["risk_label"],
        "no"
    );
    // A CSV without --annotator is refused.
    let o = run(&["annotate", "import", r, a_csv.to_str().unwrap()], dir);
    assert_eq!(o.status.code(), Some(2));

    // The adjudicated fields reach a release, and evaluate reports the signal lengths from it.
    vidcurate(&["split", r, "--stratify", "label"], dir);
    let rel = dir.join("release");
    vidcurate(
        &[
            "release",
            r,
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir,
    );
    let mut released = BTreeMap::new();
    for f in std::fs::read_dir(rel.join("data")).unwrap() {
        for row in table_rows_file(&f.unwrap().path()) {
            released.insert(row["video_id"].clone(), row);
        }
    }
    assert_eq!(released.len(), 7);
    assert_eq!(released["demo000"]["annotation_risk_label"], "yes");
    assert_eq!(released["demo002"]["annotation_decided_by"], "reviewer: b");
    assert_eq!(released["demo003"]["annotation_risk_label"], "null");
    let preds = dir.join("preds.csv");
    write(&preds, "video_id,prediction\ndemo000,yes\ndemo001,no\n");
    let plot = dir.join("lengths.png");
    let out = vidcurate(
        &[
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--label",
            "annotation_risk_label",
            // Every split: the spans of all seven videos, whichever split they fell in.
            "--split",
            "all",
            "--json",
            "--lengths-plot",
            plot.to_str().unwrap(),
        ],
        dir,
    );
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Spans of demo000 (30 frames), demo001 (revised: 15 frames) and demo005 (annotator a's 1 s).
    let all = &report["signal_lengths"]["all"];
    assert_eq!(all["n"], 3, "{report}");
    let mean = (30.0 / fps + 15.0 / fps + 1.0) / 3.0;
    assert!(
        (all["mean"].as_f64().unwrap() - mean).abs() < 1e-9,
        "{report}"
    );
    assert!(std::fs::metadata(&plot).unwrap().len() > 1000);
}

/// HarmVideoBench A.2's review of question items in a real Label Studio: two reviewers, a
/// senior adjudicator (tests/readers/label_studio_items.py says what each did to which item),
/// the reviews checked field by field, the decided items' edit classes, kappa and shares, and
/// the release's questions config made of the decided items.
#[test]
fn question_items_reviewed_by_two_people_and_a_senior_in_label_studio() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (_server, run_dir) = crate::questions::question_run(dir, 3);
    let r = run_dir.to_str().unwrap();
    let export = dir.join("export");
    let out = vidcurate(
        &[
            "annotate",
            "export",
            r,
            "--items",
            "--out",
            export.to_str().unwrap(),
            "--media-url",
            "http://127.0.0.1:9/videos/",
        ],
        dir,
    );
    assert!(out.starts_with("9 tasks"), "{out}");
    let tasks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(export.join("tasks.json")).unwrap()).unwrap();
    let t0 = &tasks[0]["data"];
    assert_eq!(t0["caption"], "Colour bars.");
    assert!(
        t0["video"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:9/videos/")
    );
    assert!(t0["flags"].as_str().unwrap().contains("blind: "), "{t0}");
    assert_eq!(
        tasks[0]["predictions"][0]["result"][0]["value"]["text"][0],
        t0["question"]
    );

    let json = dir.join("items.json");
    let driven = drive_label_studio(
        dir,
        "label_studio_items.py",
        &[export.to_str().unwrap(), json.to_str().unwrap()],
    );
    let id = |i: usize| driven["ids"][i].as_str().unwrap().to_string();
    let task = |i: usize| driven["tasks"][id(i)].to_string();
    let senior = driven["users"]["annotator@example.org"].to_string();
    let (r1, r2) = (
        driven["users"]["r1@example.org"].to_string(),
        driven["users"]["r2@example.org"].to_string(),
    );

    let rule = format!("reviewer:{senior}");
    let out = vidcurate(
        &[
            "annotate",
            "import",
            r,
            json.to_str().unwrap(),
            "--rule",
            &rule,
        ],
        dir,
    );
    // 9 + 9 reviews, less i8's cancelled one and r1's three kept out, plus the senior's two.
    assert!(
        out.starts_with("16 item reviews stored (16 new or replaced), 8 items decided"),
        "{out}"
    );
    assert!(out.contains("1 cancelled"), "{out}");
    for (i, field, says) in [
        (6, "options", "read the same"),
        (7, "question", "empty"),
        (8, "level", "\"made_up_level\" is not a level"),
    ] {
        let want = format!(
            "kept out: task {} item {} reviewer {r1}: {field}: ",
            task(i),
            id(i)
        );
        let line = out
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("{want}: {out}"));
        assert!(line.contains(says), "{line}");
    }
    let rows: BTreeMap<(String, String), BTreeMap<String, String>> =
        table_rows_file(&run_dir.join("annotations/items.parquet"))
            .into_iter()
            .map(|r| ((r["item_id"].clone(), r["annotator"].clone()), r))
            .collect();
    let decided = |i: usize| rows.get(&(id(i), "adjudicated".to_string()));
    let class = |i: usize| decided(i).map(|r| r["edit_class"].clone());
    let want = [
        "accepted",
        "minor_edit",
        "minor_edit",
        "rejected",
        "rewritten",
        "accepted",
        "accepted",
        "accepted",
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(class(i).as_deref(), Some(*w), "item i{i}: {:?}", decided(i));
    }
    assert_eq!(class(8), None, "i8 has no valid review");
    assert_eq!(
        decided(4).unwrap()["decided_by"],
        format!("senior: {senior}")
    );
    assert_eq!(
        decided(4).unwrap()["question"],
        "Which object fills the frame for the whole clip?"
    );
    assert_ne!(
        decided(2).unwrap()["level"],
        decided(2).unwrap()["drafted_level"]
    );
    assert!(decided(0).unwrap()["decided_by"].starts_with("2 of 2 reviewers"));
    assert_eq!(
        rows[&(id(3), r2.clone())]["reject_reason"],
        "the question gives the answer away"
    );
    // Shares: 7 of 8 kept; of those 2 minor edits, 1 rewritten; one moved.
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(run_dir.join("annotations/items_report.json")).unwrap(),
    )
    .unwrap();
    let all = &report["all"];
    assert_eq!(
        (
            all["decided"].as_u64(),
            all["rejected"].as_u64(),
            all["reassigned"].as_u64()
        ),
        (Some(8), Some(1), Some(1)),
        "{all}"
    );
    let close = |v: &serde_json::Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-12;
    assert!(close(&all["retained"], 7.0 / 8.0), "{all}");
    assert!(close(&all["minor_share"], 2.0 / 7.0), "{all}");
    assert!(close(&all["rewritten_share"], 1.0 / 7.0), "{all}");
    // Kappa of r1 and r2 on i0..i5 (i6..i8: r1's reviews were kept out), the senior aside:
    // r1 accept, edit, edit, reject, accept, accept; r2 accept, edit, edit, reject, reject, edit.
    // Agreement 4/6, chance (3·1 + 2·3 + 1·2)/36 = 11/36: kappa (24 - 11)/(36 - 11) = 0.52.
    assert!(close(&all["kappa"], 0.52), "{all}");
    assert_eq!(all["kappa_items"], 6);
    assert!(out.contains("0.520"), "{out}");
    let per_level = report["levels"].as_array().unwrap();
    assert_eq!(per_level.len(), 3, "{report}");
    let decided_sum: u64 = per_level
        .iter()
        .map(|l| l[1]["decided"].as_u64().unwrap())
        .sum();
    assert_eq!(decided_sum, 8);

    // The same export again changes nothing.
    let again = vidcurate(
        &[
            "annotate",
            "import",
            r,
            json.to_str().unwrap(),
            "--rule",
            &rule,
        ],
        dir,
    );
    assert!(again.contains("(0 new or replaced)"), "{again}");

    // The release is made of the decided items: 7 (i3 rejected, i8 undecided).
    let o = run(&["split", r, "--ratios", "34/33/33"], dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rel = dir.join("release");
    let o = run(
        &[
            "release",
            r,
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let released: BTreeMap<String, BTreeMap<String, String>> =
        table_rows_file_all(&rel.join("questions"))
            .into_iter()
            .map(|r| (r["item_id"].clone(), r))
            .collect();
    assert_eq!(released.len(), 7, "{released:?}");
    assert!(!released.contains_key(&id(3)) && !released.contains_key(&id(8)));
    assert_eq!(
        released[&id(4)]["question"],
        decided(4).unwrap()["question"]
    );
    assert_eq!(released[&id(4)]["review"], "rewritten");
    assert_eq!(released[&id(2)]["level"], decided(2).unwrap()["level"]);
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains("of 8 decided items 87.5 % were retained; of those, 28.6 % had minor edits and 14.3 % were rewritten, 1 moved to another level; 1 rejected"),
        "{card}"
    );
    assert!(
        card.contains("1 kept candidates without a decision are left out"),
        "{card}"
    );
}
