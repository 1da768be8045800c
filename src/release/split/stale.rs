//! Splits a rerun has outgrown: the videos a stored split holds that the run's pipeline no longer
//! selects (removed from the source, changed, or filtered by a threshold raised since), so that
//! `status` can name them before a `release` quietly leaves them out.
//!
//! Reads `splits/*.parquet`, their `NAME.json`, and the run's selection; writes nothing.

use crate::error::RunError;
use crate::store::run::RunView;

/// A stored split some of whose videos the run no longer selects.
#[derive(Debug, Clone, PartialEq)]
pub struct StaleSplit {
    pub name: String,
    /// Videos the split holds.
    pub videos: usize,
    /// Of them, no longer selected.
    pub left: usize,
    /// The command that makes it again: as it was asked for (NAME.json), else the name alone.
    pub command: String,
}

/// Every stored split of `run` that holds videos the run no longer selects, by name.
pub async fn stale_splits(run: &RunView, shown_as: &str) -> Result<Vec<StaleSplit>, RunError> {
    let listed = run
        .store
        .list("splits")
        .await
        .map_err(|e| run.store.io_error("splits", e))?;
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|p| p.strip_prefix("splits/")?.strip_suffix(".parquet"))
        .filter(|n| !n.contains('/'))
        .collect();
    if names.is_empty() {
        return Ok(vec![]);
    }
    let (selected, _) = crate::stages::selection::pipeline_selection(run).await?;
    let mut out = vec![];
    for name in names {
        let (placed, report) = crate::stages::selection::read_split(&run.store, name).await?;
        // `selected` is sorted (`pipeline_selection`).
        let left = placed
            .keys()
            .filter(|v| selected.binary_search(v).is_err())
            .count();
        if left == 0 {
            continue;
        }
        let command = match report["command"].as_str() {
            Some(c) => c.to_string(),
            None => format!(
                "vidcurate split {shown_as} --name {name} (with the settings in splits/{name}.json)"
            ),
        };
        out.push(StaleSplit {
            name: name.to_string(),
            videos: placed.len(),
            left,
            command,
        });
    }
    Ok(out)
}

/// How `status` says it.
pub fn render(s: &StaleSplit) -> String {
    format!(
        "split `{}`: {} of its {} videos are no longer selected by the run (removed, changed or filtered since the split was made); a release leaves them out. Make it again: {}\n",
        s.name, s.left, s.videos, s.command
    )
}
