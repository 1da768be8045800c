//! Resume: kill -9 at several moments, Ctrl-C, and changed settings. The tables after resuming
//! must equal those of an uninterrupted run: no lost rows, no duplicates.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const TABLES: &[&str] = &["source", "probe", "frames", "rejects"];
/// Columns that legitimately differ between runs.
const VOLATILE: &[&str] = &["rejected_at"];

fn corpus(dir: &Path) {
    let v = dir.join("v");
    std::fs::create_dir_all(&v).unwrap();
    for i in 0..6 {
        plain_clip(
            &v.join(format!("c{i}.mp4")),
            3.0 + i as f64 * 0.5,
            "320x180",
        );
    }
    std::fs::write(v.join("broken.mp4"), b"\x00\x00\x00\x18ftypmp42 garbage").unwrap();
    let mut csv = String::from("path,id,label\n");
    for i in 0..6 {
        csv += &format!(
            "v/c{i}.mp4,clip{i},{}\n",
            if i % 2 == 0 { "fake" } else { "real" }
        );
    }
    csv += "v/broken.mp4,broken,fake\n";
    write(&dir.join("m.csv"), &csv);
}

fn pipeline_file(dir: &Path, count: u32) -> PathBuf {
    let p = dir.join(format!("p{count}.toml"));
    // Flush after every video so a kill can land between any two shards.
    write(
        &p,
        &pipeline(
            "manifest = \"m.csv\"",
            &format!("{{ count = {count} }}"),
            "[output]\nflush_secs = 0\n[runtime]\nchannel_capacity = 1\n",
        ),
    );
    p
}

fn snapshot(run: &Path) -> Vec<Vec<String>> {
    crate::util::snapshot(run, TABLES, VOLATILE)
}

