//! The `dataset` source with a dataset's published side files: FakeSV's split and fold id
//! lists (`data-split/...`, in FakeSV's own layout) and MultiHateClip's `text.json`, written
//! here with the faults real files have. Every bad list line or entry is named (file:line,
//! id, key), what matches nothing is counted in the run's summary and manifest, and the rest
//! of the run goes on. Media are URLs only (no stage needs them), so no video is decoded.

use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;

type Rows = Vec<BTreeMap<String, String>>;

fn by_id(run_dir: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    table_rows_file_all(&run_dir.join("source"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r))
        .collect()
}

/// The one reject of `id`, with its reason.
fn reject_of<'a>(rejects: &'a Rows, id: &str, reason: &str) -> &'a str {
    let r = rejects
        .iter()
        .find(|r| r["video_id"] == id)
        .unwrap_or_else(|| panic!("no reject of {id}: {rejects:#?}"));
    assert_eq!(r["reason"], reason, "{r:?}");
    &r["detail"]
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The source's counters in the manifest.
fn tally(run_dir: &Path) -> serde_json::Value {
    counts(run_dir, "source")["tally"].clone()
}

const HEAD: &str = "[source]\ntype = \"dataset\"\nmedia_url = \"https://example.org/v/{id}.mp4\"\n";

/// FakeSV's data.json (12 videos, 3 events) and its split files in FakeSV's layout: the
/// temporal lists hold every video, the five event folds leave two out (as FakeSV's folds
/// list 4,769 of 5,495). Faults: v03 twice in the train list, v04 in train and test, v05 in
/// folds 1 and 2, and an id no row has in the val list and in fold 3.
fn fakesv_files(dir: &Path) -> BTreeMap<String, (String, String)> {
    let ids: Vec<String> = (1..=12).map(|i| format!("v{i:02}")).collect();
    let mut lines = String::from("\u{feff}");
    for (i, id) in ids.iter().enumerate() {
        let ev = ["E1", "E2", "E3"][i % 3];
        let label = ["真", "假", "辟谣"][i % 3];
        lines += &format!(
            "{{\"video_id\": \"{id}\", \"annotation\": \"{label}\", \"keywords\": \"{ev}\"}}\n"
        );
    }
    write(&dir.join("dataset/data.json"), &lines);
    let t = dir.join("data-split/temporal");
    // BOM and CRLF, a blank line, no final newline.
    write(
        &t.join("vid_time3_train.txt"),
        "\u{feff}v01\r\nv02\r\nv03\r\n\r\nv03\r\nv04\r\nv06\r\nv07",
    );
    write(&t.join("vid_time3_val.txt"), "v08\nghost_val\nv09\n");
    write(&t.join("vid_time3_test.txt"), "v10\nv11\nv12\nv04\nv05\n");
    let e = dir.join("data-split/event");
    let folds = [
        "v01\nv05\n",
        "v02\nv05\nv06\n",
        "\nv03\nghost_fold\n",
        "v04\nv07\nv08\n",
        "v09\nv10\n",
    ];
    for (k, text) in folds.iter().enumerate() {
        write(&e.join(format!("vid_fold_{}.txt", k + 1)), text);
    }
    // The kept videos' (split, fold); v11 and v12 are in no fold.
    let want = [
        ("v01", "train", "1"),
        ("v02", "train", "2"),
        ("v06", "train", "2"),
        ("v07", "train", "4"),
        ("v08", "valid", "4"),
        ("v09", "valid", "5"),
        ("v10", "test", "5"),
        ("v11", "test", "null"),
        ("v12", "test", "null"),
    ];
    want.iter()
        .map(|(id, s, f)| (id.to_string(), (s.to_string(), f.to_string())))
        .collect()
}

const SPLIT_FILES: &str = "split_files = { train = \"data-split/temporal/vid_time3_train.txt\", valid = \"data-split/temporal/vid_time3_val.txt\", test = \"data-split/temporal/vid_time3_test.txt\" }\n";

fn fold_files(n: usize) -> String {
    let files: Vec<String> = (1..=n)
        .map(|k| format!("\"data-split/event/vid_fold_{k}.txt\""))
        .collect();
    format!("fold_files = [{}]\n", files.join(", "))
}

