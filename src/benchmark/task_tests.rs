//! Task files: the shipped ones load, and every bad one names its line and key.

use super::formats::Format;
use super::metrics::MetricKind;
use super::task::{Task, load_dir};
use crate::config::ConfigError;
use std::path::{Path, PathBuf};

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/tasks/mvfndb")
}

/// A task file written beside the shipped prompts, so `prompts/...` resolves.
fn parse(text: &str) -> Result<Task, ConfigError> {
    Task::parse(&shipped().join("t.toml"), text.to_string())
}

const GOOD: &str = r#"name = "x"
category = "perception"
targets = ["original_footage"]
format = "reference_list"
definition = "d"
question = "q"
metrics = ["hit_rate.elements"]

[reference]
from = "drafted"
fields = ["elements"]

[prompts]
draft = "prompts/draft-kep.txt"
"#;

#[test]
fn the_ten_mvfndb_tasks_load_with_their_formats_and_metrics() {
    let tasks = load_dir(&shipped()).unwrap();
    let names: Vec<&str> = tasks.iter().map(|t| t.file.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ccp", "cpp", "dcs", "fdr", "hir", "keg", "kep", "neu", "ntu", "sac"
        ]
    );
    let get = |n: &str| tasks.iter().find(|t| t.file.name == n).unwrap();
    assert_eq!(get("cpp").file.options.len(), 30);
    assert_eq!(get("cpp").file.options[0], "top far-left");
    assert_eq!(get("cpp").file.options[29], "bottom far-right");
    assert_eq!(get("ntu").file.options.len(), 6);
    assert_eq!(get("hir").format, Format::MultipleChoice);
    assert_eq!(get("keg").format, Format::TimeRanges);
    assert_eq!(get("sac").format, Format::Count);
    assert!(get("sac").file.reference.for_review);
    let fdr = get("fdr");
    assert_eq!(fdr.format, Format::TaggedReasoning);
    let hits: Vec<&str> = fdr
        .metrics
        .iter()
        .filter(|m| m.kind == MetricKind::HitRate)
        .filter_map(|m| m.field.as_deref())
        .collect();
    assert_eq!(hits, ["entities", "knowledge", "rationales"]);
    assert!(fdr.prompt("judge").unwrap().contains("logical_rationality"));
    // Every task has its own fingerprint.
    let mut fps: Vec<&str> = tasks.iter().map(|t| t.fingerprint.as_str()).collect();
    fps.sort();
    fps.dedup();
    assert_eq!(fps.len(), 10);
}

#[test]
fn a_prompt_changes_the_fingerprint() {
    let a = parse(GOOD).unwrap();
    let b = parse(&GOOD.replace("draft-kep", "draft-dcs")).unwrap();
    assert_ne!(a.fingerprint, b.fingerprint);
    assert_eq!(a.fingerprint, parse(GOOD).unwrap().fingerprint);
}

#[test]
fn bad_task_files_name_the_line_and_key() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "format = \"reference_list\"",
            "format = \"essay\"",
            ":4",
            &["format", "unknown format \"essay\""],
        ),
        (
            "metrics = [\"hit_rate.elements\"]",
            "metrics = [\"hit_rate.elements\", \"mean_iou\"]",
            ":7",
            &["metrics[1]", "does not fit"],
        ),
        (
            "metrics = [\"hit_rate.elements\"]",
            "metrics = [\"hit_rate.entities\"]",
            ":7",
            &["metrics[0]", "no list \"entities\""],
        ),
        (
            "from = \"drafted\"",
            "from = \"oracle\"",
            ":10",
            &["reference.from"],
        ),
        (
            "draft = \"prompts/draft-kep.txt\"",
            "draft = \"prompts/nope.txt\"",
            ":14",
            &["prompts.draft", "nope.txt"],
        ),
        (
            "category = \"perception\"",
            "category = \"vision\"",
            ":2",
            &["category"],
        ),
        (
            "fields = [\"elements\"]",
            "fields = []",
            ":11",
            &["reference.fields"],
        ),
        (
            "definition = \"d\"",
            "definition = \"d\"\ncolour = 1",
            ":6",
            &["colour"],
        ),
    ];
    for (from, to, line, wants) in cases {
        let e = parse(&GOOD.replace(from, to)).unwrap_err().to_string();
        assert!(e.contains(&format!("t.toml{line}")), "{to}: {e}");
        for w in *wants {
            assert!(e.contains(w), "{to}: wanted {w:?} in {e}");
        }
    }
}

#[test]
fn derived_references_must_name_a_real_rule_stage_and_columns() {
    let derived = |(rule, stage, columns, format): (&str, &str, &str, &str)| {
        format!(
            "name = \"x\"\ncategory = \"perception\"\ntargets = [\"creator_added\"]\nformat = \"{format}\"\n\
             definition = \"d\"\nquestion = \"q\"\noptions = [\"a\", \"b\"]\nmetrics = [\"accuracy\"]\n\n\
             [reference]\nfrom = \"derived\"\nrule = \"{rule}\"\nstage = \"{stage}\"\ncolumns = [{columns}]\n"
        )
    };
    let ok = "\"text\", \"text_color\", \"creator_added\"";
    let choice = "single_choice";
    parse(&derived(("text_colour", "ocr", ok, choice))).unwrap();
    let font = "\"text\", \"font_colour\"";
    let cases: &[((&str, &str, &str, &str), &[&str])] = &[
        (
            ("text_colour", "shots", ok, choice),
            &[":13", "reference.stage", "`ocr`"],
        ),
        (
            ("text_colour", "ocr", font, choice),
            &[":14", "reference.columns[1]", "\"font_colour\""],
        ),
        (
            ("text_colour", "ocr", "\"text\"", choice),
            &["reads the column \"text_color\""],
        ),
        (
            ("palette", "ocr", ok, choice),
            &[":12", "reference.rule", "text_colour"],
        ),
        (
            ("shot_count", "shots", "\"shots_in_video\"", choice),
            &["yields count answers"],
        ),
        (
            ("text_colour", "ocr", ok, "count"),
            &[":7", "a count task has no options"],
        ),
    ];
    for (task, wants) in cases {
        let e = parse(&derived(*task)).unwrap_err().to_string();
        for w in *wants {
            assert!(e.contains(w), "{task:?}: wanted {w:?} in {e}");
        }
    }
}
