//! The `dataset` source: FakeSV's data.json and MultiHateClip's TSVs, written here in their
//! public shapes with the faults real files have, read into a run with labels, events, splits
//! and folds; every bad row a reject naming its file and line, the rest probed.

use crate::need_ffmpeg;
use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;

type Rows = Vec<BTreeMap<String, String>>;

/// The `source` table by video id.
fn by_id(run_dir: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    table_rows_file_all(&run_dir.join("source"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r))
        .collect()
}

/// The reject whose detail starts at `file:line`, with its reason.
fn reject_at<'a>(rejects: &'a Rows, at: &str, reason: &str) -> &'a BTreeMap<String, String> {
    rejects
        .iter()
        .find(|r| r["detail"].contains(&format!("{at}: ")) && r["reason"] == reason)
        .unwrap_or_else(|| panic!("no {reason} reject at {at}: {rejects:#?}"))
}

fn clips(dir: &Path, ids: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    for id in ids {
        plain_clip(&dir.join(format!("{id}.mp4")), 1.0, "160x120");
    }
}

fn run_ok_with_rejects(p: &Path, run_dir: &Path, cwd: &Path) {
    let o = run_into(p, run_dir, cwd);
    assert_eq!(
        o.status.code(),
        Some(3),
        "exit code 3 = done with rejects; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// FakeSV's events folded the documented way: largest first (ties by text), each to the
/// fold with the fewest videos so far (ties to the lower fold).
fn expected_folds(events: &[(&str, &str)], folds: usize) -> BTreeMap<String, String> {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, ev) in events {
        groups.entry(ev).or_default().push(id);
    }
    let mut order: Vec<_> = groups.into_iter().collect();
    order.sort_by_key(|(ev, ids)| (std::cmp::Reverse(ids.len()), *ev));
    let mut load = vec![0; folds];
    let mut out = BTreeMap::new();
    for (_, ids) in order {
        let k = (0..folds).min_by_key(|&k| (load[k], k)).unwrap();
        load[k] += ids.len();
        for id in ids {
            out.insert(id.to_string(), (k + 1).to_string());
        }
    }
    out
}

#[test]
fn fakesv_rows_carry_mapped_labels_events_temporal_splits_and_folds() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    clips(&d.path().join("v"), &["v1", "v2", "v3", "v4", "v10"]);
    // Public field names, Chinese labels, a BOM, no final newline; times in milliseconds and
    // as text. Line 5 repeats v1, line 6 has a label outside the map, line 7 an unsafe id,
    // line 8 is not JSON, and v9 (line 9) has no file.
    let lines = [
        r#"{"video_id": "v1", "annotation": "真", "keywords": "E1", "title": "t1", "description": "d1", "publish_time": 1600000500000}"#,
        r#"{"video_id": "v2", "annotation": "假", "keywords": "E1", "publish_time": 1600000100000}"#,
        r#"{"video_id": "v3", "annotation": "辟谣", "keywords": "E2", "publish_time": 1600000300000}"#,
        r#"{"video_id": "v4", "annotation": "假", "keywords": "E3", "publish_time": "2020-09-13 12:30:00"}"#,
        r#"{"video_id": "v1", "annotation": "假", "keywords": "E9", "publish_time": 1600000000000}"#,
        r#"{"video_id": "v6", "annotation": "存疑", "keywords": "E1", "publish_time": 1600000000000}"#,
        r#"{"video_id": "../../x", "annotation": "假", "keywords": "E1", "publish_time": 1600000000000}"#,
        r#"{"video_id": "v8", "annotation": "#,
        r#"{"video_id": "v9", "annotation": "假", "keywords": "E4", "publish_time": 1600000400000}"#,
        r#"{"video_id": "v10", "annotation": "辟谣", "keywords": "E2", "publish_time": 1600000000000}"#,
    ];
    write(
        &d.path().join("fakesv/data.json"),
        &format!("\u{feff}{}", lines.join("\n")),
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        "name = \"fakesv\"\n[source]\ntype = \"dataset\"\nformat = \"fakesv\"\nannotations = \"fakesv/data.json\"\nmedia_dir = \"v\"\nfolds = 2\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
    );
    let run_dir = d.path().join("run");
    run_ok_with_rejects(&p, &run_dir, d.path());

    let rejects = table_rows_file_all(&run_dir.join("rejects"));
    let dup = reject_at(&rejects, "data.json:5", "duplicate_id");
    assert!(dup["detail"].contains("data.json:1"), "{dup:?}");
    let label = reject_at(&rejects, "data.json:6", "unknown_label");
    assert!(label["detail"].contains("存疑"), "{label:?}");
    reject_at(&rejects, "data.json:7", "unsafe_id");
    reject_at(&rejects, "data.json:8", "bad_line");
    reject_at(&rejects, "data.json:9", "missing_file");
    assert_eq!(rejects.len(), 5, "{rejects:#?}");

    // The rows kept by the checks of the file (v9 too: media are checked later), in time
    // order, cut 70/15/15 by round(n · cumulative share).
    let kept = [
        ("v1", 1600000500),
        ("v2", 1600000100),
        ("v3", 1600000300),
        ("v4", 1600000200),
        ("v9", 1600000400),
        ("v10", 1600000000),
    ];
    let mut by_time = kept.to_vec();
    by_time.sort_by_key(|(_, t)| *t);
    let n = by_time.len() as f64;
    let cuts = [(n * 0.70).round() as usize, (n * 0.85).round() as usize];
    let split_of: BTreeMap<&str, &str> = by_time
        .iter()
        .enumerate()
        .map(|(i, (id, _))| {
            let s = if i < cuts[0] {
                "train"
            } else if i < cuts[1] {
                "valid"
            } else {
                "test"
            };
            (*id, s)
        })
        .collect();
    assert_eq!((split_of["v10"], split_of["v1"]), ("train", "test"));
    let events = [
        ("v1", "E1"),
        ("v2", "E1"),
        ("v3", "E2"),
        ("v4", "E3"),
        ("v9", "E4"),
        ("v10", "E2"),
    ];
    let fold_of = expected_folds(&events, 2);
    let labels = [
        ("v1", "real"),
        ("v2", "fake"),
        ("v3", "debunk"),
        ("v4", "fake"),
        ("v10", "debunk"),
    ];

    let source = by_id(&run_dir);
    assert_eq!(source.len(), 5, "{source:#?}");
    for (id, label) in labels {
        let r = &source[id];
        assert_eq!(r["label"], label, "{id}");
        assert_eq!(r["split"], split_of[id], "{id}");
        assert_eq!(r["fold"], fold_of[id], "{id}");
        let event = events.iter().find(|(v, _)| *v == id).unwrap().1;
        assert_eq!(r["event"], event, "{id}");
        assert!(r["path"].ends_with(&format!("/v/{id}.mp4")), "{r:?}");
    }
    let v1 = &source["v1"];
    assert_eq!(
        (v1["title"].as_str(), v1["description"].as_str()),
        ("t1", "d1")
    );
    assert_eq!(v1["published_at"], "2020-09-13T12:35:00Z");
    assert_eq!(v1["publish_time"], "1600000500000");
    assert_eq!(source["v4"]["publish_time"], "2020-09-13 12:30:00");
    assert_eq!(source["v2"]["title"], "null");

    // The good videos went through probe.
    let mut probed = column(&run_dir.join("probe"), "video_id");
    probed.sort();
    assert_eq!(probed, ["v1", "v10", "v2", "v3", "v4"]);
}

