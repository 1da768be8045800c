//! A dataset that grows (issue 69), as its releases: version 1 of 40 videos; version 2 after
//! 12 videos came (only additions: 1.1.0, nothing moved between splits); version 3 after one
//! left, one was relabelled and one was taken down from version 2 (2.0.0). Each release's
//! `changes` config equals a diff of the two releases' data files made here, independently;
//! CHANGES.md keeps every entry; `vidcurate diff` prints the same table; the takedown stays;
//! croissant.json states the version and validates in mlcroissant.

use crate::release::readers_python;
use crate::util::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The manifest: `ids` with their labels (`fake` for even numbers unless `relabel` names it),
/// five videos a channel.
fn manifest(dir: &Path, ids: &[usize], relabel: &[usize]) {
    let mut s = String::from("path,id,label,channel\n");
    for &i in ids {
        let even = i % 2 == 0;
        let label = if even != relabel.contains(&i) {
            "fake"
        } else {
            "real"
        };
        s += &format!("c.mp4,v{i:03},{label},ch{}\n", (i % 40) / 5);
    }
    write(&dir.join("m.csv"), &s);
}

/// Runs the manifest (a probe stage), makes split `v` again and releases it into `rel` after
/// `previous`; what `release` printed.
fn version(dir: &Path, rel: &str, previous: Option<&str>) -> String {
    let run = dir.join("run");
    let o = run_into(&dir.join("p.toml"), &run, dir);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let args = ["--stratify", "label", "--group", "channel", "--name", "v"];
    let o = Command::new(bin())
        .arg("split")
        .arg(&run)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut cmd = Command::new(bin());
    cmd.arg("release")
        .arg(&run)
        .args(["--split", "v", "--frames", "none", "--out", rel]);
    cmd.args(["--card", "card.toml"]).current_dir(dir);
    if let Some(p) = previous {
        cmd.args(["--previous", p]);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A release's videos: id → (split, label), from its data files.
fn videos(rel: &Path) -> BTreeMap<String, (String, String)> {
    (table_rows_file_all(&rel.join("data")).into_iter())
        .map(|r| {
            (
                r["video_id"].clone(),
                (r["split"].clone(), r["label"].clone()),
            )
        })
        .collect()
}

/// The changes from `a` to `b`, worked out here from their data files and `b`'s takedowns:
/// (video, change, old, new).
fn diff(a: &Path, b: &Path) -> BTreeSet<(String, String, String, String)> {
    let (old, new) = (videos(a), videos(b));
    let down = std::fs::read_to_string(b.join("takedowns.jsonl")).unwrap_or_default();
    let mut out = BTreeSet::new();
    let row = |id: &str, what: &str, o: &str, n: &str| {
        (
            id.to_string(),
            what.to_string(),
            o.to_string(),
            n.to_string(),
        )
    };
    for (id, (s, l)) in &old {
        match new.get(id) {
            None if down.contains(&format!("\"{id}\"")) => {
                out.insert(row(id, "taken_down", "", ""))
            }
            None => out.insert(row(id, "removed", "", "")),
            Some((s2, _)) if s2 != s => out.insert(row(id, "moved", s, s2)),
            Some((_, l2)) if l2 != l => out.insert(row(id, "relabelled", l, l2)),
            Some(_) => false,
        };
    }
    for id in new.keys().filter(|id| !old.contains_key(*id)) {
        out.insert(row(id, "added", "", ""));
    }
    out
}

/// The `changes` config of release `rel`, as `diff` writes its rows.
fn recorded(rel: &Path) -> BTreeSet<(String, String, String, String)> {
    (table_rows_file_all(&rel.join("changes")).into_iter())
        .map(|r| {
            let v = |k: &str| {
                r.get(k)
                    .cloned()
                    .filter(|v| v != "null")
                    .unwrap_or_default()
            };
            (v("video_id"), v("change"), v("old"), v("new"))
        })
        .collect()
}

fn croissant_version(rel: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(rel.join("croissant.json")).unwrap();
    let c: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::json!([c["version"], c["isLiveDataset"]])
}

#[test]
fn three_versions_record_what_changed_and_keep_each_video_in_its_split() {
    crate::need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    plain_clip(&dir.join("c.mp4"), 0.6, "64x36");
    write(
        &dir.join("p.toml"),
        "name = \"grow\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
    );
    write(&dir.join("card.toml"), "version = \"1.0.0\"\nlive = true\n");
    manifest(dir, &(0..40).collect::<Vec<_>>(), &[]);
    let said = version(dir, "v1", None);
    assert!(said.contains("version 1.0.0"), "{said}");
    let v1 = dir.join("v1");
    assert!(!v1.join("CHANGES.md").exists());
    assert_eq!(croissant_version(&v1), serde_json::json!(["1.0.0", true]));

    // Twelve videos come (v040..v044 in channel 0): only additions, a minor version.
    manifest(dir, &(0..52).collect::<Vec<_>>(), &[]);
    let said = version(dir, "v2", Some("v1"));
    let v2 = dir.join("v2");
    assert!(said.contains("version 1.1.0"), "{said}");
    assert_eq!(recorded(&v2), diff(&v1, &v2));
    assert_eq!(recorded(&v2).len(), 12);
    for (id, (split, _)) in videos(&v1) {
        assert_eq!(videos(&v2)[&id].0, split, "{id} moved");
    }
    let changes = std::fs::read_to_string(v2.join("CHANGES.md")).unwrap();
    assert!(
        changes.contains("## 1.1.0 (from 1.0.0)") && changes.contains("- added: 12"),
        "{changes}"
    );

    // v010 is taken down from version 2; then v003 leaves the run and v020 is relabelled.
    let o = run(
        &["takedown", "v2", "v010", "--reason", "uploader's request"],
        dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ids: Vec<usize> = (0..52).filter(|i| *i != 3).collect();
    manifest(dir, &ids, &[20]);
    let said = version(dir, "v3", Some("v2"));
    let v3 = dir.join("v3");
    assert!(said.contains("version 2.0.0"), "{said}");
    assert_eq!(recorded(&v3), diff(&v2, &v3));
    let want: BTreeSet<_> = [
        ("v003", "removed", "", ""),
        ("v020", "relabelled", "fake", "real"),
    ]
    .iter()
    .map(|(a, b, c, e)| (a.to_string(), b.to_string(), c.to_string(), e.to_string()))
    .collect();
    assert_eq!(recorded(&v3), want);
    assert!(
        !videos(&v3).contains_key("v010"),
        "a takedown stays taken down"
    );
    let down = std::fs::read_to_string(v3.join("takedowns.jsonl")).unwrap();
    assert!(down.contains("v010"), "{down}");
    let changes = std::fs::read_to_string(v3.join("CHANGES.md")).unwrap();
    assert!(
        changes.find("## 2.0.0 (from 1.1.0)").unwrap()
            < changes.find("## 1.1.0 (from 1.0.0)").unwrap(),
        "{changes}"
    );
    assert!(changes.contains("not comparable"), "{changes}");

    // `vidcurate diff` prints the same, from version 1 to 3 too.
    let o = run(&["diff", "v1", "v3"], dir);
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        said.starts_with("1.0.0 → 2.0.0: 12 added, 1 removed, 1 taken_down, 1 relabelled"),
        "{said}"
    );
    assert!(
        said.contains("a release with these changes after 1.0.0 is 2.0.0"),
        "{said}"
    );

    // Scored on what versions 2 and 3 share: the videos of the same split and label, counted
    // here from their data files.
    let (a, b) = (videos(&v2), videos(&v3));
    let shared = b.iter().filter(|(id, v)| a.get(*id) == Some(v)).count();
    let mut preds = String::from("video_id,prediction\n");
    for id in b.keys() {
        preds += &format!("{id},fake\n");
    }
    write(&dir.join("preds.csv"), &preds);
    let args = [
        "evaluate",
        "v3",
        "preds.csv",
        "--positive",
        "fake",
        "--split",
        "all",
        "--json",
    ];
    let o = run(&[&args[..], &["--shared-with", "v2"]].concat(), dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["split"]["scored"], shared, "{report}");
    assert_eq!((shared, b.len()), (49, 50));
    let o = run(&args, dir);
    let whole: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(whole["split"]["scored"], 50, "{whole}");

    // Made again in place with nothing changed: the same version, the same files.
    let files = |rel: &Path| {
        [
            "README.md",
            "CHANGES.md",
            "croissant.json",
            "changes/changes-00000-of-00001.parquet",
        ]
        .map(|f| std::fs::read(rel.join(f)).unwrap())
    };
    let before = files(&v3);
    let said = version(dir, "v3", None);
    assert!(said.contains("version 2.0.0"), "{said}");
    assert!(
        before == files(&v3),
        "a release made again in place is the same folder"
    );

    // The same folder named another way is still the same folder: its takedowns stay.
    let said = version(dir, "v3", Some("./v3"));
    assert!(said.contains("version 2.0.0"), "{said}");
    assert!(before == files(&v3));
    assert!(
        std::fs::read_to_string(v3.join("takedowns.jsonl"))
            .unwrap()
            .contains("v010")
    );
    // A takedown in version 3 itself, then version 3 made again after version 2: it stays out.
    let o = run(&["takedown", "v3", "v030"], dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = version(dir, "v3", Some("v2"));
    assert!(said.contains("version 2.0.0"), "{said}");
    assert!(!videos(&v3).contains_key("v030") && !videos(&v3).contains_key("v010"));
    let down = std::fs::read_to_string(v3.join("takedowns.jsonl")).unwrap();
    assert!(down.contains("v010") && down.contains("v030"), "{down}");
    assert_eq!(recorded(&v3), diff(&v2, &v3));
    // The same videos in files of 10 rows: no video changed, the files did: a patch.
    let o = Command::new(bin())
        .arg("release")
        .arg(dir.join("run"))
        .args(["--split", "v", "--frames", "none", "--rows-per-file", "10"])
        .args(["--out", "v3", "--card", "card.toml"])
        .current_dir(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("version 2.0.1"), "{said}");
    let changes = std::fs::read_to_string(v3.join("CHANGES.md")).unwrap();
    assert!(
        changes.starts_with("# Changes\n\n## 2.0.1 (from 2.0.0)"),
        "{changes}"
    );

    // Each version's croissant.json states it, and validates.
    assert_eq!(croissant_version(&v3), serde_json::json!(["2.0.1", true]));
    let v = Command::new(readers_python().with_file_name("mlcroissant"))
        .args(["validate", "--jsonld"])
        .arg(v3.join("croissant.json"))
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let o = run(&["verify", "v3"], dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `evaluate --shared-with` on benchmark tasks: two items of one task redrafted between two
/// versions (their question edited here with pyarrow) are left out of that task's score, and
/// only those; the counts are the edit's own.
#[test]
fn scores_on_the_shared_part_leave_out_the_redrafted_items() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    crate::evaluate_tasks::py(&["make", a.to_str().unwrap(), "3"]);
    copy_dir(&a, &b);
    let edit = "import glob, sys, pyarrow as pa, pyarrow.parquet as pq\n\
        f = glob.glob(sys.argv[1] + '/tasks/sc/*.parquet')[0]\n\
        t = pq.read_table(f)\n\
        q = t.column('question').to_pylist()\n\
        q[0] += ' (reworded)'; q[5] += ' (reworded)'\n\
        pq.write_table(t.set_column(t.schema.get_field_index('question'), 'question', pa.array(q)), f)\n";
    let o = Command::new(readers_python())
        .args(["-c", edit])
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let items = |more: &[&str]| {
        let preds = b.join("predictions.jsonl");
        let mut args = vec![
            "evaluate",
            b.to_str().unwrap(),
            preds.to_str().unwrap(),
            "--json",
        ];
        args.extend(more);
        let o = run(&args, d.path());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (report["tasks"].as_array().unwrap().iter())
            .map(|t| {
                (
                    t["task"].as_str().unwrap().to_string(),
                    t["items"].as_u64().unwrap(),
                )
            })
            .collect::<BTreeMap<String, u64>>()
    };
    let whole = items(&[]);
    let shared = items(&["--shared-with", a.to_str().unwrap()]);
    for (task, n) in &whole {
        let less = if task == "sc" { 2 } else { 0 };
        assert_eq!(shared[task], n - less, "{task}: {shared:?} of {whole:?}");
    }
    let o = run(
        &["diff", a.to_str().unwrap(), b.to_str().unwrap()],
        d.path(),
    );
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains(": 2 item_redrafted\n"), "{said}");
}
