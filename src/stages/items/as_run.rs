//! The task file an `items` stage of a run was built from: its `compute.task` in the pipeline
//! as run (relative to the pipeline file), read again and checked to still have the
//! fingerprint the stage's items were made with, so a release or a review never pairs items
//! with a task file edited since. Reads the manifest and the task file; writes, calls and
//! caches nothing.

use crate::benchmark::task::Task;
use crate::error::RunError;
use crate::store::manifest::Manifest;
use std::path::{Path, PathBuf};

fn task_path(m: &Manifest, stage: &str) -> Option<PathBuf> {
    let doc: toml::Table = m.pipeline_toml.parse().ok()?;
    let st = crate::store::run::stage_table(&doc, stage)?;
    let rel = st.get("compute")?.get("task")?.as_str()?;
    let base = Path::new(&m.pipeline_file)
        .parent()
        .unwrap_or(Path::new("."));
    Some(base.join(rel))
}

/// Stage `stage`'s task file, checked against `fingerprint` (the stage's `compute.task` in
/// the manifest); exit 2 naming the file when it changed.
pub fn task_of_run(m: &Manifest, stage: &str, fingerprint: &str) -> Result<Task, RunError> {
    let path = task_path(m, stage).ok_or_else(|| {
        RunError::Config(format!(
            "stage {stage}: the pipeline as run names no task file"
        ))
    })?;
    let task = Task::load(&path)?;
    if task.fingerprint != fingerprint {
        return Err(RunError::Config(format!(
            "{}: the task file changed since stage {stage} made its items (fingerprint {} now, {fingerprint} then): restore it, or run the stage again",
            path.display(),
            task.fingerprint
        )));
    }
    Ok(task)
}

/// Every `items` stage of the run: its id and its task file (checked).
pub fn run_tasks(m: &Manifest) -> Result<Vec<(String, String, Task)>, RunError> {
    m.stages
        .iter()
        .filter(|s| s.kind == super::KIND.name)
        .map(|st| {
            let fingerprint = st.compute["task"].as_str().unwrap_or_default();
            Ok((
                st.id.clone(),
                st.fingerprint.clone(),
                task_of_run(m, &st.id, fingerprint)?,
            ))
        })
        .collect()
}