#[test]
fn multihateclip_tsvs_carry_their_splits_and_lists_as_json() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    clips(&d.path().join("v"), &["a1", "a2", "a3", "b1", "c1"]);
    let head = "Video_ID\tMajority_Voting\tLabel\tTarget_Victim\tComponent\tDuration";
    let a = d.path().join("mhc/annotation");
    // As the dataset writes them: CRLF, Python literals, CSV quoting around a cell with `"`.
    write(
        &a.join("train.tsv"),
        &format!(
            "\u{feff}{head}\r\n\
             a1\tHateful\t['Hateful', 'Hateful']\t['Women', 'LGBTQ']\t['Audio', 'Transcript']\t[(0, 10)]\r\n\
             a2\tNormal\t['Normal', 'Normal']\t[]\t[]\t[]\r\n\
             a3\tOffensive\t['Offensive', 'Normal']\t\"[\"\"Mama's Boy\"\"]\"\t['Metadata']\t[(29, 33)]\r\n\
             a4\tHateful\t['Hateful', 'Hateful']\t['Woman', None\t['Audio']\t[(0, 5)]\r\n"
        ),
    );
    write(
        &a.join("valid.tsv"),
        &format!(
            "{head}\r\nb1\tNormal\t['Normal', 'Normal']\tNone\t[]\t[]\r\nb2\tSpam\t[]\t[]\t[]\t[]\r\n"
        ),
    );
    // No final newline; a2 again (also in the real files: an id in train and test).
    write(
        &a.join("test.tsv"),
        &format!(
            "{head}\r\na2\tNormal\t['Normal', 'Normal']\t[]\t[]\t[]\r\n\
             c1\tOffensive\t['Offensive', 'Normal']\t['Woman', None]\t['Vision component']\t[(1, 2.5)]"
        ),
    );
    let p = d.path().join("p.toml");
    write(
        &p,
        "name = \"mhc\"\n[source]\ntype = \"dataset\"\nformat = \"multihateclip\"\n\
         annotations = [\"mhc/annotation/train.tsv\", \"mhc/annotation/valid.tsv\", \"mhc/annotation/test.tsv\"]\n\
         splits = { \"mhc/annotation/valid.tsv\" = \"val\" }\n\
         labels = { Hateful = \"hateful\", Offensive = \"offensive\", Normal = \"normal\" }\n\
         media_dir = \"v\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
    );
    let run_dir = d.path().join("run");
    run_ok_with_rejects(&p, &run_dir, d.path());

    let rejects = table_rows_file_all(&run_dir.join("rejects"));
    let list = reject_at(&rejects, "train.tsv:5", "bad_list");
    assert!(list["detail"].contains("Target_Victim"), "{list:?}");
    let label = reject_at(&rejects, "valid.tsv:3", "unknown_label");
    assert!(label["detail"].contains("Spam"), "{label:?}");
    let dup = reject_at(&rejects, "test.tsv:2", "duplicate_id");
    assert!(dup["detail"].contains("train.tsv:3"), "{dup:?}");
    assert_eq!(rejects.len(), 3, "{rejects:#?}");

    let source = by_id(&run_dir);
    let want = [
        ("a1", "hateful", "train", r#"["Women","LGBTQ"]"#, "[[0,10]]"),
        ("a2", "normal", "train", "[]", "[]"),
        ("a3", "offensive", "train", r#"["Mama's Boy"]"#, "[[29,33]]"),
        ("b1", "normal", "val", "null", "[]"),
        ("c1", "offensive", "test", r#"["Woman",null]"#, "[[1,2.5]]"),
    ];
    assert_eq!(source.len(), want.len(), "{source:#?}");
    for (id, label, split, victims, segments) in want {
        let r = &source[id];
        assert_eq!(
            (
                r["label"].as_str(),
                r["split"].as_str(),
                r["target_victim"].as_str(),
                r["segments"].as_str()
            ),
            (label, split, victims, segments),
            "{id}"
        );
    }
    assert_eq!(source["a1"]["annotator_labels"], r#"["Hateful","Hateful"]"#);
    assert_eq!(source["c1"]["component"], r#"["Vision component"]"#);
    let mut probed = column(&run_dir.join("probe"), "video_id");
    probed.sort();
    assert_eq!(probed, ["a1", "a2", "a3", "b1", "c1"]);
}

/// With a URL template the records carry only the URL (a download stage would fetch it); the
/// public data.json has no publish times, so the split is by event folds.
#[test]
fn a_media_url_template_gives_each_video_its_url() {
    let d = tempfile::tempdir().unwrap();
    write(
        &d.path().join("data.json"),
        "{\"video_id\":\"3x4zj7hyemptkvm\",\"keywords\":\"E1\",\"annotation\":\"辟谣\"}\n\
         {\"video_id\":\"7041921581278416158\",\"keywords\":\"E2\",\"annotation\":\"假\"}\n\
         {\"video_id\":\"6671891732524829965\",\"keywords\":\"E2\",\"annotation\":\"真\"}\n",
    );
    let head = "name = \"urls\"\n[source]\ntype = \"dataset\"\nformat = \"fakesv\"\nannotations = \"data.json\"\nmedia_url = \"https://example.org/v/{id}.mp4\"\n";
    let p = d.path().join("p.toml");
    write(
        &p,
        &format!("{head}split_by = \"event_folds\"\ntest_fold = 2\n"),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let source = by_id(&run_dir);
    assert_eq!(source.len(), 3);
    for (id, r) in &source {
        assert_eq!(r["url"], format!("https://example.org/v/{id}.mp4"));
        assert_eq!(r["path"], "null");
    }
    // E2 (two videos) fills fold 1 first; E1 goes to fold 2, the test fold here.
    let placed = |id: &str| (source[id]["fold"].clone(), source[id]["split"].clone());
    assert_eq!(placed("3x4zj7hyemptkvm"), ("2".into(), "test".into()));
    assert_eq!(placed("6671891732524829965"), ("1".into(), "train".into()));
    assert_eq!(source["6671891732524829965"]["label"], "real");

    // The default temporal split cannot be made without publish times: said before any work.
    write(&p, head);
    let o = run_into(&p, &d.path().join("run2"), d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("publish_time") && err.contains("event_folds"),
        "{err}"
    );
}

#[test]
fn dataset_settings_errors_name_file_line_and_key() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("p.toml");
    let validate = |text: &str| {
        write(&p, text);
        let o = run(&["validate", p.to_str().unwrap()], d.path());
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        (o.status.code(), err)
    };
    let head = "name = \"t\"\n[source]\ntype = \"dataset\"\n";
    let (code, err) = validate(&format!(
        "{head}format = \"nope\"\nannotations = \"data.json\"\nmedia_dir = \"v\"\n"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:4:") && err.contains("source.format") && err.contains("nope"),
        "{err}"
    );
    let (code, err) = validate(&format!(
        "{head}format = \"fakesv\"\nannotations = \"data.json\"\nmedia_dir = \"v\"\nmedia_url = \"https://example.org/{{id}}.mp4\"\n"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:7:")
            && err.contains("source.media_url")
            && err.contains("exactly one"),
        "{err}"
    );
    let (code, err) = validate(&format!(
        "{head}format = \"multihateclip\"\nannotations = [\"train.tsv\"]\nmedia_dir = \"v\"\nfolds = 3\n"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:7:") && err.contains("source.folds"),
        "{err}"
    );
}
