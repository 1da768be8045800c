//! The set-up scripts' first step (issue 67): a Rust older than Cargo.toml's `rust-version` is
//! refused before anything is installed, naming the version found, the one needed and how to
//! get it; a current one passes.

use std::path::Path;
use std::process::Command;

/// `require_rust` from scripts/lib/rust_version.sh with `rustc` answering `version`.
fn require_rust(version: &str) -> std::process::Output {
    let d = tempfile::tempdir().unwrap();
    let rustc = d.path().join("rustc");
    std::fs::write(
        &rustc,
        format!("#!/bin/sh\necho 'rustc {version} (0000000 2020-01-01)'\n"),
    )
    .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(&rustc)
        .status()
        .unwrap();
    Command::new("bash")
        .args(["-c", ". scripts/lib/rust_version.sh && require_rust demo"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .env("RUSTC", &rustc)
        .output()
        .unwrap()
}

#[test]
fn an_old_rust_is_refused_first_with_the_version_needed() {
    let cargo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let need = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let o = require_rust("1.70.0");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Rust 1.70.0 found") && err.contains(&format!("needs {need} or newer")),
        "{err}"
    );
    assert!(err.contains("rustup"), "says how to get it: {err}");
    let o = require_rust(&format!("{need}.0"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = require_rust("1.99.0-nightly");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The demo's set is what the demo needs, none of the test suite's components (issue 67: demo.sh
/// installed Slurm, Prometheus, Chromium, podman and ~3 GB of venvs); the default set has them.
#[test]
fn the_demo_installs_only_what_the_demo_needs() {
    let list = |args: &[&str]| {
        let o = Command::new("bash")
            .arg("scripts/setup.sh")
            .args(args)
            .arg("--list")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let demo = list(&["--demo"]);
    let all = list(&[]);
    for needed in [
        "apt ffmpeg",
        "apt libavcodec-dev",
        "apt fonts-dejavu-core",
        "step models",
        "step pylibs",
    ] {
        assert!(demo.contains(needed), "the demo needs {needed}:\n{demo}");
    }
    let tests_only = [
        "apt slurm-wlm",
        "apt munge",
        "apt prometheus",
        "apt chromium",
        "apt podman",
        "apt mmdebstrap",
        "apt espeak-ng",
        "step labelstudio",
        "step readers",
        "step llama",
        "step rapidocr",
        "step moto",
    ];
    for t in tests_only {
        assert!(!demo.contains(t), "the demo installs {t}:\n{demo}");
        assert!(all.contains(t), "the tests need {t}:\n{all}");
    }
}
