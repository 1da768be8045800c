//! OCR reuse across the frames of a video (issue 12), on generated clips whose text is known:
//! static backgrounds, a channel tag that stays, a caption whose text changes halfway at the same
//! place and size, and on every other clip a line drifting across. The same frames go through
//! `ocr` stages with reuse off, on and verify (and verify with window detection) in one run, so
//! the tables compare one to one.

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;

#[test]
fn reuse_reads_the_same_text_and_never_keeps_a_changed_caption() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let corpus = d.path().join("reuse");
    make_corpus(
        &corpus,
        &["--profile", "reuse", "--clips", "4", "--seconds", "4"],
    );
    let p = d.path().join("p.toml");
    let mut text = pipeline_with(
        "manifest = \"reuse/manifest.csv\"",
        "{ count = 8, jpeg_quality = 95 }",
        &[],
    );
    for mode in ["off", "on", "verify"] {
        text += &format!(
            "\n[[stages]]\nid = \"ocr_{mode}\"\ntype = \"ocr\"\ncompute = {{ reuse = \"{mode}\", det_profile = \"paddleocr\" }}\n"
        );
    }
    // Window detection, opted into: it fires on the clips with a drifting line.
    text += "\n[[stages]]\nid = \"ocr_window\"\ntype = \"ocr\"\ncompute = { reuse = \"verify\", window_detection = true, det_profile = \"paddleocr\" }\n";
    write(&p, &text);
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");

    // Reuse fired, and where verify computed everything anyway it found no difference.
    let tally = |stage: &str| counts(&run_dir, stage)["tally"].clone();
    let (on, verify) = (tally("ocr_on"), tally("ocr_verify"));
    assert!(tally("ocr_off").is_null(), "{}", tally("ocr_off"));
    assert_eq!(verify["frames"], 32, "{verify}");
    assert!(
        verify["detection_reused"].as_u64().unwrap() >= 4,
        "{verify}"
    );
    assert_eq!(verify["detection_partial"], 0, "{verify}");
    let window = tally("ocr_window");
    assert!(
        window["detection_partial"].as_u64().unwrap() >= 4,
        "{window}"
    );
    assert_eq!(window["text_mismatch"], 0, "{window}");
    assert!(
        verify["recognition_reused"].as_u64().unwrap() >= 20,
        "{verify}"
    );
    assert_eq!(verify["detection_mismatch"], 0, "{verify}");
    assert_eq!(verify["recognition_mismatch"], 0, "{verify}");
    assert_eq!(verify["text_mismatch"], 0, "{verify}");
    // `on` decides exactly as `verify` does.
    for k in [
        "frames",
        "detection_reused",
        "detection_partial",
        "lines",
        "recognition_reused",
    ] {
        assert_eq!(on[k], verify[k], "{k}: on {on} / verify {verify}");
    }
    assert!(
        stderr.contains("ocr_on: detection reused on"),
        "no reuse line in the summary: {stderr}"
    );

    // The text of every frame is the same with reuse on as from scratch.
    let texts = |stage: &str| {
        let mut v: Vec<(String, String, String)> = table_rows_file_all(&run_dir.join(stage))
            .into_iter()
            .map(|r| {
                (
                    r["video_id"].clone(),
                    r["frame_index"].clone(),
                    r["text"].clone(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let off = texts("ocr_off");
    assert!(off.len() >= 72, "{off:?}");
    assert_eq!(texts("ocr_on"), off);
    assert_eq!(texts("ocr_verify"), off);

    // Against the drawn captions: each frame shows the caption of its time, never the other.
    let truth: Vec<serde_json::Value> = std::fs::read_to_string(corpus.join("ground_truth.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let norm = |s: &str| {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .collect::<String>()
            .to_lowercase()
    };
    let mut frames: BTreeMap<(String, String), (f64, Vec<String>)> = BTreeMap::new();
    for r in table_rows_file_all(&run_dir.join("ocr_on")) {
        let e = frames
            .entry((r["video_id"].clone(), r["frame_index"].clone()))
            .or_insert((r["timestamp_secs"].parse().unwrap(), vec![]));
        e.1.push(norm(&r["text"]));
    }
    let (mut checked, mut read_when_shown) = (0, 0);
    for ((video, frame), (t, read)) in &frames {
        let captions: Vec<&serde_json::Value> = truth
            .iter()
            .filter(|o| {
                o["video_id"] == video.as_str()
                    && o["overlay"] != 0
                    && !o["moving"].as_bool().unwrap()
            })
            .collect();
        assert_eq!(captions.len(), 2, "{video}: {captions:?}");
        for c in captions {
            let shown =
                c["start_secs"].as_f64().unwrap() <= *t && *t < c["end_secs"].as_f64().unwrap();
            let found = read.contains(&norm(c["text"].as_str().unwrap()));
            assert!(
                !found || shown,
                "{video} frame {frame} at {t} s: {} read while not shown: {read:?}",
                c["text"]
            );
            read_when_shown += (found && shown) as usize;
            checked += 1;
        }
    }
    assert_eq!(checked, 64, "every frame of every clip checked");
    // Each frame shows one of the two captions; nearly all of them are read exactly.
    assert!(
        read_when_shown >= 29,
        "{read_when_shown} of 32 captions read"
    );
}
