//! `vidcurate tasks`: the shipped MVFNDB task files check and list; a bad one exits 2 at its
//! file, line and key, as every configuration error does.

use crate::util::*;

#[test]
fn the_shipped_mvfndb_tasks_list_with_format_reference_and_metrics() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = run(&["tasks", "--json"], root);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let get = |n: &str| {
        rows.iter()
            .find(|r| r["name"] == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(rows.len(), 10);
    let formats: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["format"].as_str().unwrap()))
        .collect();
    assert_eq!(
        formats,
        [
            ("ccp", "single_choice"),
            ("cpp", "single_choice"),
            ("dcs", "reference_list"),
            ("fdr", "tagged_reasoning"),
            ("hir", "multiple_choice"),
            ("keg", "time_ranges"),
            ("kep", "reference_list"),
            ("neu", "open_text"),
            ("ntu", "single_choice"),
            ("sac", "count"),
        ]
    );
    assert_eq!(get("cpp")["options"], 30);
    assert_eq!(get("keg")["reference"]["rule"], "text_ranges");
    assert_eq!(get("sac")["reference"]["for_review"], true);
    assert_eq!(
        get("fdr")["prompts"],
        serde_json::json!(["draft", "refine", "judge"])
    );
    let cats: Vec<&str> = rows
        .iter()
        .map(|r| r["category"].as_str().unwrap())
        .collect();
    assert_eq!(cats.iter().filter(|c| **c == "perception").count(), 7);
    assert_eq!(cats.iter().filter(|c| **c == "understanding").count(), 2);
    // The text listing: one line per task.
    let o = run(&["tasks", "pipelines/tasks/mvfndb"], root);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(
        text.contains("derived: shot_count from shots(shots_in_video), for review"),
        "{text}"
    );
}

#[test]
fn a_task_whose_metric_does_not_fit_its_format_exits_2_at_the_line() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("sac.toml");
    write(
        &f,
        "name = \"sac\"\ncategory = \"perception\"\ntargets = [\"original_footage\"]\nformat = \"count\"\n\
         definition = \"d\"\nquestion = \"q\"\nmetrics = [\"abs_distance\", \"mean_iou\"]\n\n\
         [reference]\nfrom = \"people\"\n",
    );
    let o = run(&["tasks", f.to_str().unwrap()], d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sac.toml:7") && err.contains("metrics[1]"),
        "{err}"
    );
    assert!(
        err.contains("\"mean_iou\" does not fit the format \"count\""),
        "{err}"
    );
    // Fixed, the same file checks.
    write(
        &f,
        &std::fs::read_to_string(&f)
            .unwrap()
            .replace(", \"mean_iou\"", ""),
    );
    let o = run(&["tasks", f.to_str().unwrap()], d.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
