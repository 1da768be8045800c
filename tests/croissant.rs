//! `croissant.json` in a release: valid for mlcroissant 1.1.1 (`mlcroissant validate`), its
//! records the Parquet rows (tests/readers/check_croissant.py loads them through
//! `mlcroissant.Dataset(...).records(...)`), its checksums what `integrity::verify` holds the
//! folder to; and the card beside it: the cost per stage as `cache stats` counts it, no path of the
//! builder's machine, numbers as the pipeline file wrote them, placeholders and a warning for
//! what only a person can write.

use crate::judge::err;
use crate::need_ffmpeg;
use crate::release::readers_python;
use crate::util::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use vidcurate::release::integrity::{self, IntegrityError};

fn venv_bin(name: &str) -> std::path::PathBuf {
    readers_python().with_file_name(name)
}

fn check_croissant(release: &Path) -> Value {
    crate::release::reader_json("check_croissant.py", &[release])
}

/// Decimal numbers whose digits are a float's widening noise (`0.699999988`, `0.20000000298`).
fn float_noise(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.trim_end_matches('.').split_once('.'))
        .filter(|(int, frac)| {
            !int.is_empty()
                && (frac.contains("99999")
                    || frac
                        .find("00000")
                        .is_some_and(|i| !frac[i..].trim_start_matches('0').is_empty()))
        })
        .map(|(a, b)| format!("{a}.{b}"))
        .collect()
}

