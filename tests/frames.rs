//! Probe and frame sampling against exact ground truth: frame-numbered clips (any decoded frame
//! names its own number), the ffmpeg CLI's own output, and the facts of the real fixtures.

use crate::need_ffmpeg;
use crate::util::*;
use std::path::Path;

/// First frame whose presentation time is at or after `t` in a 25 fps clip.
fn expected_frame(t: f64) -> u32 {
    (t * 25.0 - 1e-6).ceil() as u32
}

fn frames_of(run: &Path) -> Vec<(String, u32, f64, f64, String)> {
    let ids = column(&run.join("frames"), "video_id");
    let idx = column(&run.join("frames"), "frame_index");
    let tgt = column(&run.join("frames"), "target_secs");
    let ts = column(&run.join("frames"), "timestamp_secs");
    let paths = column(&run.join("frames"), "path");
    (0..ids.len())
        .map(|i| {
            (
                ids[i].clone(),
                idx[i].parse().unwrap(),
                tgt[i].parse().unwrap(),
                ts[i].parse().unwrap(),
                paths[i].clone(),
            )
        })
        .collect()
}

#[test]
fn uniform_fps_and_range_hit_the_exact_frames_with_b_frames() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let vids = d.path().join("v");
    std::fs::create_dir_all(&vids).unwrap();
    // 8 s = 200 frames, GOP 48 with B-frames: targets land mid-GOP, so seek + decode-forward is tested.
    numbered_clip(&vids.join("n.mp4"), 8.0, 48);
    for (name, compute, expect) in [
        (
            "uniform",
            "{ mode = \"uniform\", count = 16, jpeg_quality = 95 }",
            (0..16)
                .map(|i| 8.0 * (i as f64 + 0.5) / 16.0)
                .collect::<Vec<_>>(),
        ),
        (
            "fps",
            "{ mode = \"fps\", fps = 1.5, max_frames = 16, jpeg_quality = 95 }",
            (0..12).map(|i| i as f64 / 1.5).collect(),
        ),
        (
            "fpscap",
            "{ mode = \"fps\", fps = 4.0, max_frames = 10, jpeg_quality = 95 }",
            (0..10).map(|i| 8.0 * (i as f64 + 0.5) / 10.0).collect(),
        ),
        // 2.5 s falls between frames 62 (2.48 s) and 63 (2.52 s): the range holds frames 63..=87.
        (
            "range",
            "{ mode = \"range\", start_secs = 2.5, end_secs = 3.5, jpeg_quality = 95 }",
            (63..88).map(|n| n as f64 / 25.0).collect(),
        ),
    ] {
        let p = d.path().join(format!("{name}.toml"));
        write(&p, &pipeline("dir = \"v\"", compute, ""));
        let out = d.path().join(format!("run-{name}"));
        let o = run_into(&p, &out, d.path());
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let frames = frames_of(&out);
        assert_eq!(frames.len(), expect.len(), "{name}: frame count");
        for (i, (_, idx, target, ts, path)) in frames.iter().enumerate() {
            assert_eq!(*idx as usize, i, "{name}: frames in order");
            assert!(
                (target - expect[i]).abs() < 1e-6,
                "{name}: target {target} vs {}",
                expect[i]
            );
            let want = expected_frame(expect[i]);
            assert!(
                (ts - want as f64 / 25.0).abs() < 1e-6,
                "{name}: frame {i} timestamp {ts}, want frame {want}"
            );
            assert_eq!(
                frame_number(&out.join(path)),
                want,
                "{name}: frame {i} at {target} s shows the wrong picture"
            );
        }
    }
}

#[test]
fn sampling_decodes_a_fraction_of_the_video() {
    let slides = fixture_video("slides_1080p_122s.mp4");
    let targets: Vec<f64> = (0..16).map(|i| 122.6 * (i as f64 + 0.5) / 16.0).collect();
    let (grabs, decoded) =
        vidcurate::engines::ffmpeg::grab_at_counted(&slides, &targets, Some(320)).unwrap();
    assert_eq!(grabs.len(), 16);
    // 3678 frames in all; keyframes every ~160 frames, so 16 seeks decode well under half.
    assert!(
        decoded < 3678 / 2,
        "decoded {decoded} frames of 3678 for 16 samples"
    );
    assert!(
        grabs
            .iter()
            .all(|g| g.image.width() == 320 && g.image.height() == 180)
    );
}

