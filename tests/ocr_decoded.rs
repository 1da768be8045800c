//! OCR reads each sampled frame as decoded, never its stored JPEG (issue 37), and the same
//! pixels whatever the run's history: handed over by the frames stage in one invocation, or
//! decoded again from the media when an earlier invocation sampled the frames. Only when the
//! media cannot be decoded again does it fall back to the JPEG, and then the summary says so.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::Path;

/// The OCR table as sorted rows (every column: text, box, colour, layout, verdicts; not the
/// fingerprint, which names the frames' JPEG quality).
fn ocr_rows(run: &Path) -> Vec<String> {
    table_rows(&run.join("ocr"), &["stage_fingerprint"])
}

/// Equal tables, or the first rows that differ.
fn same(got: &[String], want: &[String], what: &str) {
    let diff: Vec<_> = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a != b)
        .take(2)
        .collect();
    assert!(
        got.len() == want.len() && diff.is_empty(),
        "{what}: {} rows against {}; first differences: {diff:#?}",
        got.len(),
        want.len()
    );
}

fn run_ok(p: &Path, run: &Path, cwd: &Path) -> String {
    let o = run_into(p, run, cwd);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{stderr}");
    stderr
}

#[test]
fn ocr_reads_the_decoded_frame_whatever_the_history() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("truth"),
        &["--profile", "ocr-truth", "--clips", "2", "--seconds", "3"],
    );
    let src = "manifest = \"truth/manifest.csv\"";
    // Scaled down (a 720p and a 1080p clip to 640 px), so decoding again must also scale alike;
    // detected at that size (the default would raise each frame to 1308 px: the same pixels
    // compared, four times the work).
    let frames = |q: u32| format!("{{ count = 3, jpeg_quality = {q}, max_side = 640 }}");
    let with_ocr = |q: u32, extra: &str| {
        pipeline(src, &frames(q), extra)
            + "\n[[stages]]\nid = \"ocr\"\ntype = \"ocr\"\ncompute = { det_profile = \"paddleocr\" }\n"
    };

    // One invocation: the frames are handed over.
    let p = d.path().join("a.toml");
    write(&p, &with_ocr(95, ""));
    let a = d.path().join("a");
    let summary = run_ok(&p, &a, d.path());
    let reference = ocr_rows(&a);
    assert!(
        reference.len() >= 6,
        "too few regions to compare: {reference:?}"
    );
    assert!(!summary.contains("decoded again"), "{summary}");
    assert!(counts(&a, "ocr")["tally"]["frames_decoded_again"].is_null());

    // A JPEG of quality 10 changes nothing OCR reads.
    let p = d.path().join("b.toml");
    write(&p, &with_ocr(10, ""));
    let b = d.path().join("b");
    run_ok(&p, &b, d.path());
    same(&ocr_rows(&b), &reference, "JPEG quality 10");

    // Frames sampled by a first invocation, OCR added by a second: decoded again, same rows.
    let p = d.path().join("c.toml");
    write(&p, &pipeline(src, &frames(95), ""));
    let c = d.path().join("c");
    run_ok(&p, &c, d.path());
    write(&p, &with_ocr(95, ""));
    let summary = run_ok(&p, &c, d.path());
    assert_eq!(counts(&c, "ocr")["tally"]["frames_decoded_again"], 6);
    assert!(
        summary.contains("6 frames decoded again from the media"),
        "{summary}"
    );
    same(&ocr_rows(&c), &reference, "OCR added later");

    // No room to hand frames over: decoded again, same rows.
    let p = d.path().join("d.toml");
    write(&p, &with_ocr(95, "[runtime]\ndecoded_frames_mib = 0\n"));
    let e = d.path().join("d");
    run_ok(&p, &e, d.path());
    assert_eq!(counts(&e, "ocr")["tally"]["frames_decoded_again"], 6);
    same(&ocr_rows(&e), &reference, "no hand-off");

    // The media unreadable after sampling, with nothing the source compares changed: its bytes
    // damaged in place, and the run's kept digests told the file's new stat (as a filesystem
    // that keeps no change time would leave them; a file replaced is otherwise read again and
    // sampled again): the JPEGs are read, and the summary says so.
    let p = d.path().join("g.toml");
    write(&p, &pipeline(src, &frames(95), ""));
    let g = d.path().join("g");
    run_ok(&p, &g, d.path());
    for v in ["truth000", "truth001"] {
        let path = d.path().join(format!("truth/videos/{v}.mp4"));
        let meta = std::fs::metadata(&path).unwrap();
        std::fs::write(&path, vec![b'x'; meta.len() as usize]).unwrap();
        forge_kept_stat(&g, &path);
    }
    write(&p, &with_ocr(95, ""));
    let summary = run_ok(&p, &g, d.path());
    assert_eq!(counts(&g, "ocr")["tally"]["frames_from_jpeg"], 6);
    assert!(
        summary.contains(
            "6 frames read from their stored JPEG because the media could not be decoded again"
        ),
        "{summary}"
    );
    assert!(!ocr_rows(&g).is_empty());
}

