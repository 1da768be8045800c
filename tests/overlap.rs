//! `vidcurate overlap`: releases built from generated clips (ffmpeg lavfi + drawtext) through
//! the pipeline, `split` and `release`, compared with one holding a re-encode at another size, a
//! crop and a copy under a new id of their clips; id lists; a question release whose splits
//! share items; disjoint releases; and inputs that are neither a release nor an id list.

use crate::need_ffmpeg;
use crate::util::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf";

/// A 4-second 320×180 clip of a lavfi source with a caption drawn on it.
fn clip(path: &Path, source: &str, text: &str) {
    let draw = format!(
        "drawtext=fontfile={FONT}:text={text}:fontsize=36:fontcolor=white:borderw=3:x=20+t*30:y=h-60"
    );
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &format!(
            "{source}{}s=320x180:r=25",
            if source.contains('=') { ':' } else { '=' }
        ),
        "-t",
        "4",
        "-vf",
        &draw,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        path.to_str().unwrap(),
    ]);
}

/// `src` filtered through `vf` and encoded again.
fn reencode(src: &Path, vf: &str, out: &Path) {
    ffmpeg(&[
        "-i",
        src.to_str().unwrap(),
        "-vf",
        vf,
        "-c:v",
        "libx264",
        "-crf",
        "30",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        out.to_str().unwrap(),
    ]);
}

/// A run over (id, clip, split) through probe and frames (4 a video), split by the manifest's
/// `part` column, released into `<dir>/<name>/release` with frames as `mode`.
fn release_of(dir: &Path, name: &str, rows: &[(&str, &Path, &str)], mode: &str) -> PathBuf {
    let base = dir.join(name);
    let mut csv = String::from("path,id,part\n");
    for (id, clip, part) in rows {
        csv += &format!("{},{id},{part}\n", clip.display());
    }
    write(&base.join("manifest.csv"), &csv);
    let p = base.join("p.toml");
    write(
        &p,
        &pipeline_with("manifest = \"manifest.csv\"", "{ count = 4 }", &[]),
    );
    let run_dir = base.join("run");
    let o = run_into(&p, &run_dir, &base);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = run_dir.to_str().unwrap();
    let o = run(&["split", r, "--from-column", "part"], &base);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rel = base.join("release");
    let o = run(
        &[
            "release",
            r,
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            mode,
        ],
        &base,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    rel
}

/// `overlap ARGS --json`: the exit code and the matches as (kind, against, ours, theirs).
fn overlap_json(args: &[&str], cwd: &Path) -> (i32, Vec<(String, String, String, String)>, Value) {
    let mut all = vec!["overlap"];
    all.extend(args);
    all.push("--json");
    let o = run(&all, cwd);
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = |x: &Value| x.as_str().unwrap_or("").to_string();
    let mut got: Vec<_> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let side = |w: &str| match m[format!("{w}_item")].as_str() {
                Some(i) => i.to_string(),
                None => s(&m[format!("{w}_video")]),
            };
            let against = Path::new(&s(&m["against"]))
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let (mut a, mut b) = (side("ours"), side("theirs"));
            // Between a release's own splits neither side comes first.
            if s(&m["against"]) == "(own splits)" && b < a {
                std::mem::swap(&mut a, &mut b);
            }
            (s(&m["kind"]), against, a, b)
        })
        .collect();
    got.sort();
    (code, got, v)
}

fn m(kind: &str, against: &str, ours: &str, theirs: &str) -> (String, String, String, String) {
    (kind.into(), against.into(), ours.into(), theirs.into())
}

fn refused(args: &[&str], cwd: &Path, want: &[&str]) {
    let mut all = vec!["overlap"];
    all.extend(args);
    let o = run(&all, cwd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
    }
}