#[test]
fn rotation_metadata_is_applied_like_the_ffmpeg_cli() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let vids = d.path().join("v");
    std::fs::create_dir_all(&vids).unwrap();
    let plain = d.path().join("plain.mp4");
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=s=320x180:r=25:d=3",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        plain.to_str().unwrap(),
    ]);
    for deg in ["90", "180", "270"] {
        let out = vids.join(format!("r{deg}.mp4"));
        ffmpeg(&[
            "-i",
            plain.to_str().unwrap(),
            "-c",
            "copy",
            "-metadata:s:v:0",
            &format!("rotate={deg}"),
            out.to_str().unwrap(),
        ]);
    }
    let p = d.path().join("p.toml");
    write(
        &p,
        &pipeline(
            "dir = \"v\"",
            "{ mode = \"uniform\", count = 3, jpeg_quality = 95 }",
            "",
        ),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let widths = column(&run_dir.join("probe"), "width");
    let rotations = column(&run_dir.join("probe"), "rotation_deg");
    let mut seen: Vec<(String, String)> = widths.into_iter().zip(rotations).collect();
    seen.sort();
    // The tag is counter-clockwise; the players' (and our) clockwise rotation is its opposite.
    assert_eq!(
        seen,
        vec![
            ("180".into(), "270".into()),
            ("180".into(), "90".into()),
            ("320".into(), "180".into())
        ]
    );
    for (_, _, target, _, path) in frames_of(&run_dir) {
        let id = path.split('/').nth(3).unwrap().to_string();
        let ids = column(&run_dir.join("source"), "video_id");
        let paths = column(&run_dir.join("source"), "path");
        let src = &paths[ids.iter().position(|i| *i == id).unwrap()];
        let reference = d.path().join("ref.png");
        ffmpeg(&[
            "-ss",
            &format!("{target}"),
            "-i",
            src,
            "-frames:v",
            "1",
            reference.to_str().unwrap(),
        ]);
        let a = image::open(&reference).unwrap().to_rgb8();
        let b = image::open(run_dir.join(&path)).unwrap().to_rgb8();
        assert_eq!(a.dimensions(), b.dimensions(), "{src}: size after rotation");
        let diff: f64 = a
            .pixels()
            .zip(b.pixels())
            .map(|(p, q)| {
                (0..3)
                    .map(|c| (p.0[c] as f64 - q.0[c] as f64).abs())
                    .sum::<f64>()
            })
            .sum::<f64>()
            / (a.width() * a.height() * 3) as f64;
        assert!(
            diff < 4.0,
            "{src} at {target}s differs from ffmpeg's autorotated frame by {diff} per channel"
        );
    }
}

#[test]
fn probe_reports_the_fixture_facts() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("m.csv");
    write(
        &csv,
        &format!(
            "path,id,label\n{},pancake,real\n{},slides,fake\n",
            fixture_video("flipping_a_pancake.mkv").display(),
            fixture_video("slides_1080p_122s.mp4").display()
        ),
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        &pipeline("manifest = \"m.csv\"", "{ count = 4, max_side = 256 }", ""),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = table_rows(&run_dir.join("probe"), &["bit_rate", "stage_fingerprint"]);
    assert_eq!(rows.len(), 2);
    let pancake = rows
        .iter()
        .find(|r| r.starts_with("video_id=pancake"))
        .unwrap();
    for want in [
        "label=real",
        "width=426",
        "height=240",
        "fps=30.0",
        "codec=h264",
        "frame_count=310",
        "has_audio=true",
        "duration_secs=10.381",
    ] {
        assert!(
            pancake.contains(want),
            "pancake probe {pancake} lacks {want}"
        );
    }
    let slides = rows
        .iter()
        .find(|r| r.starts_with("video_id=slides"))
        .unwrap();
    for want in [
        "width=1920",
        "height=1080",
        "frame_count=3678",
        "duration_secs=122.672",
        "rotation_deg=0",
    ] {
        assert!(slides.contains(want), "slides probe {slides} lacks {want}");
    }
    // The pancake's first frames are at 0, 0.033, 0.067...: a 4-frame uniform sample of 10.381 s
    // asks for 1.2976 s and gets the frame at 1.3 s (39 / 30).
    let ts = column(&run_dir.join("frames"), "timestamp_secs");
    assert!(
        ts.iter()
            .any(|t| (t.parse::<f64>().unwrap() - 1.3).abs() < 1e-3),
        "timestamps {ts:?}"
    );
    let widths = column(&run_dir.join("frames"), "width");
    assert!(
        widths.iter().all(|w| w == "256"),
        "max_side scales the long side: {widths:?}"
    );
}
