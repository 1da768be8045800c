//! `vidcurate split` on a real run: only selected videos (not the rejected ones), each group in
//! one split, strata at their shares, the same split for the same seed, clear errors.

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

const VIDEOS: usize = 120;

/// `splits/<name>.parquet` as video → (split, stratum, group).
fn read_split(run: &Path, name: &str) -> BTreeMap<String, (String, String, String)> {
    table_rows_file(&run.join(format!("splits/{name}.parquet")))
        .into_iter()
        .map(|r| {
            (
                r["video_id"].clone(),
                (r["split"].clone(), r["stratum"].clone(), r["group"].clone()),
            )
        })
        .collect()
}

fn split(run: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("split")
        .arg(run)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `m.csv` in `dir` through the local source and `stages`, expecting exit `code`.
fn run_manifest(dir: &Path, stages: &str, code: i32) -> std::path::PathBuf {
    let p = dir.join("p.toml");
    write(
        &p,
        &format!("name = \"s\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\n{stages}"),
    );
    let run = dir.join("run");
    let o = run_into(&p, &run, dir);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    run
}

const PROBE: &str = "\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n";

#[test]
fn grouped_stratified_splits_of_the_selected_videos() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let clip = d.path().join("c.mp4");
    plain_clip(&clip, 1.0, "64x36");
    std::fs::write(d.path().join("broken.mp4"), b"not a video").unwrap();
    // A third fake, two thirds real; channels of 4 videos each.
    let mut csv = String::from("path,id,label,channel\n");
    for i in 0..VIDEOS {
        let label = if i % 3 == 0 { "fake" } else { "real" };
        csv += &format!("c.mp4,v{i:03},{label},ch{:02}\n", i / 4);
    }
    csv += "broken.mp4,bad0,fake,ch00\nbroken.mp4,bad1,real,ch99\n";
    write(&d.path().join("m.csv"), &csv);
    let run = run_manifest(d.path(), PROBE, 3);

    let args = [
        "--stratify",
        "label",
        "--group",
        "channel",
        "--seed",
        "13",
        "--name",
        "g",
    ];
    let o = split(&run, &args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("largest deviation"), "{out}");
    let g = read_split(&run, "g");
    // Rejected videos are not selected, so not split.
    assert_eq!(g.len(), VIDEOS);
    assert!(!g.contains_key("bad0") && !g.contains_key("bad1"));
    // No channel in two splits.
    let mut home: HashMap<&str, &str> = HashMap::new();
    for (v, (s, _, ch)) in &g {
        assert_eq!(
            *home.entry(ch).or_insert(s),
            s.as_str(),
            "{v}: channel {ch} split"
        );
    }
    // Shares within one channel (4 videos) of 84/12/24.
    for (name, want) in [("train", 84.0), ("validation", 12.0), ("test", 24.0)] {
        let n = g.values().filter(|(s, _, _)| s == name).count() as f64;
        assert!((n - want).abs() <= 4.0, "{name}: {n} videos\n{out}");
    }
    // Same seed, same split; another seed, another.
    assert_eq!(split(&run, &args).status.code(), Some(0));
    assert_eq!(read_split(&run, "g"), g);
    let mut other = args.to_vec();
    other[5] = "14";
    assert_eq!(split(&run, &other).status.code(), Some(0));
    assert_ne!(read_split(&run, "g"), g);

    // Without groups every split × label count is within one video of its target.
    let o = split(&run, &["--stratify", "label", "--name", "plain"]);
    assert!(o.status.success());
    let plain = read_split(&run, "plain");
    for label in ["fake", "real"] {
        let total = plain.values().filter(|(_, st, _)| st == label).count() as f64;
        for (name, share) in [("train", 0.7), ("validation", 0.1), ("test", 0.2)] {
            let n = plain
                .values()
                .filter(|(s, st, _)| s == name && st == label)
                .count() as f64;
            assert!(
                (n - share * total).abs() < 1.0,
                "{name} × {label}: {n} of {total}"
            );
        }
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("splits/plain.json")).unwrap()).unwrap();
    assert!(report["max_deviation"].as_f64().unwrap() < 1.0, "{report}");

    // A column the source table lacks: exit 2, the column named, the ones there listed.
    let o = split(&run, &["--stratify", "domain"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no column `domain`") && err.contains("label"),
        "{err}"
    );
    // A source column that is empty for every video (a local source has no channels): exit 2,
    // not 120 groups of one that protect nothing.
    for (flag, says) in [("--group", "grouped"), ("--stratify", "stratified")] {
        let o = split(&run, &[flag, "channel_id"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "{flag} channel_id: the column is empty for every video"
            )) && err.contains(&format!("nothing would be {says}")),
            "{err}"
        );
    }
    let o = split(&run, &["--ratios", "70/30", "--names", "a,b,c"]);
    assert_eq!(o.status.code(), Some(2));
    // --dedup without a dedup stage says what to add.
    let o = split(&run, &["--dedup"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("needs a `dedup` stage"), "{err}");
}

