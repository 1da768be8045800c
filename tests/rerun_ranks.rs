//! A ranked rerun on S3: each rank sees the removals and changes of its own videos once, and the
//! tables as readers that honour the tombstones see them equal a clean local run's.

use crate::judge::err;
use crate::need_ffmpeg;
use crate::rerun::{VOLATILE, value};
use crate::util::*;
use std::path::Path;

/// A table of a downloaded run as a reader that honours the tombstones sees it: the rows of
/// every (shard, commit, video) `retired/<table>/` names are left out (what vidcurate's own
/// readers do; on a ranked run nothing compacts the shards).
fn live_rows(run: &Path, table: &str) -> Vec<String> {
    use parquet::file::reader::FileReader;
    let mut gone = std::collections::HashSet::new();
    if let Ok(rd) = std::fs::read_dir(run.join("retired").join(table)) {
        for f in rd {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(f.unwrap().path()).unwrap()).unwrap();
            for e in v["entries"].as_array().unwrap() {
                let key = |k: &str| e[k].as_str().unwrap().to_string();
                gone.insert((key("shard"), key("commit"), key("video")));
            }
        }
    }
    let mut rows = vec![];
    let mut files: Vec<_> = std::fs::read_dir(run.join(table))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    for f in files {
        let shard = format!("{table}/{}", f.file_name().unwrap().to_string_lossy());
        let reader = parquet::file::serialized_reader::SerializedFileReader::new(
            std::fs::File::open(&f).unwrap(),
        )
        .unwrap();
        let commit = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| {
                kv.iter()
                    .find(|k| k.key == "vidcurate.commit")?
                    .value
                    .clone()
            })
            .unwrap_or_default();
        let tmp = tempfile::tempdir().unwrap();
        std::fs::copy(&f, tmp.path().join("s.parquet")).unwrap();
        for r in table_rows(tmp.path(), VOLATILE) {
            let video = value(&r, "video_id").to_string();
            if !gone.contains(&(shard.clone(), commit.clone(), video)) {
                rows.push(r);
            }
        }
    }
    rows.sort();
    rows
}

/// The same edits on a run of two ranks on S3 (moto): each rank sees the removal and the label
/// of its own videos once, and the tables as readers see them equal a clean local run's.
#[test]
fn a_ranked_s3_rerun_sees_removals_and_changes_once_per_rank() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("v")).unwrap();
    let mut csv = String::from("path,id,label\n");
    for i in 0..8 {
        plain_clip(
            &dir.join(format!("v/c{i}.mp4")),
            0.6 + (i % 3) as f64 * 0.2,
            "64x36",
        );
        csv += &format!("v/c{i}.mp4,c{i},fake\n");
    }
    write(&dir.join("m.csv"), &csv);
    write(
        &dir.join("p.toml"),
        &crate::util::pipeline(
            "manifest = \"m.csv\"",
            "{ count = 2 }",
            "[output]\nflush_secs = 0\n",
        ),
    );
    let url = crate::cluster::bucket("rerun-ranks");
    let ranks = |dir: &Path| {
        for rank in 0..2 {
            let mut c = std::process::Command::new(bin());
            c.args([
                "run",
                "p.toml",
                "--out",
                &url,
                "-q",
                "--rank",
                &rank.to_string(),
                "--world",
                "2",
            ])
            .args([
                "--work-dir",
                dir.join(format!("work{rank}")).to_str().unwrap(),
            ])
            .current_dir(dir)
            .env("RUST_LOG", "warn");
            crate::cluster::s3_env(&mut c);
            let o = c.output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        }
    };
    ranks(dir);
    // A row removed, a label fixed, a row added.
    let csv = csv
        .replace("v/c3.mp4,c3,fake\n", "")
        .replace("c5,fake", "c5,real")
        + "v/c1.mp4,c8,real\n";
    write(&dir.join("m.csv"), &csv);
    ranks(dir);
    let local = dir.join("local");
    crate::cluster::download(&url, &local);
    let clean = dir.join("clean");
    let o = run_into(&dir.join("p.toml"), &clean, dir);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    for t in ["source", "probe", "frames"] {
        assert_eq!(
            live_rows(&local, t),
            table_rows(&clean.join(t), VOLATILE),
            "{t}"
        );
    }
    let mut c = std::process::Command::new(bin());
    c.args(["status", &url]).current_dir(dir);
    let status = crate::cluster::s3_env(&mut c).output().unwrap();
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("retired from probe by reruns"), "{said}");
    assert!(said.contains("every rank is complete"), "{said}");
}
