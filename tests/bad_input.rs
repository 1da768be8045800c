//! Bad input never stops the run: each broken file becomes a reject row with a clear reason, the
//! good videos are processed, and the exit code says something was rejected.

use crate::need_ffmpeg;
use crate::util::*;

#[test]
fn broken_files_are_rejected_and_the_run_goes_on() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    plain_clip(&v.join("good.mp4"), 2.0, "160x120");
    std::fs::write(v.join("empty.mp4"), b"").unwrap();
    std::fs::write(
        v.join("text.mp4"),
        b"this is not a video at all, just some text\n",
    )
    .unwrap();
    let good = std::fs::read(v.join("good.mp4")).unwrap();
    std::fs::write(v.join("truncated.mp4"), &good[..good.len() / 3]).unwrap();
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "sine=d=1",
        "-c:a",
        "aac",
        v.join("audio.mp4").to_str().unwrap(),
    ]);
    std::fs::copy(fixtures().join("ocr/ch_en_num.jpg"), v.join("photo.mp4")).unwrap();
    // A truncated file whose header survives (moov first): the frames past the cut are missing.
    let fast = d.path().join("fast.mp4");
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=s=160x120:r=25:d=6",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-movflags",
        "+faststart",
        fast.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&fast).unwrap();
    std::fs::write(v.join("cut.mp4"), &bytes[..bytes.len() / 2]).unwrap();

    let p = d.path().join("p.toml");
    write(&p, &pipeline("dir = \"v\"", "{ count = 8 }", ""));
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "exit code 3 = done with rejects; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let rows = table_rows(
        &run_dir.join("rejects"),
        &["rejected_at", "stage_fingerprint", "video_id"],
    );
    let reason_of = |file: &str| {
        rows.iter()
            .find(|r| r.contains(&format!("/v/{file}")))
            .unwrap_or_else(|| panic!("no reject for {file}: {rows:#?}"))
            .clone()
    };
    assert!(reason_of("empty.mp4").contains("reason=empty_file"));
    assert!(reason_of("text.mp4").contains("reason=unreadable"));
    assert!(reason_of("truncated.mp4").contains("reason=unreadable"));
    assert!(reason_of("audio.mp4").contains("reason=audio_only"));
    assert!(reason_of("photo.mp4").contains("reason=still_image"));
    let cut = reason_of("cut.mp4");
    assert!(
        cut.contains("stage=frames") && cut.contains("reason=truncated"),
        "{cut}"
    );
    assert_eq!(rows.len(), 6, "{rows:#?}");
    // The good clip went all the way through.
    assert_eq!(column(&run_dir.join("frames"), "frame_index").len(), 8);
}

#[test]
fn manifest_problems_are_rejects_with_the_line() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    plain_clip(&d.path().join("a.mp4"), 1.0, "160x120");
    plain_clip(&d.path().join("b.mp4"), 1.0, "160x120");
    write(
        &d.path().join("m.jsonl"),
        "{\"path\": \"a.mp4\", \"label\": \"fake\", \"lang\": \"en\"}\n\
         {\"path\": \"missing.mp4\", \"label\": \"real\"}\n\
         not json\n\
         {\"path\": \"https://example.com/v.mp4\", \"label\": \"real\"}\n\
         {\"label\": \"real\"}\n\
         {\"path\": \"a.mp4\", \"label\": \"dup\", \"score\": 3}\n\
         {\"path\": \"b.mp4\", \"id\": \"../../x\", \"label\": \"fake\"}\n\
         {\"path\": \"b.mp4\", \"id\": \"a/b\", \"label\": \"fake\"}\n\
         {\"path\": \"b.mp4\", \"id\": \"tab\\there\", \"label\": \"fake\"}\n\
         {\"path\": \"b.mp4\", \"id\": \"..\", \"label\": \"fake\"}\n\
         {\"path\": \"b.mp4\", \"id\": \"b..1\", \"label\": \"fake\", \"lang\": \"en\"}\n",
    );
    let p = d.path().join("p.toml");
    write(&p, &pipeline("manifest = \"m.jsonl\"", "{ count = 2 }", ""));
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rejects = table_rows(
        &run_dir.join("rejects"),
        &["rejected_at", "stage_fingerprint"],
    );
    let has = |line: usize, reason: &str| {
        rejects.iter().any(|r| {
            r.contains(&format!("m.jsonl:{line}")) && r.contains(&format!("reason={reason}"))
        })
    };
    assert!(has(2, "missing_file"), "{rejects:#?}");
    assert!(has(3, "bad_manifest_line"), "{rejects:#?}");
    assert!(has(4, "url_not_local"), "{rejects:#?}");
    assert!(has(5, "missing_path"), "{rejects:#?}");
    assert!(has(6, "duplicate_id"), "{rejects:#?}");
    // Ids that cannot name a file are refused at their line; the run goes on (it used to stop
    // at the frames stage with "bad store path").
    for line in 7..=10 {
        assert!(has(line, "unsafe_id"), "line {line}: {rejects:#?}");
    }
    assert_eq!(rejects.len(), 9, "{rejects:#?}");
    // Extra columns (union of keys, in first-seen order) are carried into every table.
    let frames = table_rows(&run_dir.join("frames"), &[]);
    // a.mp4 and b.mp4 (id `b..1`: dots inside an id are fine), two frames each.
    assert_eq!(frames.len(), 4, "{frames:#?}");
    assert!(
        frames.iter().any(|r| r.contains("video_id=b..1")),
        "{frames:#?}"
    );
    assert!(
        frames
            .iter()
            .all(|r| r.contains("label=fake") && r.contains("lang=en") && r.contains("score=null")),
        "{frames:#?}"
    );
}

/// A manifest column named like a stage's own column would sit beside it in that stage's table:
/// refused before any work, naming the column and the stage.
#[test]
fn a_manifest_column_named_like_a_stage_column_is_a_config_error() {
    let d = tempfile::tempdir().unwrap();
    write(&d.path().join("a.mp4"), "not read");
    write(
        &d.path().join("m.csv"),
        "path,label,width\na.mp4,fake,640\n",
    );
    let p = d.path().join("p.toml");
    write(&p, &pipeline("manifest = \"m.csv\"", "{ count = 2 }", ""));
    let o = run_into(&p, &d.path().join("run"), d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("manifest column `width`") && err.contains("stage `probe`"),
        "{err}"
    );
    assert!(!d.path().join("run/probe").exists());
}

/// Thousands of bad manifest lines must not print thousands of warnings: the first few per
/// reason, then one count; every reject is still a row.
#[test]
fn repeated_rejects_are_summarised_by_reason_in_the_log() {
    let d = tempfile::tempdir().unwrap();
    let mut m = String::from("path,label\n");
    for i in 0..20 {
        m += &format!("missing{i}.mp4,fake\n");
    }
    write(&d.path().join("m.csv"), &m);
    let p = d.path().join("p.toml");
    write(&p, &pipeline("manifest = \"m.csv\"", "{ count = 2 }", ""));
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert_eq!(err.matches("Source rejected an entry.").count(), 5, "{err}");
    assert!(
        err.contains("15 more rejected for this reason (20 in all"),
        "{err}"
    );
    assert_eq!(column(&run_dir.join("rejects"), "video_id").len(), 20);
}

#[test]
fn a_missing_run_directory_is_named_once_with_its_error() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no-such-run");
    let o = run(&["status", missing.to_str().unwrap()], d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no-such-run: no such run directory"), "{err}");
    let o = run(&["gc", missing.to_str().unwrap()], d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    // The cause is said once: the message already holds it.
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}