/// A budget with room for one video at a time and channels that could hold all of them: the
/// frames stage waits for OCR to take a video's frames before it decodes the next, so no frame
/// is decoded twice (issue 70: the budget used to refuse the videos past it, and OCR decoded
/// them again: 48 of 640 frames on a fresh run of the e2e corpus).
#[test]
fn a_full_budget_holds_the_decoder_back_instead_of_decoding_twice() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("truth"),
        &["--profile", "ocr-truth", "--clips", "6", "--seconds", "2"],
    );
    // One 640 x 360 frame a video is 0.66 MiB: a budget of 1 MiB holds one video.
    let p = d.path().join("p.toml");
    let frames = "{ count = 1, max_side = 640 }";
    let runtime = "[runtime]\ndecoded_frames_mib = 1\nchannel_capacity = 16\n";
    write(
        &p,
        &(pipeline("manifest = \"truth/manifest.csv\"", frames, runtime)
            + "\n[[stages]]\nid = \"ocr\"\ntype = \"ocr\"\ncompute = { det_profile = \"paddleocr\" }\n"),
    );
    let run_dir = d.path().join("run");
    let (p, r) = (p.display().to_string(), run_dir.display().to_string());
    let o = run(&["run", &p, "--out", &r, "-q", "--profile"], d.path());
    let summary = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{summary}");
    let ocr = counts(&run_dir, "ocr");
    assert_eq!(ocr["computed"], 6, "{ocr}");
    assert!(ocr["tally"]["frames_decoded_again"].is_null(), "{summary}");
    assert!(!summary.contains("decoded again"), "{summary}");
    profile_adds_up(&String::from_utf8_lossy(&o.stdout), 6);
}

/// `run --profile` (issue 70): every step of the 6 frames is counted, the pool's threads' time
/// is steps plus idle within 10 %, and their lives span the run's wall time.
fn profile_adds_up(table: &str, frames: u64) {
    let row = |stage: &str, step: &str| -> Vec<f64> {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().take(2).eq([stage, step]))
            .unwrap_or_else(|| panic!("no {stage} {step} row in\n{table}"));
        (line.split_whitespace().skip(2).take(3))
            .map(|v| v.parse().unwrap())
            .collect()
    };
    for (stage, step) in [("frames", "decode"), ("frames", "jpeg"), ("ocr", "colour")] {
        assert!(row(stage, step)[0] >= 1.0, "{stage} {step}: {table}");
    }
    for step in ["det", "det.resize", "det.boxes", "rec", "cls"] {
        assert_eq!(row("ocr", step)[0], frames as f64, "{step}: {table}");
    }
    let det = row("ocr", "det");
    assert!(
        det[2] > 0.5 * det[1],
        "detection runs on the pool thread: {table}"
    );
    let line = table.lines().find(|l| l.starts_with("CPU pool:")).unwrap();
    let (life, threads, wall) = (
        number_after(line, "CPU pool: "),
        number_after(table, "; ").max(1.0),
        number_after(table, "wall "),
    );
    let share = number_after(line, "= ");
    assert!((90.0..=110.0).contains(&share), "{line}");
    assert!(
        (life / threads - wall).abs() <= 0.1 * wall,
        "{threads} threads lived {life} s over {wall} s: {table}"
    );
    let cpu = table.lines().find(|l| l.starts_with("CPU: ")).unwrap();
    assert!(
        number_after(cpu, "(") <= 102.0,
        "steps counted twice: {cpu}"
    );
}

/// Gives the digest the run `run` keeps for `media` the file's stat of now, so the source takes
/// the file as unchanged whatever its bytes.
fn forge_kept_stat(run: &std::path::Path, media: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let kept = run.join("cache/media/part-digests.jsonl");
    let m = std::fs::metadata(media).unwrap();
    let real = std::fs::canonicalize(media).unwrap().display().to_string();
    let text = std::fs::read_to_string(&kept).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["path"] == real.as_str() {
            v["dev"] = m.dev().into();
            v["ino"] = m.ino().into();
            v["size"] = m.size().into();
            v["mtime_ns"] = (m.mtime() * 1_000_000_000 + m.mtime_nsec()).into();
            v["ctime_ns"] = (m.ctime() * 1_000_000_000 + m.ctime_nsec()).into();
        }
        out += &format!("{v}\n");
    }
    std::fs::write(&kept, out).unwrap();
}