/// A re-upload (cropped by 8 %, scaled down, re-encoded at a low quality) of one clip is found
/// by the dedup stage's frame hashes: it lands in its original's split, or is dropped; clips of
/// other footage are not joined to anything.
#[test]
fn near_duplicates_stay_together_or_are_dropped() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let v = d.path().join("v");
    std::fs::create_dir_all(&v).unwrap();
    let make = |args: &[&str], name: &str| {
        let mut a: Vec<&str> = vec![];
        a.extend_from_slice(args);
        let out = v.join(name);
        a.extend(["-pix_fmt", "yuv420p", out.to_str().unwrap()]);
        ffmpeg(&a);
    };
    make(
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=640x360:rate=25:duration=3",
        ],
        "a_orig.mp4",
    );
    let orig = v.join("a_orig.mp4");
    make(
        &[
            "-i",
            orig.to_str().unwrap(),
            "-vf",
            "crop=iw*0.92:ih*0.92,scale=480:270",
            "-crf",
            "35",
        ],
        "b_reupload.mp4",
    );
    make(
        &[
            "-f",
            "lavfi",
            "-i",
            "mandelbrot=size=640x360:rate=25",
            "-t",
            "3",
        ],
        "c_fractal.mp4",
    );
    make(
        &[
            "-f",
            "lavfi",
            "-i",
            "life=size=640x360:rate=25:mold=10:seed=3",
            "-t",
            "3",
        ],
        "d_life.mp4",
    );
    make(
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=640x360:rate=25:duration=3",
        ],
        "e_testsrc.mp4",
    );
    make(
        &[
            "-f",
            "lavfi",
            "-i",
            "smptehdbars=size=640x360:rate=25",
            "-t",
            "3",
        ],
        "f_bars.mp4",
    );
    let mut csv = String::from("path,id\n");
    for n in [
        "a_orig",
        "b_reupload",
        "c_fractal",
        "d_life",
        "e_testsrc",
        "f_bars",
    ] {
        csv += &format!("v/{n}.mp4,{n}\n");
    }
    write(&d.path().join("m.csv"), &csv);
    let stages = "\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = { count = 6 }\n\n[[stages]]\nid = \"dedup\"\ntype = \"dedup\"\n";
    let run = run_manifest(d.path(), &format!("{PROBE}{stages}"), 0);

    let cluster = |name: &str| -> BTreeMap<String, (String, String)> {
        table_rows_file(&run.join(format!("splits/{name}.parquet")))
            .into_iter()
            .map(|r| {
                (
                    r["video_id"].clone(),
                    (r["split"].clone(), r["duplicate_cluster"].clone()),
                )
            })
            .collect()
    };
    // Seeds differ in where groups go; the pair is together under every one.
    for seed in ["1", "2", "3", "4", "5"] {
        let o = split(
            &run,
            &[
                "--dedup", "--ratios", "50/50", "--names", "x,y", "--seed", seed, "--name", "j",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("1 near-duplicate clusters"), "{out}");
        let c = cluster("j");
        assert_eq!(c["a_orig"].0, c["b_reupload"].0, "seed {seed}: {c:?}");
        assert_eq!(c["a_orig"].1, "a_orig");
        assert_eq!(c["b_reupload"].1, "a_orig");
        for other in ["c_fractal", "d_life", "e_testsrc", "f_bars"] {
            assert_eq!(c[other].1, "null", "{other} joined a cluster: {c:?}");
        }
    }
    let o = split(&run, &["--drop-duplicates", "--name", "one"]);
    assert!(o.status.success());
    let c = cluster("one");
    assert_eq!(c.len(), 5);
    assert!(c.contains_key("a_orig") && !c.contains_key("b_reupload"));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("splits/one.json")).unwrap()).unwrap();
    assert_eq!(
        report["dropped_duplicates"],
        serde_json::json!(["b_reupload"])
    );
}

