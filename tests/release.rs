//! `vidcurate release` of a split run, read back by the tools users load datasets with:
//! Hugging Face `datasets.load_dataset(DIR)` (both configs), pyarrow, DuckDB and Polars
//! (tests/readers/check_release.py, in the venv scripts/setup.sh makes).

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn readers_python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/venv-readers/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run ./scripts/setup.sh (it installs datasets, DuckDB and Polars for these tests)",
        p.display()
    );
    p
}

/// Runs `tests/readers/<script>` with the readers' Python; its stdout, after it succeeded (else
/// the test fails with what it printed).
pub(crate) fn reader<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> String {
    let o = Command::new(readers_python())
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/readers")
                .join(script),
        )
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `reader`'s stdout as one JSON value.
pub(crate) fn reader_json<S: AsRef<std::ffi::OsStr>>(
    script: &str,
    args: &[S],
) -> serde_json::Value {
    serde_json::from_str(&reader(script, args)).unwrap()
}

fn check(release: &Path, cache: &Path) -> serde_json::Value {
    reader_json("check_release.py", &[release, cache])
}

#[test]
fn a_release_loads_with_datasets_pyarrow_duckdb_and_polars() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("demo"),
        &["--clips", "8", "--seconds", "3", "--seed", "5"],
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        &pipeline_with(
            "manifest = \"demo/manifest.csv\"",
            "{ count = 4 }",
            &[("ocr_regions", "ocr"), ("shots", "shots")],
        ),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(
        &[
            "split",
            run_dir.to_str().unwrap(),
            "--stratify",
            "label",
            "--ratios",
            "60/20/20",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let split: BTreeMap<String, String> = table_rows_file(&run_dir.join("splits/default.parquet"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r["split"].clone()))
        .collect();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for s in split.values() {
        *want.entry(s.clone()).or_default() += 1;
    }
    // 8 clips and the rotated phone clip; the broken upload is rejected, so never released.
    assert_eq!(split.len(), 9, "{split:?}");
    assert!(!split.contains_key("demo_broken"));

    for mode in ["bytes", "paths"] {
        let rel = d.path().join(format!("release-{mode}"));
        let o = run(
            &[
                "release",
                run_dir.to_str().unwrap(),
                "--out",
                rel.to_str().unwrap(),
                "--frames",
                mode,
                "--rows-per-file",
                "3",
            ],
            d.path(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
        assert!(card.starts_with("---\nconfigs:\n"), "{card}");
        assert!(card.contains("| probe | probe |"), "the funnel: {card}");
        let got = check(&rel, &d.path().join("hf-cache"));
        let counts =
            |k: &str| -> BTreeMap<String, u64> { serde_json::from_value(got[k].clone()).unwrap() };
        assert_eq!(counts("splits"), want, "datasets: {got}");
        for reader in ["pyarrow", "duckdb", "polars"] {
            assert_eq!(counts(reader), want, "{reader}: {got}");
        }
        let p = counts("perturbations");
        assert_eq!(p.values().sum::<u64>(), 6 * 9, "{got}");
        assert_eq!(
            got["variants"],
            serde_json::json!([
                "first_frame",
                "halves_swapped",
                "last_frame",
                "original",
                "reversed",
                "shuffled"
            ])
        );
        let f = &got["features"];
        assert_eq!(f["video_id"], "Value('string')", "{f}");
        assert_eq!(f["label"], "Value('string')", "{f}");
        assert_eq!(f["probe_width"], "Value('uint32')", "{f}");
        assert_eq!(f["shots_shots_in_video"], "Value('uint32')", "{f}");
        assert!(f["ocr_text"].is_string());
        // Every released video has its 4 frames.
        assert!(
            got["frames_per_video"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n == 4),
            "{got}"
        );
        if mode == "bytes" {
            assert_eq!(f["frames"], "List(Image(mode=None, decode=True))", "{f}");
            // The generator draws 1280x720.
            assert_eq!(
                got["first_frame_size"],
                serde_json::json!([1280, 720]),
                "{got}"
            );
        } else {
            assert_eq!(got["first_frame_file"], true, "{got}");
        }
        // The OCR read the drawn overlays: most videos have text.
        let texts = got["ocr_text"].as_object().unwrap();
        assert!(
            texts
                .values()
                .filter(|t| !t.as_str().unwrap_or("").is_empty())
                .count()
                >= 6,
            "{texts:?}"
        );
    }
    evaluate_matches_scikit_learn(&d.path().join("release-paths"), &split);
}

/// Random predictions for every video and perturbation variant, scored by `vidcurate evaluate`
/// and by scikit-learn: the same numbers, per variant and domain, on the test split by default
/// (the predictions for the other videos left out and counted) and on every split with
/// `--split all`. `split`: video → its split, as `vidcurate split` placed it.
fn evaluate_matches_scikit_learn(rel: &Path, split: &BTreeMap<String, String>) {
    let videos: Vec<&String> = split.keys().collect();
    let mut csv = String::from("video_id,prediction,variant\n");
    let mut state: u64 = 7;
    for variant in ["original", "shuffled", "reversed"] {
        for v in &videos {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = if state >> 63 == 1 { "fake" } else { "real" };
            csv += &format!("{v},{p},{variant}\n");
        }
    }
    let preds = rel.join("preds.csv");
    write(&preds, &csv);
    for which in ["test", "all"] {
        let mut args = vec![
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--by",
            "domain",
            "--positive",
            "fake",
            "--json",
        ];
        if which == "all" {
            args.extend(["--split", "all"]);
        }
        let o = run(&args, rel);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ours: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let n = split
            .values()
            .filter(|s| which == "all" || *s == which)
            .count();
        assert_eq!(ours["split"]["name"], which);
        assert_eq!(ours["split"]["scored"], n);
        assert_eq!(ours["split"]["total"], split.len());
        assert_eq!(ours["split"]["other_predictions"], 3 * (split.len() - n));
        let theirs = reader_json(
            "check_metrics.py",
            &[
                rel.to_str().unwrap(),
                preds.to_str().unwrap(),
                "fake",
                "domain",
                which,
            ],
        );
        let theirs = theirs.as_object().unwrap();
        assert_eq!(theirs.len(), 3);
        for (variant, groups) in theirs {
            assert_eq!(groups["all"]["n"], n, "{variant}");
            for (group, m) in groups.as_object().unwrap() {
                for (k, want) in m.as_object().unwrap() {
                    let got = &ours["metrics"][variant][group][k];
                    assert!(
                        (got.as_f64().unwrap() - want.as_f64().unwrap()).abs() < 1e-9,
                        "{which} {variant}/{group}/{k}: ours {got}, scikit-learn {want}"
                    );
                }
            }
        }
        let drop = ours["f1_drop"]["shuffled"].as_f64().unwrap();
        let f1 = |v: &str| ours["metrics"][v]["all"]["f1"].as_f64().unwrap();
        assert!((drop - (f1("original") - f1("shuffled"))).abs() < 1e-12);
    }

    // Bad predictions: exit 2, and the message names the line and the value.
    let refused = |csv: &str| -> String {
        write(&preds, csv);
        let args = [
            "evaluate",
            rel.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--positive",
            "fake",
            "--split",
            "all",
        ];
        let o = run(&args, rel);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{err}");
        err
    };
    let err = refused("video_id,prediction\nnope,fake\n");
    assert!(
        err.contains("preds.csv:2") && err.contains("\"nope\""),
        "{err}"
    );
    let err = refused(&format!("video_id,prediction\n{},maybe\n", videos[0]));
    assert!(err.contains("\"maybe\" is not a label"), "{err}");
    let err = refused(&format!(
        "video_id,prediction\n{0},fake\n{0},real\n",
        videos[0]
    ));
    assert!(
        err.contains("preds.csv:3") && err.contains("a second prediction"),
        "{err}"
    );
}
