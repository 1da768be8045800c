//! A benchmark-task release (MVFNDB's ten tasks) for the harnesses:
//!
//! - lmms-eval: `harness/lmms_eval/<name>_<task>.yaml`, one task per released task, over its
//!   `tasks/<task>/*.parquet`, scored by the metrics of its format that need no judge (accuracy,
//!   Jaccard, absolute distance, mean IoU, ROUGE-L, each with its standard error clustered by
//!   video, and Macro-F1), and `<name>_tasks.yaml`, their group. The functions are the tasks
//!   part of `utils.py` (`templates/lmms_tasks_utils.py`), a port of `benchmark::formats`'
//!   parsers and `benchmark::score`. The judged metrics (hit rates, factual consistency, theme
//!   relevance, completeness) are named in each YAML's header and left to `vidcurate evaluate
//!   --judge`, as `evaluate` without a judge leaves them.
//! - VLMEvalKit: `harness/vlmevalkit/<name>_<task>.tsv` (and `_CIRC`) for each single-choice
//!   task of at most 26 options; its loader reads letters only, so a multiple choice, a count,
//!   a time range or a text task has no VLMEvalKit form, and CPP's 30 positions neither.
//!
//! Reads `tasks/tasks.json` and the task configs' Parquet; writes the files above; calls nothing.

use super::{ident, items_of, parquet_files, write_text};
use crate::benchmark::formats::{Format, MAX_LETTERED};
use crate::error::RunError;
use crate::release::split_files::split_of;
use serde::Deserialize;
use std::path::{Path, PathBuf};

const YAML: &str = include_str!("templates/lmms_tasks_task.yaml");
const UTILS: &str = include_str!("templates/lmms_tasks_utils.py");

/// What `tasks/tasks.json` says of a task (what the exports need).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TaskInfo {
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub category: String,
    pub format: String,
    #[serde(default)]
    pub metrics: Vec<String>,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// A released task with items: its description, format and files (relative to the release,
/// each with its rows).
#[derive(Debug, Clone)]
pub(crate) struct ReleasedTask {
    pub info: TaskInfo,
    pub format: Format,
    pub files: Vec<(String, usize)>,
    pub items: usize,
}

impl ReleasedTask {
    /// The metrics the harness computes: the format's own that the task lists, then Macro-F1.
    fn scored(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = crate::benchmark::score::computed(self.format)
            .iter()
            .copied()
            .filter(|m| self.info.metrics.iter().any(|x| x == m))
            .collect();
        if self.info.metrics.iter().any(|m| m == "macro_f1") {
            out.push("macro_f1");
        }
        out
    }

    /// The items lmms-eval scores: the test split's when `test`, else every item.
    fn scored_items(&self, test: bool) -> usize {
        self.files
            .iter()
            .filter(|(f, _)| !test || split_of(Path::new(f)) == Some("test"))
            .map(|(_, n)| n)
            .sum()
    }

    /// The task's metrics that need a judge.
    fn judged(&self) -> Vec<&str> {
        let scored = self.scored();
        self.info
            .metrics
            .iter()
            .map(String::as_str)
            .filter(|m| !scored.contains(m))
            .collect()
    }
}

/// The release's tasks that still have items, in `tasks.json`'s order; none without the file.
pub(crate) fn read(release: &Path) -> Result<Vec<ReleasedTask>, RunError> {
    let path = release.join("tasks/tasks.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(crate::error::io(&path)(e)),
    };
    let infos: Vec<TaskInfo> = serde_json::from_str(&text)
        .map_err(|e| RunError::Config(format!("{}: {e}", path.display())))?;
    let mut out = vec![];
    for info in infos {
        let format = Format::from_name(&info.format).ok_or_else(|| {
            RunError::Config(format!(
                "{}: task {}: unknown format {:?}",
                path.display(),
                info.name,
                info.format
            ))
        })?;
        let dir = release.join("tasks").join(&info.name);
        let mut files = vec![];
        let mut items = 0;
        for f in parquet_files(&dir, "a task config listed in tasks.json")? {
            let rows = rows_in(&f)?;
            items += rows;
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            files.push((format!("tasks/{}/{name}", info.name), rows));
        }
        // A takedown can leave a task with no item; lmms-eval cannot score an empty task.
        if items > 0 {
            out.push(ReleasedTask {
                info,
                format,
                files,
                items,
            });
        }
    }
    Ok(out)
}

/// A Parquet file's row count, from its footer.
fn rows_in(path: &Path) -> Result<usize, RunError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let f = std::fs::File::open(path).map_err(crate::error::io(path))?;
    let r = SerializedFileReader::new(f)
        .map_err(|e| RunError::Config(format!("{}: {e}", path.display())))?;
    Ok(r.metadata().file_metadata().num_rows().max(0) as usize)
}