#[test]
fn a_release_carries_valid_croissant_whose_records_are_its_rows() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let (server, run_dir) = crate::questions::question_run(dir.path(), 4);
    let card_file = dir.path().join("card.toml");
    write(
        &card_file,
        "description = \"Test cards with questions.\"\nlicense = \"https://creativecommons.org/licenses/by/4.0/\"\ndata_limitations = \"Four generated clips.\"\ndata_use_cases = \"Testing vidcurate.\"\ncreators = [\"A. Tester\"]\n",
    );
    let rel = dir.path().join("release");
    let card = card_file.to_str().unwrap();
    let flags = ["--frames", "bytes", "--card", card];
    let o = crate::questions::split_and_release(&run_dir, &rel, dir.path(), &flags);
    assert!(
        err(&o).contains("placeholders for what a person must write: data_biases, personal_sensitive_information, data_social_impact, has_synthetic_data."),
        "{}",
        err(&o)
    );

    // mlcroissant's own validator.
    let v = Command::new(venv_bin("mlcroissant"))
        .args(["validate", "--jsonld"])
        .arg(rel.join("croissant.json"))
        .output()
        .unwrap();
    let said = err(&v);
    assert!(v.status.success(), "mlcroissant validate: {said}");
    assert!(
        !said
            .lines()
            .any(|l| l.starts_with('W') || l.starts_with('E')),
        "mlcroissant validate warned: {said}"
    );

    // Every RecordSet's records, read by mlcroissant, are the rows of its Parquet files.
    let got = check_croissant(&rel);
    assert_eq!(got["conforms_to"], "http://mlcommons.org/croissant/1.1");
    let sets = got["record_sets"].as_object().unwrap();
    assert_eq!(
        sets.keys().collect::<Vec<_>>(),
        ["default", "perturbations", "questions"],
        "{got}"
    );
    for (name, s) in sets {
        assert_eq!(s["equal"], true, "{name}: {s}");
        assert!(s["records"].as_u64().unwrap() > 0, "{name}: {s}");
    }
    assert_eq!(sets["default"]["records"], 4);
    // 4 frames a video, decoded as images by mlcroissant and from the Parquet bytes alike.
    assert_eq!(got["images"], 2 * 4 * 4, "{got}");
    assert_eq!(sets["questions"]["records"], 12, "three items a video");
    assert!(
        sets["default"]["fields"]
            .as_array()
            .unwrap()
            .contains(&"frames".into())
    );
    // One FileObject per file but croissant.json itself.
    let files = integrity::release_files(&rel).unwrap();
    assert_eq!(got["file_objects"], files.len(), "{files:?}");
    assert!(files.contains(&"README.md".to_string()));

    // RAI: the person's text where they wrote it, a placeholder where not, the run's facts.
    let rai = &got["rai"];
    assert_eq!(rai["rai:dataLimitations"], "Four generated clips.");
    assert!(
        rai["rai:dataBiases"]
            .as_str()
            .unwrap()
            .starts_with("NOT WRITTEN"),
        "{rai}"
    );
    let tools = rai["rai:machineAnnotationTools"].to_string();
    for stage in ["caption", "questions", "blind"] {
        assert!(
            tools.contains(&format!("stage `{stage}`")) && tools.contains("gpt-4o-mini"),
            "{tools}"
        );
    }
    let protocol = rai["rai:dataAnnotationProtocol"].to_string();
    assert!(protocol.contains("not reviewed by people"), "{protocol}");
    let json = std::fs::read_to_string(rel.join("croissant.json")).unwrap();
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["inLanguage"], serde_json::json!(["en", "zh"]));

    // The card travels: no folder of this machine, numbers as the file wrote them.
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    let tmp = dir.path().to_str().unwrap();
    for (what, text) in [("README.md", &card), ("croissant.json", &json)] {
        assert!(!text.contains(tmp), "{what} names {tmp}: {text}");
        assert!(
            float_noise(text).is_empty(),
            "{what}: {:?}",
            float_noise(text)
        );
    }
    assert!(
        card.contains("(`p.toml`)"),
        "the pipeline file by name: {card}"
    );
    assert!(
        card.contains("\"temperature\":0.7"),
        "blind's default: {card}"
    );
    assert!(
        card.contains("- **Limitations.** Four generated clips."),
        "{card}"
    );

    // The cost: caption, questions and blind all call gpt-4o-mini on one service, yet each has
    // its line, with the answers it paid for (the distinct requests the fake server saw, told
    // apart by the answer's schema: two videos can ask the blind model the same question at
    // once, and the cache keeps one answer for both) and the tokens `cache stats` counts for
    // it, in chain order.
    let mut sent = std::collections::BTreeMap::<&str, i64>::new();
    let mut seen = std::collections::HashSet::new();
    for (r, status) in server.requests() {
        if !seen.insert(r.body.clone()) {
            continue;
        }
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let stage = match v["response_format"]["json_schema"]["name"].as_str() {
            Some("caption") => "caption",
            Some("question_items") => "questions",
            _ => "blind",
        };
        assert_eq!(status, 200);
        *sent.entry(stage).or_default() += 1;
    }
    assert_eq!(
        sent.get("caption"),
        Some(&4),
        "one caption a video: {sent:?}"
    );
    assert_eq!(sent.get("questions"), Some(&4), "{sent:?}");
    assert!(sent.get("blind").is_some_and(|n| *n >= 12), "{sent:?}");
    let o = run(&["cache", "stats", run_dir.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", err(&o));
    let stats = String::from_utf8_lossy(&o.stdout).to_string();
    let rows: Vec<Vec<&str>> = stats
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .collect();
    // The second table: stage, service, method, entries, batch, hits, misses, tokens in, out, USD.
    let mut at = vec![];
    for stage in ["caption", "questions", "blind"] {
        let c = rows
            .iter()
            .find(|c| c.len() == 10 && c[0] == stage)
            .unwrap_or_else(|| panic!("no {stage} row: {stats}"));
        assert_eq!(c[3], sent[stage].to_string(), "{stage}: {stats}");
        let row = format!(
            "| {stage} | {} | {} | {} | {} | {} | no price set |",
            c[1], c[2], c[3], c[7], c[8]
        );
        at.push(
            card.find(&row)
                .unwrap_or_else(|| panic!("{row} not in the card: {card}\n{stats}")),
        );
    }
    assert!(at.is_sorted(), "chain order: {card}");
    // The first table: the service's one line, whose totals are the card's.
    let totals: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|c| c.len() == 9 && c[0] == "openai")
        .collect();
    assert_eq!(totals.len(), 1, "{stats}");
    let t = totals[0];
    assert_eq!(t[2], sent.values().sum::<i64>().to_string(), "{stats}");
    let all = format!("| all | | | {} | {} | {} | 0.0000 |", t[2], t[6], t[7]);
    assert!(card.contains(&all), "{all} not in the card: {card}");
    assert!(!card.contains("is a guess"), "{card}");
    assert!(card.contains("Per kept video (4): "), "{card}");
    assert!(card.contains("Per kept item (12): "), "{card}");

    // The checksums hold the folder: a changed file is named, so is a missing one, by the
    // library and by `vidcurate verify RELEASE`.
    integrity::verify(&rel).unwrap();
    let verify = || {
        std::process::Command::new(bin())
            .arg("verify")
            .arg(&rel)
            .output()
            .unwrap()
    };
    let o = verify();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        said.contains(&format!("{} files as released", files.len())),
        "{said}"
    );
    let shard = rel.join(files.iter().find(|f| f.starts_with("questions/")).unwrap());
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes.push(b'\n');
    std::fs::write(&shard, &bytes).unwrap();
    let e = integrity::verify(&rel).unwrap_err();
    assert!(
        matches!(&e, IntegrityError::Changed { file, .. } if shard.ends_with(file)),
        "{e}"
    );
    assert!(e.to_string().contains("changed after release"), "{e}");
    let o = verify();
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    let name = shard.strip_prefix(&rel).unwrap().display().to_string();
    assert!(
        said.contains(&format!("{name}: changed after release")),
        "{said}"
    );
    assert!(err(&o).contains("1 of "), "{}", err(&o));
    std::fs::remove_file(rel.join("README.md")).unwrap();
    integrity::refresh(&rel).unwrap();
    integrity::verify(&rel).unwrap();
}