/// A dataset's own splits kept as they are, and MVFNDB's category-test-split: the same number
/// of test videos in every label × category cell.
#[test]
fn a_datasets_own_splits_and_the_balanced_category_test_split() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    plain_clip(&d.path().join("c.mp4"), 1.0, "64x36");
    let cats = ["event_hp", "event_np", "knowledge"];
    let mut csv = String::from("path,id,label,category,split\n");
    let mut truth = BTreeMap::new();
    for i in 0..60 {
        let label = if i % 2 == 0 { "fake" } else { "real" };
        // Six label × category cells of 10 videos each.
        let cat = cats[(i / 2) % 3];
        let split = ["train", "train", "train", "valid", "test"][i % 5];
        csv += &format!("c.mp4,v{i:02},{label},{cat},{split}\n");
        truth.insert(format!("v{i:02}"), split.to_string());
    }
    write(&d.path().join("m.csv"), &csv);
    let run = run_manifest(d.path(), PROBE, 0);

    let o = split(&run, &["--from-column", "split", "--name", "own"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let own = read_split(&run, "own");
    assert_eq!(own.len(), 60);
    for (id, (s, _, _)) in &own {
        assert_eq!(s, &truth[id], "{id}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("splits/own.json")).unwrap()).unwrap();
    assert_eq!(
        report["names"],
        serde_json::json!(["train", "test", "valid"])
    );

    let o = split(
        &run,
        &[
            "--stratify",
            "label,category",
            "--balanced-test",
            "max",
            "--ratios",
            "90/0/10",
            "--name",
            "cat",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cat = read_split(&run, "cat");
    let mut test: BTreeMap<String, usize> = BTreeMap::new();
    for (s, stratum, _) in cat.values() {
        if s == "test" {
            *test.entry(stratum.clone()).or_default() += 1;
        }
    }
    assert_eq!(test.len(), 6, "{test:?}\n{out}");
    assert!(
        test.values().all(|n| *n == 10),
        "every cell has 10 test videos: {test:?}"
    );
    // Asked for more than a cell has: the error names the cell.
    let o = split(
        &run,
        &[
            "--stratify",
            "label,category",
            "--balanced-test",
            "11",
            "--name",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("has only 10 video(s)"), "{e}");
    // A column with a missing value cannot keep its splits.
    let o = split(&run, &["--from-column", "nope", "--name", "y"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A split made before videos left the run (issue 66): the dry run names the videos a manifest
/// edit removes, `status` names the split and the command that makes it again, `release` says
/// in its summary and its card how many it left out; the split made again by that command is
/// current.
#[test]
fn a_split_older_than_the_run_is_named_until_it_is_made_again() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    plain_clip(&d.path().join("c.mp4"), 0.6, "64x36");
    let csv = |skip: &[usize]| {
        let mut s = String::from("path,id,label\n");
        for i in (0..6).filter(|i| !skip.contains(i)) {
            s += &format!("c.mp4,v{i},{}\n", if i % 2 == 0 { "fake" } else { "real" });
        }
        s
    };
    write(&d.path().join("m.csv"), &csv(&[]));
    let run = run_manifest(d.path(), PROBE, 0);
    let o = split(
        &run,
        &["--ratios", "50/50", "--names", "a,b", "--name", "s"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let status = |want: i32| {
        let o = Command::new(bin())
            .arg("status")
            .arg(&run)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(want));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    assert!(!status(0).contains("split `s`"));

    write(&d.path().join("m.csv"), &csv(&[1, 4]));
    let dry = Command::new(bin())
        .args(["run", "p.toml", "--out", run.to_str().unwrap(), "--dry-run"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&dry.stdout).to_string() + &String::from_utf8_lossy(&dry.stderr);
    assert!(said.contains("source: leaving the run: v1, v4"), "{said}");
    run_manifest(d.path(), PROBE, 0);
    let said = status(0);
    let again = format!(
        "vidcurate split {} --ratios 50/50 --names a,b --name s",
        run.display()
    );
    assert!(
        said.contains("split `s`: 2 of its 6 videos are no longer selected by the run")
            && said.contains(&format!("Make it again: {again}")),
        "{said}"
    );
    let rel = d.path().join("rel");
    let o = Command::new(bin())
        .arg("release")
        .arg(&run)
        .args(["--split", "s", "--out", rel.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("left out: 2 videos of split `s`"), "{out}");
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains("2 videos of split `s` are no longer selected"),
        "{card}"
    );

    // The command status printed makes it current.
    let args: Vec<&str> = again.split(' ').skip(1).collect();
    let o = Command::new(bin()).args(&args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read_split(&run, "s").len(), 4);
    assert!(!status(0).contains("split `s`"));
}

/// A dataset that grows (issue 69): made again under its name, a split keeps every video it held
/// where it was, whatever left or came; new videos go toward the targets, a new video of a
/// placed group where its group is; `--fresh` or changed settings start over, and say so.
#[test]
fn a_split_made_again_keeps_its_videos_where_they_were() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    plain_clip(&d.path().join("c.mp4"), 0.6, "64x36");
    // 40 videos in 8 channels of 5; then some leave and 12 come (one of them in channel 0).
    let csv = |ids: &mut dyn Iterator<Item = usize>| {
        let mut s = String::from("path,id,label,channel\n");
        for i in ids {
            let label = if i % 2 == 0 { "fake" } else { "real" };
            s += &format!("c.mp4,v{i:03},{label},ch{}\n", (i % 40) / 5);
        }
        s
    };
    write(&d.path().join("m.csv"), &csv(&mut (0..40)));
    let run = run_manifest(d.path(), PROBE, 0);
    let args = ["--stratify", "label", "--group", "channel", "--name", "v"];
    let o = split(&run, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = read_split(&run, "v");

    // v001 and v017 leave, v040..v051 come: v040..v044 are channel 0's.
    let kept = (0..40).filter(|i| ![1, 17].contains(i));
    write(&d.path().join("m.csv"), &csv(&mut kept.chain(40..52)));
    run_manifest(d.path(), PROBE, 0);
    let o = split(&run, &args);
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let second = read_split(&run, "v");
    for (id, (s, _, _)) in &first {
        if let Some((now, _, _)) = second.get(id) {
            assert_eq!(now, s, "{id} moved from {s} to {now}");
        }
    }
    assert!(
        said.contains(
            "against the split `v` made before: 38 kept where they were, 0 moved, 12 added, 2 left"
        ),
        "{said}"
    );
    assert_eq!(
        second["v040"].0, first["v000"].0,
        "a new video of channel 0 goes where it is"
    );
    let per_split = |m: &BTreeMap<String, (String, String, String)>| {
        let mut n = BTreeMap::<String, usize>::new();
        for (s, _, _) in m.values() {
            *n.entry(s.clone()).or_default() += 1;
        }
        n
    };
    let n = per_split(&second);
    assert!(
        n["train"] >= 30 && n["test"] >= 8,
        "new videos go toward the targets: {n:?}"
    );

    // Asked for, a fresh split: the report says so.
    let o = split(&run, &[&args[..], &["--fresh"]].concat());
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(said.contains("(made fresh: --fresh)"), "{said}");
    let o = split(&run, &[&args[..], &["--seed", "7"]].concat());
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(said.contains("(made fresh: --seed changed)"), "{said}");
}