/// The longest answer a format needs (reasoning and descriptions are long, letters short).
fn max_new_tokens(f: Format) -> u32 {
    match f {
        Format::SingleChoice | Format::MultipleChoice | Format::Count => 32,
        Format::TimeRanges => 128,
        Format::ReferenceList | Format::OpenText | Format::TaggedReasoning => 1024,
    }
}

fn task_id(name: &str, t: &ReleasedTask) -> String {
    format!("{name}_{}", ident(&t.info.name))
}

/// One YAML per task with items to score (in the test split when `test`) and the group over
/// them.
pub(super) fn write_lmms(
    release: &Path,
    name: &str,
    tasks: &[ReleasedTask],
    test: bool,
) -> Result<Vec<PathBuf>, RunError> {
    let dir = release.join("harness/lmms_eval");
    let mut written = vec![];
    let mut ids = vec![];
    // lmms-eval cannot run a task without documents.
    for t in tasks.iter().filter(|t| t.scored_items(test) > 0) {
        let id = task_id(name, t);
        let mut metrics = String::new();
        for m in t.scored() {
            let lower_better = m == "abs_distance";
            let (agg, se) = if m == "macro_f1" {
                ("task_macro_f1", None)
            } else {
                ("task_mean", Some("task_se"))
            };
            metrics += &super::metric_yaml(m, agg, !lower_better);
            if let Some(se) = se {
                metrics += &super::metric_yaml(&format!("{m}_se"), se, false);
            }
        }
        let judged = t.judged();
        let judged = if judged.is_empty() {
            "none".to_string()
        } else {
            judged.join(", ")
        };
        let files: Vec<String> = t.files.iter().map(|(f, _)| f.clone()).collect();
        let items = if test {
            format!("{} test items (of {})", t.scored_items(test), t.items)
        } else {
            format!("{} items", t.items)
        };
        let yaml = YAML
            .replace("{{task}}", &id)
            .replace("{{title}}", &t.info.title)
            .replace("{{items}}", &items)
            .replace("{{format}}", t.format.name())
            .replace("{{judged}}", &judged)
            .replace("{{dataset}}", &super::dataset_yaml(&files, test))
            .replace("{{max_new_tokens}}", &max_new_tokens(t.format).to_string())
            .replace("{{metric_list}}", metrics.trim_end());
        written.push(write_text(&dir.join(format!("{id}.yaml")), &yaml)?);
        ids.push(id);
    }
    if ids.is_empty() {
        return Ok(written);
    }
    let members: String = ids.iter().map(|t| format!("  - {t}\n")).collect();
    let group = format!(
        "# The group of {name}'s benchmark tasks. Their metrics differ by answer format, so the\n\
         # group reports each task's own and no mean over them (as `vidcurate evaluate` does).\n\
         group: {name}_tasks\ntask:\n{members}metadata:\n  version: 1.0\n"
    );
    written.push(write_text(&dir.join(format!("{name}_tasks.yaml")), &group)?);
    Ok(written)
}

/// The tasks part of `utils.py`: the template with each task's format, labels and metrics.
pub(super) fn utils_part(tasks: &[ReleasedTask]) -> String {
    let table: serde_json::Map<String, serde_json::Value> = tasks
        .iter()
        .map(|t| {
            (
                t.info.name.clone(),
                serde_json::json!({
                    "format": t.format.name(),
                    "labels": t.info.labels,
                    "metrics": t.scored(),
                }),
            )
        })
        .collect();
    let json = serde_json::Value::Object(table).to_string();
    // A JSON string literal is a Python string literal too.
    let literal = serde_json::Value::String(json).to_string();
    UTILS.replace("{{tasks}}", &literal)
}

/// A TSV pair per single-choice task that VLMEvalKit's letters can show.
pub(super) fn write_vlmevalkit(
    release: &Path,
    name: &str,
    tasks: &[ReleasedTask],
) -> Result<Vec<PathBuf>, RunError> {
    let mut written = vec![];
    for t in tasks {
        if t.format != Format::SingleChoice {
            tracing::info!(
                task = %t.info.name,
                "no VLMEvalKit export: its format {} is not one letter",
                t.format.name()
            );
            continue;
        }
        let mut items = vec![];
        for (f, _) in &t.files {
            items.extend(items_of(&release.join(f))?);
        }
        if let Some(wide) = items.iter().find(|i| i.options.len() > MAX_LETTERED) {
            tracing::info!(
                task = %t.info.name,
                "no VLMEvalKit export: {} options (VLMEvalKit letters at most {MAX_LETTERED})",
                wide.options.len()
            );
            continue;
        }
        for it in &mut items {
            it.level = t.info.category.clone();
        }
        written.extend(super::vlmevalkit::write(
            release,
            &task_id(name, t),
            &items,
        )?);
    }
    Ok(written)
}
