//! The build script: the commit the binary is built from, for `vidcurate --version`. From
//! `VIDCURATE_COMMIT` when it is set (an image build has no `.git` and passes it as a build
//! argument), else from git; "unknown" when neither can say.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=VIDCURATE_COMMIT");
    let from_git = || {
        let o = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = std::env::var("VIDCURATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown".into());
    // The commit moves with HEAD and the branch it names. Only files that exist are named: a
    // missing one would run this script (and rebuild the crate) on every build.
    let mut watch = vec![".git/HEAD".to_string(), ".git/packed-refs".to_string()];
    if let Ok(head) = std::fs::read_to_string(".git/HEAD")
        && let Some(r) = head.strip_prefix("ref: ")
    {
        watch.push(format!(".git/{}", r.trim()));
    }
    for p in watch.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
    println!("cargo:rustc-env=VIDCURATE_COMMIT={commit}");
}
