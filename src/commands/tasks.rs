//! `vidcurate tasks`: check benchmark task files and list what each declares.

use crate::benchmark::formats::FORMATS;
use crate::benchmark::metrics::METRICS;
use crate::benchmark::task::{DERIVED_RULES, Task, load_dir};
use crate::error::{Exit, RunError};
use serde_json::json;
use std::path::PathBuf;

/// Check benchmark task files and list them: one line per task with its category, target
/// features, answer format, where its reference comes from, its metrics and its fingerprint.
///
/// A task file is a TOML file (see pipelines/tasks/mvfndb/ for MVFNDB's ten, and
/// pipelines/tasks/harmvideobench/levels.toml for HarmVideoBench's items, drafted per level of
/// a taxonomy file by the questions stage); a folder means
/// every *.toml in it. A file that cannot be used exits 2 naming file:line:key: an unknown
/// format, a metric that does not fit the format (e.g. mean_iou on a count), a hit_rate.FIELD
/// naming no reference list, a derived reference whose rule, stage type or columns do not exist,
/// a missing or empty prompt file.
///
/// Formats: single_choice, multiple_choice, count, time_ranges, reference_list, open_text,
/// tagged_reasoning. Metrics: accuracy, jaccard, macro_f1, abs_distance, mean_iou,
/// hit_rate.FIELD, factual_consistency, theme_relevance, completeness, rouge_l. Derived rules:
/// text_colour and text_cell (ocr), text_ranges (ocr), shot_count (shots).
#[derive(clap::Args)]
pub struct Args {
    /// Task files or folders of them.
    #[arg(default_value = "pipelines/tasks/mvfndb")]
    pub paths: Vec<PathBuf>,
    /// One JSON object per task instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let mut tasks = vec![];
    for p in &a.paths {
        if p.is_dir() {
            tasks.extend(load_dir(p)?);
        } else {
            tasks.push(Task::load(p)?);
        }
    }
    for t in &tasks {
        if a.json {
            println!("{}", describe(t));
        } else {
            println!("{}", line(t));
        }
    }
    eprintln!(
        "{} task file(s) checked ({} formats, {} metrics, {} derived rules known)",
        tasks.len(),
        FORMATS.len(),
        METRICS.len(),
        DERIVED_RULES.len()
    );
    Ok(Exit::Done)
}

fn reference(t: &Task) -> String {
    let r = &t.file.reference;
    match (&r.rule, &r.stage) {
        (Some(rule), Some(stage)) => {
            let review = if r.for_review { ", for review" } else { "" };
            format!(
                "derived: {rule} from {stage}({}){review}",
                r.columns.join(",")
            )
        }
        _ if r.fields.is_empty() => r.from.clone(),
        _ => format!("{} [{}]", r.from, r.fields.join(", ")),
    }
}

fn line(t: &Task) -> String {
    let f = &t.file;
    let targets: Vec<String> = f.targets.iter().map(|x| json_name(x)).collect();
    let mut s = format!(
        "{:<6} {:<13} {:<16} {:<32} {}",
        f.name,
        json_name(&f.category),
        t.format.name(),
        targets.join("+"),
        reference(t)
    );
    if !f.options.is_empty() {
        s += &format!(" | {} options", f.options.len());
    }
    if !f.labels.is_empty() {
        s += &format!(" | labels {}", f.labels.join("/"));
    }
    if let Some((tx, _)) = &t.taxonomy {
        s += &format!(
            " | per level of {} ({}; built by a questions stage)",
            tx.name,
            levels(t).join(", ")
        );
    }
    s += &format!(" | {} | {}", f.metrics.join(", "), t.fingerprint);
    s
}

fn json_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The level names of a task drafted per taxonomy level.
fn levels(t: &Task) -> Vec<String> {
    t.taxonomy
        .iter()
        .flat_map(|(tx, _)| tx.levels.iter().map(|l| l.name.clone()))
        .collect()
}

fn describe(t: &Task) -> serde_json::Value {
    let f = &t.file;
    let prompts: Vec<&str> = t.prompts.iter().map(|(r, _)| *r).collect();
    json!({
        "name": f.name,
        "title": f.title,
        "path": t.path.display().to_string(),
        "category": f.category,
        "targets": f.targets,
        "format": t.format.name(),
        "options": f.options.len(),
        "labels": f.labels,
        "metrics": f.metrics,
        "reference": f.reference,
        "prompts": prompts,
        "levels": levels(t),
        "fingerprint": t.fingerprint,
    })
}
