//! The same bytes are the same input (issue 66): a corpus touched, or copied to another folder
//! with the old one removed, is read again and computes nothing; other bytes of the same size
//! under the old modification time are found; a kill -9 while the source reads the files loses
//! nothing. Each rerun's tables equal a clean run's.

use crate::judge::err;
use crate::need_ffmpeg;
use crate::util::*;
use std::path::{Path, PathBuf};

const TABLES: &[&str] = &["source", "probe", "frames", "rejects"];
const VOLATILE: &[&str] = &["rejected_at"];

/// Rewrites `f` with other bytes of the same size that still decode: the first letter of the
/// muxer's name in the MP4 metadata flips between `Lavf…` and `Xavf…`.
pub(crate) fn same_size_other_bytes(f: &Path) {
    let mut bytes = std::fs::read(f).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == b"Lavf" || w == b"Xavf")
        .expect("an ffmpeg-written MP4 names its muxer");
    bytes[at] = if bytes[at] == b'L' { b'X' } else { b'L' };
    std::fs::write(f, bytes).unwrap();
}

fn set_mtime(f: &Path, t: std::time::SystemTime) {
    let h = std::fs::File::options().write(true).open(f).unwrap();
    h.set_modified(t).unwrap();
}

/// The pipeline over the folder `v` beside it: probe and two frames a video.
fn pipeline(dir: &Path) -> PathBuf {
    let p = dir.join("p.toml");
    let text = crate::util::pipeline("dir = \"v\"", "{ count = 2 }", "[output]\nflush_secs = 0\n");
    write(&p, &text);
    p
}

/// Runs `p` into `out` (exit 0) and into a new folder, and holds the two to the same tables
/// (paths of the same folder, so every column); what the rerun said.
fn rerun_equals_clean(p: &Path, out: &Path, step: &str) -> String {
    let dir = p.parent().unwrap();
    let o = run_into(p, out, dir);
    assert_eq!(o.status.code(), Some(0), "{step}: {}", err(&o));
    let clean = dir.join(format!("clean-{step}"));
    let c = run_into(p, &clean, dir);
    assert_eq!(c.status.code(), Some(0), "{step}: {}", err(&c));
    let (a, b) = (
        snapshot(out, TABLES, VOLATILE),
        snapshot(&clean, TABLES, VOLATILE),
    );
    for (i, t) in TABLES.iter().chain(["frame files"].iter()).enumerate() {
        assert_eq!(a[i], b[i], "{step}: table {t} differs from a clean run's");
    }
    err(&o)
}

#[test]
fn a_corpus_touched_or_copied_elsewhere_computes_nothing_and_other_bytes_are_found() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("in");
    small_clips(&dir, 4);
    let p = pipeline(&dir);
    let out = d.path().join("run");
    let o = run_into(&p, &out, &dir);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));

    // Every file touched: each read again, found the same, nothing computed.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    for e in std::fs::read_dir(dir.join("v")).unwrap() {
        set_mtime(&e.unwrap().path(), later);
    }
    let said = rerun_equals_clean(&p, &out, "touched");
    assert!(
        said.contains("source: 4 re-hashed (moved or touched), 0 changed"),
        "{said}"
    );
    for s in ["source", "probe", "frames"] {
        assert_eq!(computed(&out, s), 0, "{s} computed for touched files");
    }
    // No file is read when nothing changed.
    let said = rerun_equals_clean(&p, &out, "unchanged");
    assert!(!said.contains("re-hashed"), "{said}");

    // The inputs copied elsewhere (`cp -r`: new paths, inodes, times), the old folder removed:
    // the source rows take the new paths, nothing after the source computes.
    let moved = d.path().join("elsewhere");
    let cp = std::process::Command::new("cp")
        .args(["-r", dir.to_str().unwrap(), moved.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::remove_dir_all(&dir).unwrap();
    let p = moved.join("p.toml");
    let said = rerun_equals_clean(&p, &out, "copied");
    assert!(
        said.contains("source: 4 re-hashed (moved or touched), 0 changed")
            && said.contains("4 moved (same bytes, new path: rows rewritten)"),
        "{said}"
    );
    for s in ["probe", "frames"] {
        assert_eq!(computed(&out, s), 0, "{s} computed for a copied corpus");
    }
    let paths = column(&out.join("source"), "path");
    assert!(
        paths.iter().all(|p| p.contains("/elsewhere/v/")),
        "{paths:?}"
    );
    let v = run(&["verify", out.to_str().unwrap()], &moved);
    assert_eq!(v.status.code(), Some(0), "{}", err(&v));

    // Other bytes of the same size with the old modification time put back (`cp -p`, `rsync
    // -a`): the change time tells, the bytes decide. A folder's ids are content ids, so the
    // video is a new one and the old one leaves.
    let f = moved.join("v/c0.mp4");
    let old = std::fs::metadata(&f).unwrap().modified().unwrap();
    same_size_other_bytes(&f);
    set_mtime(&f, old);
    let said = rerun_equals_clean(&p, &out, "same-size");
    assert!(
        said.contains("source: 1 removed, 1 added") && !said.contains("re-hashed"),
        "{said}"
    );
    assert_eq!((computed(&out, "probe"), computed(&out, "frames")), (1, 1));
}

/// Large files (sparse: nothing on disk) the source reads for their digests; the run is killed
/// once some are kept. The rerun finishes, keeps what was read, and equals a clean run.
#[test]
fn a_kill_while_the_source_reads_the_corpus_loses_nothing() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("v")).unwrap();
    let clip = dir.join("clip.mp4");
    plain_clip(&clip, 0.6, "64x36");
    let bytes = std::fs::read(&clip).unwrap();
    let payload: u64 = 96 << 20;
    for i in 0..16u32 {
        // The clip, then a `free` atom (what any reader skips) of zeros: its own length per
        // file, so no two files are alike.
        let mut head = bytes.clone();
        let len = payload + i as u64 + 8;
        head.extend_from_slice(&(len as u32).to_be_bytes());
        head.extend_from_slice(b"free");
        let f = dir.join(format!("v/big{i:02}.mp4"));
        std::fs::write(&f, &head).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(head.len() as u64 + len - 8)
            .unwrap();
    }
    write(
        &dir.join("p.toml"),
        "name = \"kill\"\n[source]\ntype = \"local\"\ndir = \"v\"\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
    );
    let out = dir.join("run");
    let digests = out.join("cache/media/part-digests.jsonl");
    let mut child = run_command(&dir.join("p.toml"), &out)
        .current_dir(dir)
        .spawn()
        .unwrap();
    let kept = |f: &Path| std::fs::read_to_string(f).map_or(0, |t| t.lines().count());
    let t0 = std::time::Instant::now();
    while kept(&digests) < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        assert!(t0.elapsed().as_secs() < 120, "no digest kept");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = kept(&digests);
    assert!(
        before < 16,
        "every file was read before the kill ({before})"
    );

    let o = run_into(&dir.join("p.toml"), &out, dir);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        kept(&digests),
        16,
        "the digests of the files read before the kill are kept, the others added"
    );
    let clean = dir.join("clean");
    let c = run_into(&dir.join("p.toml"), &clean, dir);
    assert_eq!(c.status.code(), Some(0), "{}", err(&c));
    for t in ["source", "probe"] {
        assert_eq!(
            table_rows(&out.join(t), VOLATILE),
            table_rows(&clean.join(t), VOLATILE),
            "{t}"
        );
    }
}