#[test]
fn fakesv_split_and_fold_lists_give_the_columns_and_name_every_bad_line() {
    let d = tempfile::tempdir().unwrap();
    let want = fakesv_files(d.path());
    let p = d.path().join("p.toml");
    write(
        &p,
        &format!(
            "name = \"fakesv\"\n{HEAD}format = \"fakesv\"\nannotations = \"dataset/data.json\"\nsplit_by = \"files\"\n{SPLIT_FILES}{}",
            fold_files(5)
        ),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");

    let rejects = table_rows_file_all(&run_dir.join("rejects"));
    assert_eq!(rejects.len(), 3, "{rejects:#?}");
    let v03 = reject_of(&rejects, "v03", "listed_twice");
    assert!(
        v03.contains("data.json:3: ")
            && v03.contains("temporal/vid_time3_train.txt:3, ")
            && v03.contains("temporal/vid_time3_train.txt:5"),
        "{v03}"
    );
    let v04 = reject_of(&rejects, "v04", "listed_twice");
    assert!(
        v04.contains("vid_time3_train.txt:6") && v04.contains("vid_time3_test.txt:4"),
        "{v04}"
    );
    let v05 = reject_of(&rejects, "v05", "listed_twice");
    assert!(
        v05.contains("fold_files")
            && v05.contains("event/vid_fold_1.txt:2")
            && v05.contains("event/vid_fold_2.txt:2"),
        "{v05}"
    );

    let source = by_id(&run_dir);
    assert_eq!(source.len(), want.len(), "{source:#?}");
    for (id, (split, fold)) in &want {
        let r = &source[id];
        assert_eq!((&r["split"], &r["fold"]), (split, fold), "{id}");
    }
    assert_eq!(source["v01"]["label"], "real");
    assert_eq!(source["v02"]["event"], "E2");

    // Unmatched ids are counted in the manifest and the summary, and named with file:line.
    let t = tally(&run_dir);
    assert_eq!(t["split_files_unlisted"], 0, "{t}");
    assert_eq!(t["split_files_no_row"], 1, "{t}");
    assert_eq!(t["fold_files_unlisted"], 2, "{t}");
    assert_eq!(t["fold_files_no_row"], 1, "{t}");
    assert!(
        err.contains("source: split_files: 0 videos in no list, 1 listed ids without a row; fold_files: 2 videos in no list, 1 listed ids without a row"),
        "{err}"
    );
    assert!(
        err.contains("\"ghost_val\" (") && err.contains("vid_time3_val.txt:2)"),
        "{err}"
    );
    assert!(err.contains("\"ghost_fold\" (") && err.contains("vid_fold_3.txt:3)"));
    assert!(
        err.contains("2 rows of") && err.contains("fold is empty"),
        "{err}"
    );

    // `split --from-column split` reproduces the published split.
    let o = std::process::Command::new(bin())
        .args(["split", run_dir.to_str().unwrap()])
        .args(["--from-column", "split", "--names", "train,valid,test"])
        .args(["--name", "published"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let placed: BTreeMap<String, String> =
        table_rows_file(&run_dir.join("splits/published.parquet"))
            .into_iter()
            .map(|r| (r["video_id"].clone(), r["split"].clone()))
            .collect();
    let published: BTreeMap<String, String> = want
        .iter()
        .map(|(id, (s, _))| (id.clone(), s.clone()))
        .collect();
    assert_eq!(placed, published);
}

/// Fold lists alone: the folds are the files', the split is by `test_fold`, and a video in no
/// fold has neither. A list file that is not there stops the run before any work.
#[test]
fn fakesv_fold_lists_split_by_the_test_fold() {
    let d = tempfile::tempdir().unwrap();
    let want = fakesv_files(d.path());
    let p = d.path().join("p.toml");
    let body = format!(
        "name = \"folds\"\n{HEAD}format = \"fakesv\"\nannotations = \"dataset/data.json\"\nsplit_by = \"event_folds\"\ntest_fold = 4\n"
    );
    write(&p, &format!("{body}{}", fold_files(5)));
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let source = by_id(&run_dir);
    // v03 and v04 are kept here: only the fold lists are read.
    assert_eq!(source.len(), 11, "{source:#?}");
    for (id, (_, fold)) in &want {
        let split = match fold.as_str() {
            "null" => "null",
            "4" => "test",
            _ => "train",
        };
        let r = &source[id];
        assert_eq!(
            (r["fold"].as_str(), r["split"].as_str()),
            (fold.as_str(), split),
            "{id}"
        );
    }
    assert_eq!(source["v04"]["split"], "test");
    assert_eq!(source["v03"]["fold"], "3");
    let t = tally(&run_dir);
    assert_eq!(
        (
            t["fold_files_unlisted"].as_u64(),
            t.get("split_files_unlisted")
        ),
        (Some(2), None)
    );

    // The event-fold protocol's split: the videos in no fold list are not part of it. Without
    // --leave-out-missing they are an error that names them; with it, they are left out and
    // counted, and the listed ones keep the lists' split.
    let split = |extra: &[&str]| {
        std::process::Command::new(bin())
            .args(["split", run_dir.to_str().unwrap(), "--from-column", "split"])
            .args(["--names", "train,test", "--name", "folds"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = split(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--leave-out-missing"), "{}", stderr(&o));
    let o = split(&["--leave-out-missing"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2 videos with no value left out"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let placed: BTreeMap<String, String> = table_rows_file(&run_dir.join("splits/folds.parquet"))
        .into_iter()
        .map(|r| (r["video_id"].clone(), r["split"].clone()))
        .collect();
    let listed: BTreeMap<String, String> = source
        .iter()
        .filter(|(_, r)| r["split"] != "null")
        .map(|(id, r)| (id.clone(), r["split"].clone()))
        .collect();
    assert_eq!((placed.len(), &placed), (9, &listed));
    let json = std::fs::read_to_string(run_dir.join("splits/folds.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["missing_left_out"].as_array().map(Vec::len), Some(2));

    write(&p, &format!("{body}{}", fold_files(6)));
    let o = run_into(&p, &d.path().join("run2"), d.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("fold_files") && err.contains("vid_fold_6.txt"),
        "{err}"
    );
}

#[test]
fn multihateclip_text_json_joins_as_columns_and_names_bad_values() {
    let d = tempfile::tempdir().unwrap();
    let head = "Video_ID\tMajority_Voting\tLabel\tTarget_Victim\tComponent\tDuration";
    let row = |id: &str, label: &str| format!("{id}\t{label}\t['{label}']\t[]\t[]\t[]\r\n");
    let a = d.path().join("mhc/annotation");
    write(
        &a.join("train.tsv"),
        &format!(
            "{head}\r\n{}{}{}",
            row("a1", "Normal"),
            row("a2", "Offensive"),
            row("a3", "Hateful")
        ),
    );
    write(
        &a.join("valid.tsv"),
        &format!("{head}\r\n{}{}", row("b1", "Normal"), row("b2", "Normal")),
    );
    write(
        &a.join("test.tsv"),
        &format!(
            "{head}\r\n{}{}",
            row("c1", "Offensive"),
            row("c2", "Normal")
        ),
    );
    // As the dataset writes it (indented, \u escapes), with its messy labels, key names in
    // other cases, a wrong-typed title (b1, line 26), an entry that is no object (b2), an entry
    // with only title and transcript (c1), two entries without a row and no entry for c2.
    let text = r#"{
    "zz_extra": {
        "title": "not annotated",
        "label": "Normal"
    },
    "a1": {
        "title": "Pride march \ud83c\udf08",
        "description": "",
        "transcript": "What do we want?",
        "label": "Normal",
        "language_check": true
    },
    "a2": {
        "Title": "A title",
        "Description": "A description",
        "Transcript": "",
        "LLM_label": "Output: Normal",
        "Language_Check": false
    },
    "a3": {
        "title": "t3",
        "label": "The input is not in English, and without understanding the language the label cannot be given."
    },
    "b1": {
        "description": "d",
        "title": 42,
        "label": "Normal"
    },
    "b2": "just text",
    "c1": {
        "title": "only title",
        "transcript": "and transcript"
    },
    "zz_more": {}
}"#;
    write(&d.path().join("mhc/text.json"), text);
    let p = d.path().join("p.toml");
    write(
        &p,
        &format!(
            "name = \"mhc\"\n{HEAD}format = \"multihateclip\"\n\
             annotations = [\"mhc/annotation/train.tsv\", \"mhc/annotation/valid.tsv\", \"mhc/annotation/test.tsv\"]\n\
             text = \"mhc/text.json\"\n"
        ),
    );
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");

    let rejects = table_rows_file_all(&run_dir.join("rejects"));
    assert_eq!(rejects.len(), 2, "{rejects:#?}");
    let b1 = reject_of(&rejects, "b1", "bad_text");
    assert!(
        b1.contains("valid.tsv:2: ")
            && b1.contains("text.json:26: ")
            && b1.contains("key `title`")
            && b1.contains("a number"),
        "{b1}"
    );
    let b2 = reject_of(&rejects, "b2", "bad_text");
    assert!(
        b2.contains("text.json:29: ") && b2.contains("not an object"),
        "{b2}"
    );

    let source = by_id(&run_dir);
    let cols = |id: &str| {
        let r = &source[id];
        [
            "title",
            "description",
            "dataset_transcript",
            "llm_label",
            "language_check",
        ]
        .map(|c| r[c].clone())
    };
    assert_eq!(
        cols("a1"),
        [
            "Pride march 🌈",
            "null",
            "What do we want?",
            "Normal",
            "true"
        ]
    );
    assert_eq!(
        cols("a2"),
        [
            "A title",
            "A description",
            "null",
            "Output: Normal",
            "false"
        ]
    );
    assert!(cols("a3")[3].starts_with("The input is not in English"));
    assert_eq!(
        cols("c1"),
        ["only title", "null", "and transcript", "null", "null"]
    );
    assert_eq!(cols("c2"), ["null", "null", "null", "null", "null"]);
    assert_eq!(source["a2"]["label"], "Offensive");
    assert_eq!(source["c2"]["split"], "test");

    let t = tally(&run_dir);
    assert_eq!(
        (t["text_no_entry"].as_u64(), t["text_no_row"].as_u64()),
        (Some(1), Some(2)),
        "{t}"
    );
    assert!(
        err.contains("source: text: 1 videos without an entry, 2 entries without a row"),
        "{err}"
    );
    assert!(
        err.contains("\"zz_extra\" (") && err.contains("text.json:2)"),
        "{err}"
    );
    assert!(
        err.contains("\"zz_more\" (") && err.contains("text.json:34)"),
        "{err}"
    );

    // A file that is not JSON stops the run at its line, before any work.
    write(
        &d.path().join("mhc/text.json"),
        "{\n  \"a1\": {\"title\": \"x\",}\n}",
    );
    let o = run_into(&p, &d.path().join("run2"), d.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("text.json:2:"), "{err}");
}

#[test]
fn id_list_settings_errors_name_the_key_and_a_typo_its_closest_keys() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("p.toml");
    let validate = |extra: &str| {
        write(
            &p,
            &format!(
                "name = \"t\"\n{HEAD}format = \"fakesv\"\nannotations = \"data.json\"\n{extra}"
            ),
        );
        let o = run(&["validate", p.to_str().unwrap()], d.path());
        (o.status.code(), stderr(&o))
    };
    let (code, err) = validate("fold_file = [\"a.txt\"]\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:7:")
            && err.contains("unknown field `fold_file` (did you mean `fold_files`?)")
            && err.contains("closest first: `fold_files`, `folds`"),
        "{err}"
    );
    let (code, err) = validate(&format!("split_by = \"event_folds\"\n{SPLIT_FILES}"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:8:") && err.contains("source.split_files"),
        "{err}"
    );
    let (code, err) = validate("split_by = \"files\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("source.split_by") && err.contains("fold_files"),
        "{err}"
    );
    let (code, err) = validate(&format!("folds = 4\n{}", fold_files(5)));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("p.toml:7:") && err.contains("source.folds"),
        "{err}"
    );
    let (code, err) = validate(&format!("test_fold = 3\n{}", fold_files(2)));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("source.test_fold") && err.contains("1..2"),
        "{err}"
    );
    let (code, err) = validate("text = \"text.json\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("source.text") && err.contains("multihateclip"),
        "{err}"
    );
    let (code, err) = validate(&format!("split_by = \"event_folds\"\n{}", fold_files(5)));
    assert_eq!(code, Some(0), "{err}");
}