fn spawn_run(p: &Path, out: &Path, cwd: &Path) -> std::process::Child {
    run_command(p, out)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn run_to_end(p: &Path, out: &Path, cwd: &Path) {
    let o = run_into(&p, &out, cwd);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn kill_9_at_any_moment_then_resume_gives_identical_tables() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let p = pipeline_file(d.path(), 12);
    let reference = d.path().join("ref");
    let t0 = std::time::Instant::now();
    run_to_end(&p, &reference, d.path());
    let full = t0.elapsed();
    let want = snapshot(&reference);
    assert_eq!(want[2].len(), 6 * 12, "frames rows");

    let crashed = d.path().join("crashed");
    // Kill points: as soon as the first shard of a table appears, or after n shards, each time
    // resuming from what the last kill left behind; then a few kills at arbitrary moments.
    let shards = |t: &str| {
        std::fs::read_dir(crashed.join(t))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    let mut partial = vec![];
    for (table, n) in [
        ("source", 1),
        ("probe", 2),
        ("frames", 1),
        ("frames", 2),
        ("rejects", 1),
        ("frames", 4),
    ] {
        let mut child = spawn_run(&p, &crashed, d.path());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while shards(table) < n && std::time::Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        partial.push(table_rows(&crashed.join("frames"), &[]).len());
    }
    for ms in [3u64, 40, 90] {
        let mut child = spawn_run(&p, &crashed, d.path());
        std::thread::sleep(Duration::from_millis(ms));
        let _ = child.kill();
        let _ = child.wait();
        partial.push(table_rows(&crashed.join("frames"), &[]).len());
    }
    eprintln!(
        "frames rows after each kill: {partial:?} of {} (full run {full:?})",
        want[2].len()
    );
    assert!(
        partial.iter().any(|n| *n > 0 && *n < want[2].len()),
        "no kill landed mid-run: {partial:?}"
    );
    run_to_end(&p, &crashed, d.path());
    let got = snapshot(&crashed);
    for (i, t) in TABLES.iter().enumerate() {
        assert_eq!(
            got[i], want[i],
            "table {t} differs after kill -9 and resume"
        );
    }
    assert_eq!(got[4], want[4], "frame JPEGs differ");
    // A further run has nothing left to do.
    run_to_end(&p, &crashed, d.path());
    let c = counts(&crashed, "frames");
    assert_eq!(
        (c["computed"].as_u64(), c["reused"].as_u64()),
        (Some(0), Some(6)),
        "{c}"
    );
}

#[test]
fn ctrl_c_stops_cleanly_and_the_rerun_finishes() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let p = pipeline_file(d.path(), 40);
    let out = d.path().join("run");
    let child = run_command(&p, &out)
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first frames shard exists, then interrupt.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !out.join("frames").join("part-00000.parquet").exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    let m = manifest(&out);
    let status = m["invocations"][0]["status"].as_str().unwrap().to_string();
    if o.status.code() == Some(130) {
        assert_eq!(status, "interrupted");
    } else {
        // The run may have finished in the meantime on a fast machine.
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    run_to_end(&p, &out, d.path());
    assert_eq!(column(&out.join("frames"), "frame_index").len(), 6 * 40);
    let m = manifest(&out);
    assert_eq!(
        m["invocations"].as_array().unwrap().last().unwrap()["status"],
        "complete"
    );
}

#[test]
fn changing_one_stage_redoes_it_and_nothing_before() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let out = d.path().join("run");
    run_to_end(&pipeline_file(d.path(), 4), &out, d.path());
    let fp4 = column(&out.join("frames"), "stage_fingerprint")[0].clone();
    run_to_end(&pipeline_file(d.path(), 6), &out, d.path());
    let probe = counts(&out, "probe");
    let frames = counts(&out, "frames");
    assert_eq!(probe["computed"], 0, "probe must be reused: {probe}");
    assert_eq!(probe["reused"], 6);
    assert_eq!(frames["computed"], 6, "frames must be redone: {frames}");
    // Only the new settings' rows are in the table; the old shards are set aside, not deleted.
    let idx = column(&out.join("frames"), "frame_index");
    assert_eq!(idx.len(), 36);
    assert!(
        column(&out.join("frames"), "stage_fingerprint")
            .iter()
            .all(|f| *f != fp4)
    );
    assert!(out.join("_superseded").join(&fp4).join("frames").exists());
    // The broken video's probe reject is kept (probe settings did not change), not repeated.
    let rejects = table_rows(&out.join("rejects"), VOLATILE);
    assert_eq!(rejects.len(), 1, "{rejects:#?}");
}

#[test]
fn output_is_readable_by_pyarrow() {
    need_ffmpeg!();
    let has_pyarrow = Command::new("python3")
        .args(["-c", "import pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pyarrow {
        assert!(
            std::env::var_os("VIDCURATE_ALLOW_NO_PYARROW").is_some(),
            "pyarrow missing: run scripts/setup.sh"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let out = d.path().join("run");
    run_to_end(&pipeline_file(d.path(), 3), &out, d.path());
    let script = r#"
import sys, pyarrow.dataset as ds
run = sys.argv[1]
src = ds.dataset(run + "/source", format="parquet").to_table()
probe = ds.dataset(run + "/probe", format="parquet").to_table()
frames = ds.dataset(run + "/frames", format="parquet").to_table()
rej = ds.dataset(run + "/rejects", format="parquet").to_table()
assert src.num_rows == 7 and probe.num_rows == 6 and frames.num_rows == 18 and rej.num_rows == 1, (src.num_rows, probe.num_rows, frames.num_rows, rej.num_rows)
assert frames.schema.names[:2] == ["video_id", "label"], frames.schema.names
assert str(frames.schema.field("timestamp_secs").type) == "double"
assert sorted(set(frames.column("label").to_pylist())) == ["fake", "real"]
assert rej.column("reason").to_pylist() == ["unreadable"]
print("pyarrow ok", frames.num_rows)
"#;
    let o = Command::new("python3")
        .args(["-c", script, out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pyarrow: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_second_run_on_the_same_directory_is_refused() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let p = pipeline_file(d.path(), 40);
    let out = d.path().join("run");
    let mut first = spawn_run(&p, &out, d.path());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !out.join("manifest.json").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        out.join("manifest.json").exists(),
        "the first run never wrote its manifest"
    );
    // Frozen while it holds the lock (taken before the manifest is written): the second run
    // meets a live first run every time, however fast the first would have finished.
    let stop = Command::new("sh")
        .args(["-c", &format!("kill -STOP {}", first.id())])
        .status()
        .unwrap();
    assert!(stop.success());
    let second = run_into(&p, &out, d.path());
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(
        second.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        String::from_utf8_lossy(&second.stderr)
            .contains("another vidcurate run is using this run directory")
    );
}
