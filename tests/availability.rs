//! Availability of a release's videos: `manifest.parquet` (each video's URL, media SHA-256 and
//! duration, checked here against the media with sha2 and the ffprobe CLI), `vidcurate
//! rehydrate` against a local server that keeps, replaces and deletes videos, and `vidcurate
//! takedown`, after which `datasets` still loads every config with the video gone from every
//! file.

use crate::fake_http::{FakeServer, Request, Response};
use crate::judge::err;
use crate::need_ffmpeg;
use crate::questions::split_and_release;
use crate::release::readers_python;
use crate::util::*;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The container duration as the ffprobe CLI reports it.
fn ffprobe_secs(file: &Path) -> f64 {
    let o = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "ffprobe: {}", err(&o));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// Every file of a folder and its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// The `video_id` cell of each record of a TSV (quoted cells may hold newlines).
fn tsv_video_ids(tsv: &[u8]) -> Vec<String> {
    let mut r = csv::ReaderBuilder::new().delimiter(b'\t').from_reader(tsv);
    let col = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "video_id")
        .unwrap();
    r.records()
        .map(|rec| rec.unwrap()[col].to_string())
        .collect()
}

fn manifest_rows(rel: &Path) -> Vec<BTreeMap<String, String>> {
    table_rows_file(&rel.join("manifest.parquet"))
}