#[test]
fn planted_copies_crops_and_reencodes_are_found_and_nothing_else() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let c = |n: &str| dir.join(format!("clips/{n}.mp4"));
    std::fs::create_dir_all(dir.join("clips")).unwrap();
    clip(&c("one"), "mandelbrot", "ALPHA");
    clip(&c("two"), "testsrc2", "BETA");
    clip(&c("three"), "smptebars", "GAMMA");
    clip(&c("four"), "cellauto=rule=110:seed=3", "DELTA");
    clip(
        &c("five"),
        "gradients=speed=0.03:c0=0xff2020:c1=0x2020ff:seed=5",
        "EPSILON",
    );
    clip(
        &c("six"),
        "life=mold=10:ratio=0.2:seed=6:life_color=#40a0f0:death_color=#101418",
        "ZETA",
    );
    // The planted copies: another size, a crop of 5 % a side, the same file under a new id.
    reencode(&c("one"), "scale=160:90", &c("one_small"));
    reencode(
        &c("two"),
        "crop=iw*0.9:ih*0.9,scale=320:180",
        &c("two_crop"),
    );
    reencode(&c("five"), "scale=256:144", &c("five_small"));
    std::fs::copy(c("three"), c("three_again")).unwrap();

    // Ours: five videos; the fifth clip is in train and, re-encoded, in test (a leak).
    let ours = release_of(
        dir,
        "ours",
        &[
            ("alphaVID001", &c("one"), "train"),
            ("a_two", &c("two"), "train"),
            ("a_three", &c("three"), "test"),
            ("a_five", &c("five"), "train"),
            ("a_five_small", &c("five_small"), "test"),
        ],
        "paths",
    );
    // Theirs: frames as image bytes in the rows.
    let theirs = release_of(
        dir,
        "theirs",
        &[
            ("b_small", &c("one_small"), "train"),
            ("b_crop", &c("two_crop"), "train"),
            ("b_new", &c("three_again"), "test"),
            ("b_four", &c("four"), "test"),
        ],
        "bytes",
    );
    let disjoint = release_of(
        dir,
        "disjoint",
        &[
            ("d_four", &c("four"), "train"),
            ("d_six", &c("six"), "test"),
        ],
        "paths",
    );
    let (o, t, dj) = (
        ours.to_str().unwrap(),
        theirs.to_str().unwrap(),
        disjoint.to_str().unwrap(),
    );

    let out = dir.join("found.parquet");
    let (code, got, v) = overlap_json(&[o, "--against", t, "--out", out.to_str().unwrap()], dir);
    assert_eq!(code, 1, "{v}");
    assert_eq!(
        got,
        [
            m("frames", "(own splits)", "a_five", "a_five_small"),
            m("frames", "release", "a_three", "b_new"),
            m("frames", "release", "a_two", "b_crop"),
            m("frames", "release", "alphaVID001", "b_small"),
        ],
        "{v:#}"
    );
    for x in v["matches"].as_array().unwrap() {
        // Every sampled frame found its partner, close.
        assert_eq!(x["frames_matched"], 4, "{x}");
        assert_eq!(x["frames_compared"], 4, "{x}");
        assert!(x["distance"].as_u64().unwrap() <= 8, "{x}");
    }
    assert_eq!(v["counts"]["frames"], 4);
    let rows = table_rows_file(&out);
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["kind"], "frames");

    // The table names both sides with their splits.
    let o2 = run(&["overlap", o, "--against", t], dir);
    assert_eq!(o2.status.code(), Some(1));
    let table = String::from_utf8_lossy(&o2.stdout);
    assert!(
        table.contains("train/alphaVID001") && table.contains("train/b_small"),
        "{table}"
    );
    assert!(table.contains("4/4 frames, median"), "{table}");

    // Disjoint releases: nothing, exit 0, and an empty table written with its columns.
    let empty = dir.join("none.csv");
    let (code, got, v) = overlap_json(&[dj, "--against", o, "--out", empty.to_str().unwrap()], dir);
    assert_eq!((code, got.len()), (0, 0), "{v:#}");
    let header = std::fs::read_to_string(&empty).unwrap();
    assert!(
        header.starts_with("kind,against,ours_split,ours_video"),
        "{header}"
    );
    assert_eq!(header.lines().count(), 1, "{header}");
    let o3 = run(&["overlap", dj, "--against", o], dir);
    assert_eq!(o3.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o3.stdout).contains("no overlap"));

    // Id lists: a text file of URLs and ids, and a CSV with a video_id column.
    let txt = dir.join("ids.txt");
    write(
        &txt,
        "# ids another benchmark uses\nhttps://www.youtube.com/watch?v=alphaVID001&t=5s\nzzzzzzzzzzz  # not ours\n\n",
    );
    let csv = dir.join("ids.csv");
    write(&csv, "video_id,source\na_three,other\nnot_ours,other\n");
    let (code, got, v) = overlap_json(
        &[
            o,
            "--against",
            txt.to_str().unwrap(),
            csv.to_str().unwrap(),
            "--no-leakage",
            "--no-frames",
        ],
        dir,
    );
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(
        got,
        [
            m("id", "ids.csv", "a_three", "a_three"),
            m("id", "ids.txt", "alphaVID001", "alphaVID001"),
        ]
    );

    // Neither a release nor an id list: exit 2, with what was expected.
    let bad = dir.join("bad.txt");
    write(&bad, "# a list\nhello world\n");
    refused(
        &[o, "--against", bad.to_str().unwrap()],
        dir,
        &["bad.txt:2", "\"hello world\"", "expected a release folder"],
    );
    let nocol = dir.join("nocol.csv");
    write(&nocol, "id,title\nx,y\n");
    refused(
        &[o, "--against", nocol.to_str().unwrap()],
        dir,
        &["nocol.csv", "no video_id column"],
    );
    std::fs::create_dir_all(dir.join("folder")).unwrap();
    refused(
        &[o, "--against", dir.join("folder").to_str().unwrap()],
        dir,
        &["not a release"],
    );
    refused(&[txt.to_str().unwrap()], dir, &["not a release folder"]);
    refused(&[o, "--out", "x.json"], dir, &[".csv or .parquet"]);
}