#[test]
fn a_card_file_that_cannot_be_used_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("card.toml");
    write(&card, "description = \"x\"\ndata_bias = \"typo\"\n");
    let out = dir.path().join("out");
    let o = run(
        &[
            "release",
            dir.path().join("no-run").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--card",
            card.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("card.toml") && e.contains("data_bias"), "{e}");
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("data_biases"), "the expected keys: {e}");
    write(&card, "has_synthetic_data = \"maybe\"\n");
    let o = run(
        &[
            "release",
            dir.path().join("no-run").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--card",
            card.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("has_synthetic_data"), "{}", err(&o));
    assert!(
        !out.exists(),
        "nothing written before the card file is read"
    );
}

/// A benchmark-task release (MVFNDB's SAC, its reference derived from the shots stage): each
/// task is a RecordSet whose records are its rows, beside the videos' and perturbations'.
#[test]
fn a_task_release_describes_each_task_config() {
    need_ffmpeg!();
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("demo"),
        &["--clips", "4", "--seconds", "3", "--seed", "5"],
    );
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks/mvfndb");
    let mut text = pipeline_with(
        "manifest = \"demo/manifest.csv\"",
        "{ count = 4 }",
        &[("shots", "shots")],
    );
    // The task file by its absolute path: the card must not show it.
    text += &format!(
        "\n[[stages]]\nid = \"sac\"\ntype = \"items\"\ncompute = {{ task = \"{}/sac.toml\" }}\n",
        tasks.display()
    );
    let p = d.path().join("p.toml");
    write(&p, &text);
    let run_dir = d.path().join("run");
    let o = run_into(&p, &run_dir, d.path());
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", err(&o));
    let o = run(&["split", run_dir.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", err(&o));
    let rel = d.path().join("release");
    let o = run(
        &[
            "release",
            run_dir.to_str().unwrap(),
            "--out",
            rel.to_str().unwrap(),
            "--harness",
            "lmms-eval",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", err(&o));
    let v = Command::new(venv_bin("mlcroissant"))
        .args(["validate", "--jsonld"])
        .arg(rel.join("croissant.json"))
        .output()
        .unwrap();
    assert!(v.status.success(), "mlcroissant validate: {}", err(&v));
    let got = check_croissant(&rel);
    let sets = got["record_sets"].as_object().unwrap();
    assert_eq!(
        sets.keys().collect::<Vec<_>>(),
        ["default", "perturbations", "sac"],
        "{got}"
    );
    for (name, s) in sets {
        assert_eq!(s["equal"], true, "{name}: {s}");
    }
    let videos = sets["default"]["records"].as_u64().unwrap();
    assert!(videos >= 4, "{got}");
    assert_eq!(sets["sac"]["records"], videos, "one SAC item a video");
    assert!(
        sets["sac"]["fields"]
            .as_array()
            .unwrap()
            .contains(&"answer_count".into()),
        "{got}"
    );
    let protocol = got["rai"]["rai:dataAnnotationProtocol"].to_string();
    assert!(
        protocol.contains(&format!(
            "task `sac`: reference derived; not reviewed by people ({videos} items to confirm)"
        )),
        "{protocol}"
    );
    // The task through lmms-eval's export, from the rows a real run released: each answer
    // (one off by one, one a word) scored as `evaluate` scores it.
    assert!(rel.join("harness/lmms_eval/release_sac.yaml").is_file());
    let mut preds = String::new();
    for (k, r) in table_rows_file_all(&rel.join("tasks/sac"))
        .iter()
        .enumerate()
    {
        let n: u32 = r["answer_count"].parse().unwrap();
        let answer = ["{n}", "{n} angles", "several"][k % 3].replace("{n}", &(n + 1).to_string());
        preds += &format!(
            "{{\"item_id\": \"{}\", \"prediction\": \"{answer}\"}}\n",
            r["item_id"]
        );
    }
    write(&rel.join("predictions.jsonl"), &preds);
    let (report, got) = crate::harness_tasks::scored_alike(&rel, "release");
    assert_eq!(got["compared"], 2, "{got}");
    // lmms-eval and `evaluate` score the test split: one item per test video.
    let test_videos = table_rows_file_all(&rel.join("data"))
        .iter()
        .filter(|r| r["split"] == "test")
        .count();
    assert!(test_videos > 0);
    assert_eq!(report["split"]["name"], "test", "{report}");
    assert_eq!(report["tasks"][0]["items"], test_videos, "{report}");
    let card = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(!card.contains(tasks.to_str().unwrap()), "{card}");
    // Relative to the pipeline file's folder, or its last parts (`…/mvfndb/sac.toml`) when
    // the two folders share only the root (where the clone lives decides which).
    let line = card
        .lines()
        .find(|l| l.contains("sac.toml"))
        .expect("the task file in the pipeline text");
    assert!(
        line.contains("mvfndb/sac.toml\"") && !line.contains("task = \"/"),
        "{line}"
    );
    assert!(
        card.contains("No model or API call: the run has no response cache."),
        "{card}"
    );
}
