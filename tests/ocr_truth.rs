//! OCR, colour, layout and creator-added verdicts against generated ground truth: clips whose
//! every overlay (text, colour, ink box, style, timing, motion) is known, at 720p and 1080p, with
//! plain, outlined, shadowed and boxed text over busy backgrounds, plus drifting scene text.
//! Text is held to RapidOCR 1.4.4 on the same JPEGs (the models bound it); colour, position and
//! the creator-added rule to the thresholds.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::Path;
use std::process::Command;

#[test]
fn regions_match_the_drawn_overlays() {
    need_ffmpeg!();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    let corpus = d.path().join("truth");
    make_corpus(
        &corpus,
        &["--profile", "ocr-truth", "--clips", "8", "--seconds", "3"],
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        &pipeline_with(
            "manifest = \"truth/manifest.csv\"",
            "{ count = 4, jpeg_quality = 95 }",
            &[("ocr_regions", "ocr"), ("ocr_videos", "overlays")],
        ),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let rapid = root.join("data/venv-rapidocr/bin/python");
    let mut eval = Command::new("python3");
    eval.arg(root.join("scripts/eval_ocr_truth.py"))
        .arg(&run_dir)
        .arg(corpus.join("ground_truth.jsonl"));
    if rapid.exists() {
        eval.arg("--rapidocr").arg(&rapid);
    } else {
        assert!(
            std::env::var_os("VIDCURATE_ALLOW_NO_RAPIDOCR").is_some(),
            "RapidOCR reference missing: run scripts/setup.sh"
        );
    }
    let out = eval.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{m}");
    assert!(m["pairs"].as_u64().unwrap() >= 80, "{m}");
    assert!(
        m["hue_n"].as_u64().unwrap() >= 40 && m["hue_ok"].as_f64().unwrap() >= 0.95,
        "hue: {m}"
    );
    assert!(m["center_ok"].as_f64().unwrap() >= 0.95, "centre: {m}");
    assert!(
        m["creator_n"].as_u64().unwrap() >= 80 && m["creator_ok"].as_f64().unwrap() >= 0.95,
        "creator_added: {m}"
    );
    if let Some(r) = m["rapidocr_exact"].as_f64() {
        assert!(
            m["text_exact"].as_f64().unwrap() >= r,
            "text read exactly less often than RapidOCR: {m}"
        );
    }
    assert!(m["text_exact"].as_f64().unwrap() >= 0.7, "{m}");

    // The per-video summary agrees with the regions: every clip has overlays on every frame.
    let coverage = column(&run_dir.join("ocr_videos"), "overlay_coverage");
    assert_eq!(coverage.len(), 8);
    assert!(
        coverage.iter().all(|c| c.parse::<f64>().unwrap() == 1.0),
        "{coverage:?}"
    );
}
