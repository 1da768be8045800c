//! The lmms-eval (0.7) task folder: `harness/lmms_eval/` with
//!
//! - `<name>_<level>.yaml`, one task per level (metrics `level_accuracy` and `clustered_se`);
//! - `<name>_all.yaml`: every item, the headline `macro_avg` (mean of the levels) and
//!   `macro_se`, the micro average and their standard errors clustered by video;
//! - `<name>_circular.yaml`: every item once per rotation of its options, scored CircularEval
//!   (an item counts only if every rotation is right);
//! - `<name>.yaml`, the group of all of them; its `level_accuracy` is the unweighted mean of the
//!   level tasks, the macro average;
//! - `utils.py` (rendered from `templates/lmms_utils.py`).
//!
//! Every task sets `cluster_key: video_id`, so lmms-eval adds its own clustered standard error
//! (`*_stderr_clustered`, Miller's formula without the G/(G−1) factor); `clustered_se` and
//! `macro_se` are `vidcurate evaluate`'s. Data files are the release's `questions/*.parquet`,
//! relative to the release folder (run lmms-eval from there), each split under its own name;
//! the tasks score the test split (`super::dataset_yaml`), and the levels are those its items
//! have.

use super::{Item, ident, write_text};
use crate::error::RunError;
use std::path::{Path, PathBuf};

const UTILS: &str = include_str!("templates/lmms_utils.py");
const TASK: &str = include_str!("templates/lmms_task.yaml");

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn task_yaml(
    task: &str,
    dataset: &str,
    (docs, results): (&str, &str),
    metrics: &[(&str, &str)],
) -> String {
    let list: String = metrics
        .iter()
        .map(|(m, agg)| super::metric_yaml(m, agg, !m.ends_with("_se")))
        .collect();
    TASK.replace("{{task}}", task)
        .replace("{{dataset}}", dataset)
        .replace("{{process_docs}}", docs)
        .replace("{{process_results}}", results)
        .replace("{{metric_list}}", list.trim_end())
}

/// The tasks of `items`, the questions lmms-eval scores (the test split's when `test`).
pub(super) fn write(
    release: &Path,
    name: &str,
    items: &[Item],
    test: bool,
) -> Result<Vec<PathBuf>, RunError> {
    let dir = release.join("harness/lmms_eval");
    let levels = super::first_seen(items, |i| &i.level);
    let files: Vec<String> = super::parquet_files(&release.join("questions"), "")?
        .iter()
        .filter_map(|f| f.file_name())
        .map(|f| format!("questions/{}", f.to_string_lossy()))
        .collect();
    let data_files = super::dataset_yaml(&files, test);
    let mut written = vec![];
    let mut tasks = vec![];
    for (i, l) in levels.iter().enumerate() {
        let mut id = ident(l);
        // Two levels that differ only in punctuation would share a task name.
        if id.is_empty() || tasks.contains(&format!("{name}_{id}")) {
            id = format!("level{i}");
        }
        let task = format!("{name}_{id}");
        let yaml = task_yaml(
            &task,
            &data_files,
            (&format!("docs_level_{i}"), "process_results_level"),
            &[
                ("level_accuracy", "mean_score"),
                ("clustered_se", "mean_se"),
            ],
        );
        written.push(write_text(&dir.join(format!("{task}.yaml")), &yaml)?);
        tasks.push(task);
    }
    let all = format!("{name}_all");
    let yaml = task_yaml(
        &all,
        &data_files,
        ("docs_all", "process_results_all"),
        &[
            ("macro_avg", "macro_avg"),
            ("macro_se", "macro_se"),
            ("micro_avg", "mean_score"),
            ("micro_se", "mean_se"),
        ],
    );
    written.push(write_text(&dir.join(format!("{all}.yaml")), &yaml)?);
    let circ = format!("{name}_circular");
    let yaml = task_yaml(
        &circ,
        &data_files,
        ("docs_circular", "process_results_circular"),
        &[
            ("circular_macro_avg", "circular_macro_avg"),
            ("circular_macro_se", "circular_macro_se"),
            ("circular_micro_avg", "circular_micro_avg"),
            ("circular_micro_se", "circular_micro_se"),
        ],
    );
    written.push(write_text(&dir.join(format!("{circ}.yaml")), &yaml)?);
    let members: String = tasks
        .iter()
        .chain([&all, &circ])
        .map(|t| format!("  - {t}\n"))
        .collect();
    let group = format!(
        "# The group of {name}'s tasks. Its level_accuracy is the unweighted mean of the level\n\
         # tasks: the macro average over levels, the headline `vidcurate evaluate` reports.\n\
         group: {name}\ntask:\n{members}aggregate_metric_list:\n  - metric: level_accuracy\n    \
         aggregation: mean\n    weight_by_size: false\nmetadata:\n  version: 1.0\n"
    );
    written.push(write_text(&dir.join(format!("{name}.yaml")), &group)?);
    Ok(written)
}

/// `utils.py`: the questions' functions (levels, CircularEval) and, when the release has
/// benchmark tasks, the tasks' (`templates/lmms_tasks_utils.py`).
pub(super) fn write_utils(
    release: &Path,
    name: &str,
    items: &[Item],
    tasks: &[super::tasks::ReleasedTask],
) -> Result<PathBuf, RunError> {
    let levels = super::first_seen(items, |i| &i.level);
    let level_fns: String = (0..levels.len())
        .map(|i| {
            format!(
                "\n\ndef docs_level_{i}(dataset):\n    return _only_level(dataset, LEVELS[{i}])\n"
            )
        })
        .collect();
    let level_list = format!(
        "[{}]",
        levels
            .iter()
            .map(|l| quoted(l))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut utils = UTILS
        .replace("{{name}}", name)
        .replace("{{levels}}", &level_list)
        .replace("{{level_functions}}", level_fns.trim_end());
    if !tasks.is_empty() {
        utils += &super::tasks::utils_part(tasks);
    }
    write_text(&release.join("harness/lmms_eval/utils.py"), &utils)
}