#[test]
fn items_shared_between_splits_are_leakage() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    // Two videos, each with the same three drafted items (the fake model answers alike).
    let (_server, run_dir) = crate::questions::question_run(dir.path(), 2);
    let r = run_dir.to_str().unwrap();
    let o = run(
        &["split", r, "--ratios", "50/50", "--names", "train,test"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rel = dir.path().join("release");
    let o = run(
        &[
            "release",
            r,
            "--out",
            rel.to_str().unwrap(),
            "--frames",
            "none",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, got, v) = overlap_json(&[rel.to_str().unwrap()], dir.path());
    assert_eq!(code, 1, "{v:#}");
    // One match a level: each item with its twin (the same question) in the other split;
    // the three levels' questions are not alike.
    let question: std::collections::HashMap<String, String> =
        table_rows_file_all(&rel.join("questions"))
            .into_iter()
            .map(|r| (r["item_id"].clone(), r["question"].clone()))
            .collect();
    assert_eq!(question.len(), 6, "{question:?}");
    assert_eq!(got.len(), 3, "{v:#}");
    for x in v["matches"].as_array().unwrap() {
        assert_eq!(x["kind"], "question");
        assert_ne!(x["ours_split"], x["theirs_split"], "{x}");
        assert_ne!(x["ours_video"], x["theirs_video"], "{x}");
        assert_eq!(x["similarity"], 1.0, "{x}");
        let q = |k: &str| question[x[k].as_str().unwrap()].clone();
        assert_eq!(q("ours_item"), q("theirs_item"), "{x}");
    }
    // With the splits' check off and nothing to compare against, nothing is found.
    let (code, got, _) = overlap_json(&[rel.to_str().unwrap(), "--no-leakage"], dir.path());
    assert_eq!((code, got.len()), (0, 0));
}
