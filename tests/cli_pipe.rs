//! Every command that prints can be piped into a reader that stops early (`| head -1`,
//! `grep -m1`) and exits quietly with 0 (issue 58): here the reader is gone before the first
//! line, so the first write finds the pipe closed, every time.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::Path;

/// Runs `args` with stdout a pipe whose reader is already closed; the exit code and stderr.
fn into_closed_pipe(args: &[&str], cwd: &Path) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = std::process::Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn printing_commands_exit_0_quietly_into_a_closed_pipe() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let media = dir.join("media");
    std::fs::create_dir_all(&media).unwrap();
    plain_clip(&media.join("a.mp4"), 1.0, "64x36");
    let p = dir.join("p.toml");
    write(&p, &pipeline("dir = \"media\"", "{ count = 2 }", ""));
    let run = dir.join("run");
    let o = run_into(&p, &run, dir);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let queries = repo.join("queries/arson.toml");
    let (p, r, q) = (
        p.to_str().unwrap(),
        run.to_str().unwrap(),
        queries.to_str().unwrap(),
    );
    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["run", "--help"],
        vec!["list-stages"],
        vec!["queries", q],
        vec!["validate", p],
        vec!["run", p, "--out", r, "--dry-run"],
        vec!["run", p, "--out", r],
        vec!["status", r],
        vec!["verify", r],
        vec!["cache", "stats", r],
        vec!["rethreshold", r],
        vec!["split", r],
        vec!["reference", "--help"],
    ];
    for args in commands {
        let (code, stderr) = into_closed_pipe(&args, dir);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
}