/// Each config's split → video ids, as `datasets.load_dataset` reads them.
fn loaded(rel: &Path, cache: &Path) -> serde_json::Value {
    let script = r#"
import json, sys
from datasets import load_dataset
out = {}
for config in ["default", "perturbations", "questions"]:
    ds = load_dataset(sys.argv[1], config, cache_dir=sys.argv[2])
    out[config] = {s: sorted(ds[s]["video_id"]) for s in ds}
print(json.dumps(out))
"#;
    let o = Command::new(readers_python())
        .args(["-c", script])
        .arg(rel)
        .arg(cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "datasets: {}", err(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `num_examples` of a config's split in the card's YAML.
fn yaml_examples(card: &str, config: &str, split: &str) -> u64 {
    let info = &card[card.find("dataset_info:").unwrap()..];
    let at = info.find(&format!("- config_name: {config}\n")).unwrap();
    let block = &info[at..];
    let s = block.find("  splits:\n").unwrap();
    let entry = &block[s + block[s..].find(&format!("  - name: {split}\n")).unwrap()..];
    let n = entry.find("num_examples: ").unwrap() + "num_examples: ".len();
    entry[n..].lines().next().unwrap().parse().unwrap()
}

#[test]
fn a_release_lists_its_media_and_a_takedown_removes_a_video_everywhere() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let (_server, run_dir) = crate::questions::question_run(dir.path(), 4);
    let rel = dir.path().join("release");
    split_and_release(&run_dir, &rel, dir.path(), &["--harness", "vlmevalkit"]);

    // The manifest: one row per released video, the media's SHA-256 and duration.
    let data: BTreeMap<String, String> = files(&rel)
        .keys()
        .filter(|p| p.starts_with("data"))
        .flat_map(|p| table_rows_file(&rel.join(p)))
        .map(|r| (r["video_id"].clone(), r["split"].clone()))
        .collect();
    // Which file is which video, as the source listed them.
    let media_of: BTreeMap<String, String> = table_rows_file_all(&run_dir.join("source"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r["path"].clone()))
        .collect();
    let rows = manifest_rows(&rel);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let media = Path::new(&media_of[&r["video_id"]]);
        assert!(media.starts_with(dir.path().join("v")), "{media_of:?}");
        assert_eq!(
            r["media_sha256"],
            sha256_hex(&std::fs::read(media).unwrap()),
            "{r:?}"
        );
        let secs: f64 = r["duration_secs"].parse().unwrap();
        assert!((secs - ffprobe_secs(media)).abs() < 1e-3, "{r:?}");
        assert_eq!(r["split"], data[&r["video_id"]]);
        assert_eq!(r["url"], "null", "a local source has no URL");
    }
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(
        card.contains("\n## Availability\n\n`manifest.parquet` lists the 4 videos"),
        "{card}"
    );

    // An unknown id: exit 2, named, and not one byte changes.
    let before = files(&rel);
    let o = run(&["takedown", rel.to_str().unwrap(), "nosuch"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("`nosuch`"), "{}", err(&o));
    assert_eq!(files(&rel), before);

    // A train video (train keeps one, so every split still has rows).
    let victim = data.iter().find(|(_, s)| *s == "train").unwrap().0.clone();
    let before_loaded = loaded(&rel, &dir.path().join("hf-cache-1"));
    let o = run(
        &[
            "takedown",
            rel.to_str().unwrap(),
            &victim,
            "--reason",
            "owner asked",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));

    // Gone from every Parquet file, its frames folder too; the others keep theirs.
    let after = files(&rel);
    for p in after
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
    {
        let rows = table_rows_file(&rel.join(p));
        assert!(
            !rows.iter().any(|r| r.get("video_id") == Some(&victim)),
            "{}",
            p.display()
        );
    }
    // And from the VLMEvalKit export (its TSVs have a video_id column).
    let tsvs: Vec<&PathBuf> = after
        .keys()
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .collect();
    // A TSV pair per split: the train pair loses the video, the others stay as they were.
    assert_eq!(tsvs.len(), 6, "{:?}", after.keys());
    for p in tsvs {
        let (was, now) = (tsv_video_ids(&before[p]), tsv_video_ids(&after[p]));
        let name = p.file_name().unwrap().to_string_lossy();
        if !name.starts_with("release_train") {
            assert!(!was.contains(&victim), "{}", p.display());
            assert_eq!(now, was, "{}", p.display());
            continue;
        }
        assert!(was.contains(&victim), "{}", p.display());
        assert!(!now.is_empty() && !now.contains(&victim), "{}", p.display());
        let others: Vec<&String> = was.iter().filter(|v| **v != victim).collect();
        assert_eq!(now.iter().collect::<Vec<_>>(), others, "{}", p.display());
    }
    // No text file names it but the two that record its removal.
    for (p, bytes) in &after {
        let text = ["json", "jsonl", "yaml", "py", "csv", "txt", "md"]
            .iter()
            .any(|e| p.extension().is_some_and(|x| x == *e));
        let records = p == Path::new("README.md") || p == Path::new("takedowns.jsonl");
        if text && !records {
            assert!(
                !String::from_utf8_lossy(bytes).contains(victim.as_str()),
                "{}",
                p.display()
            );
        }
    }
    assert!(!rel.join("frames").join(&victim).exists());
    assert!(
        after
            .keys()
            .all(|p| !p.starts_with(Path::new("frames").join(&victim)))
    );
    for other in data.keys().filter(|v| **v != victim) {
        assert!(rel.join("frames").join(other).is_dir(), "{other}");
    }
    assert_eq!(manifest_rows(&rel).len(), 3);

    // datasets loads every config, without the video and with the others untouched.
    let got = loaded(&rel, &dir.path().join("hf-cache-2"));
    for (config, splits) in before_loaded.as_object().unwrap() {
        for (split, ids) in splits.as_object().unwrap() {
            let want: Vec<&serde_json::Value> = ids
                .as_array()
                .unwrap()
                .iter()
                .filter(|v| **v != *victim)
                .collect();
            let have: Vec<&serde_json::Value> =
                got[config][split].as_array().unwrap().iter().collect();
            assert_eq!(have, want, "{config}/{split}");
        }
    }
    let n = |c: &str| got[c]["train"].as_array().unwrap().len() as u64;
    assert_eq!(n("default"), 1);
    assert_eq!(n("perturbations"), 6);
    assert!(n("questions") > 0);

    // The card: split sizes recounted, the removal recorded; takedowns.jsonl says the same.
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    for c in ["default", "perturbations", "questions"] {
        assert_eq!(yaml_examples(&card, c, "train"), n(c), "{c}: {card}");
    }
    assert!(card.contains("\n## Removals\n"), "{card}");
    assert!(card.contains(&format!("| `{victim}` | ")), "{card}");
    assert!(card.contains(" | owner asked |"), "{card}");
    let log = std::fs::read_to_string(rel.join("takedowns.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
    assert_eq!(line["video_id"], victim.as_str());
    assert_eq!(line["reason"], "owner asked");
    assert_eq!(line["date"].as_str().unwrap().len(), 10);
    // The checksums were refreshed: the folder verifies.
    vidcurate::release::integrity::verify(&rel).unwrap();

    // Again: nothing left to do, nothing recorded twice, not one byte changes.
    let o = run(&["takedown", rel.to_str().unwrap(), &victim], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("already"));
    assert_eq!(files(&rel), after);

    // Cut short while it wrote the exports again (their folder removed, croissant.json still
    // listing their files): running it again writes them back, byte for byte.
    std::fs::remove_dir_all(rel.join("harness/vlmevalkit")).unwrap();
    let o = run(&["takedown", rel.to_str().unwrap(), &victim], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rewrote  harness/vlmevalkit"));
    assert_eq!(files(&rel), after);

    // Every video of a split: the split leaves each config (datasets refuses a split with no
    // data), the files stay, emptied, and the rest still loads.
    let test: Vec<&str> = data
        .iter()
        .filter(|(_, s)| *s == "test")
        .map(|(v, _)| v.as_str())
        .collect();
    assert!(!test.is_empty());
    let mut args = vec!["takedown", rel.to_str().unwrap()];
    args.extend(&test);
    let o = run(&args, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let got = loaded(&rel, &dir.path().join("hf-cache-3"));
    for c in ["default", "perturbations", "questions"] {
        let splits: Vec<&String> = got[c].as_object().unwrap().keys().collect();
        assert_eq!(splits, ["train", "validation"], "{c}: {got}");
    }
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    let yaml = &card[..card[4..].find("\n---\n").unwrap()];
    assert!(!yaml.contains("test"), "{yaml}");
    assert!(rel.join("data/test-00000-of-00001.parquet").exists());
    let log = std::fs::read_to_string(rel.join("takedowns.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1 + test.len());
    vidcurate::release::integrity::verify(&rel).unwrap();
}

/// Bytes the fake server serves by path; a path it lacks is a 404.
type Served = Arc<Mutex<HashMap<String, Vec<u8>>>>;

#[test]
fn rehydrate_reports_what_vanished_and_what_changed() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served: Served = Default::default();
    for (name, secs) in [
        ("same", 1.0),
        ("edited", 1.2),
        ("gone", 1.4),
        ("other", 2.0),
    ] {
        let clip = d.join(format!("{name}.mp4"));
        plain_clip(&clip, secs, "160x90");
        served
            .lock()
            .unwrap()
            .insert(format!("/media/{name}.mp4"), std::fs::read(&clip).unwrap());
    }
    let s2 = served.clone();
    let server = FakeServer::start(move |r: &Request| match s2.lock().unwrap().get(&r.path) {
        Some(b) => Response::bytes(200, "video/mp4", b.clone()),
        None => Response::bytes(404, "text/plain", b"no".to_vec()),
    });
    let url = |n: &str| format!("{}media/{n}.mp4", server.url());
    let mut csv = String::from("id,path\n");
    for n in ["same", "edited", "gone"] {
        csv += &format!("{n},{}\n", url(n));
    }
    write(&d.join("m.csv"), &csv);
    let p = d.join("p.toml");
    write(
        &p,
        "name = \"dl\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n\n[[stages]]\nid = \"download\"\ntype = \"download\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = { count = 2 }\n",
    );
    let run_dir = d.join("run");
    let o = run_into(&p, &run_dir, d);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rel = d.join("release");
    split_and_release(&run_dir, &rel, d, &[]);

    // The manifest has the URL the run fetched and the SHA-256 of the bytes it got.
    let rows = manifest_rows(&rel);
    assert_eq!(rows.len(), 3);
    for r in &rows {
        let id = &r["video_id"];
        assert_eq!(r["url"], url(id));
        assert_eq!(
            r["media_sha256"],
            sha256_hex(&std::fs::read(d.join(format!("{id}.mp4"))).unwrap())
        );
        let secs: f64 = r["duration_secs"].parse().unwrap();
        assert!(
            (secs - ffprobe_secs(&d.join(format!("{id}.mp4")))).abs() < 1e-3,
            "{r:?}"
        );
    }

    let rehydrate = |extra: &[&str]| {
        let mut args = vec!["rehydrate", rel.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let o = run(&args, d);
        let statuses: BTreeMap<String, (String, String)> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                (s("video_id"), (s("status"), s("detail")))
            })
            .collect();
        (o, statuses)
    };
    // All still online as released.
    let (o, got) = rehydrate(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(got.values().all(|(s, _)| s == "present"), "{got:?}");

    // One replaced by another upload, one deleted.
    {
        let mut s = served.lock().unwrap();
        let other = s["/media/other.mp4"].clone();
        s.insert("/media/edited.mp4".into(), other);
        s.remove("/media/gone.mp4");
    }
    let keep = d.join("kept");
    let (o, got) = rehydrate(&["--out", keep.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got["same"].0, "present", "{got:?}");
    assert_eq!(got["edited"].0, "changed", "{got:?}");
    assert!(
        got["edited"].1.contains("sha256") && got["edited"].1.contains("duration 2."),
        "{got:?}"
    );
    assert_eq!(got["gone"].0, "not_found", "{got:?}");
    assert!(got["gone"].1.contains("404"), "{got:?}");
    assert_eq!(
        std::fs::read(keep.join("same.mp4")).unwrap(),
        std::fs::read(d.join("same.mp4")).unwrap()
    );
    // The table says the same.
    let o = run(&["rehydrate", rel.to_str().unwrap()], d);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("3 videos: 1 changed, 1 not_found, 1 present"),
        "{table}"
    );

    // A file changed after release: refused, named.
    let card = rel.join("README.md");
    let text = std::fs::read_to_string(&card).unwrap();
    std::fs::write(&card, format!("{text}\nedited\n")).unwrap();
    let (o, _) = rehydrate(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("README.md: changed after release"),
        "{}",
        err(&o)
    );
    std::fs::write(&card, text).unwrap();

    // No manifest: exit 2, saying what was expected.
    std::fs::remove_file(rel.join("manifest.parquet")).unwrap();
    let (o, _) = rehydrate(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("no manifest.parquet: expected"),
        "{}",
        err(&o)
    );
}
