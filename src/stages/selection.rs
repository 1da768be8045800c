//! A run's selection: each scoring stage's stored rows decided again under its `select`
//! thresholds, and the funnel they make — which videos each stage took, kept, rejected or never
//! reached. What `rethreshold`, `status`, the dry run, `split`, `release` and `annotate export`
//! start from. Reads the run's tables through a `RunView`; writes nothing.
//!
//! Funnel: every stage in chain order takes the videos the stages before it passed on; of those,
//! `done` have rows, `rejected` failed there, `pending` were never reached (a lower threshold
//! upstream lets through videos a rerun must still score), and `out` go on.
//!
//! The work is in `selection/`: `decide` reads each table a shard at a time (`scan`) into a few
//! bits per source video (`ids`), scoring stages through column rules (`rules`), and runs the
//! funnel over those bits. This file holds the types other commands use and their entry points.

mod decide;
mod ids;
mod rules;
mod scan;

pub use decide::{Decided, Funnel, decide};

use super::{Reselected, stage_kind};
use crate::error::RunError;
use crate::store::run::RunView;
use crate::store::shards::TableView;
use arrow::array::Array;
use serde::Serialize;
use std::collections::BTreeMap;

/// `stage.key=value` from the command line.
#[derive(Debug, Clone)]
pub struct Override {
    pub stage: String,
    pub key: String,
    pub value: toml::Value,
}

impl std::str::FromStr for Override {
    type Err = crate::error::BadArgument;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |m: String| crate::error::BadArgument(m);
        let (lhs, v) = s.split_once('=').ok_or_else(|| {
            bad(format!(
                "{s:?}: expected STAGE.KEY=VALUE, e.g. relevance.min_score=8"
            ))
        })?;
        let (stage, key) = lhs
            .trim()
            .split_once('.')
            .ok_or_else(|| bad(format!("{s:?}: expected STAGE.KEY=VALUE")))?;
        let v = v.trim();
        // A TOML value (8, 0.5, true, "x"); bare words are strings.
        let value = toml::from_str::<toml::Table>(&format!("v = {v}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(v.to_string()));
        Ok(Self {
            stage: stage.to_string(),
            key: key.to_string(),
            value,
        })
    }
}

/// One line of the funnel.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FunnelRow {
    pub stage: String,
    pub kind: String,
    pub input: usize,
    pub done: usize,
    pub rejected: usize,
    pub pending: usize,
    pub out: usize,
}

/// A scoring stage's `select` (stored, or with the `--set` values) applied to its rows by the
/// stage's own code; None for stages without thresholds.
fn reselect(
    kind: &str,
    stage: &str,
    select: &toml::Table,
    view: &TableView,
) -> Result<Option<Reselected>, RunError> {
    let Some(f) = stage_kind(kind).and_then(|k| k.reselect) else {
        return Ok(None);
    };
    f(select, view)
        .map(Some)
        .map_err(|e| threshold_error(stage, e))
}

/// A bad threshold of `stage`, named by its key.
fn threshold_error(stage: &str, e: super::ThresholdError) -> RunError {
    RunError::Config(if e.key.is_empty() {
        format!("select of stage {stage}: {}", e.message)
    } else {
        format!("{stage}.{}: {}", e.key, e.message)
    })
}

/// Whether a stage kind has thresholds to re-decide.
pub fn scoring(kind: &str) -> bool {
    stage_kind(kind).is_some_and(|k| k.reselect.is_some())
}

/// What the funnels are computed from, with the source's ids as strings for the commands that
/// take a share of them (`status`: a rank's).
pub struct RunStages {
    /// The source's video ids, sorted.
    pub sources: Vec<String>,
    pub decided: Decided,
}

/// Reads every stage's table (current fingerprint only) and decides each scoring stage's videos
/// under its stored `select` and under the one with the `--set` values.
pub async fn read_stages(run: &RunView, overrides: &[Override]) -> Result<RunStages, RunError> {
    let decided = decide(run, overrides).await?;
    let sources = decided
        .ids
        .column()
        .iter()
        .map(|s| s.unwrap_or_default().to_string())
        .collect();
    Ok(RunStages { sources, decided })
}

impl RunStages {
    /// The funnel over `sources` (the run's, or a share of them), under the pipeline's
    /// thresholds or (`after`) the `--set` ones; with, per stage and source video, whether it
    /// was kept (None: not reached or not done). An id that is not a source video is counted
    /// pending at the first stage.
    pub fn funnel_of(
        &self,
        sources: &[String],
        after: bool,
    ) -> (Vec<FunnelRow>, Vec<Vec<Option<bool>>>) {
        let ids = &self.decided.ids;
        let all = std::ptr::eq(sources, self.sources.as_slice());
        let positions: Vec<Option<u32>> = if all {
            (0..sources.len() as u32).map(Some).collect()
        } else {
            sources.iter().map(|s| ids.position(s)).collect()
        };
        let mut start = decide::bits(ids.len(), false);
        positions
            .iter()
            .flatten()
            .for_each(|&p| start.set_bit(p as usize, true));
        let f = self.decided.funnel(start.finish(), after);
        let mut rows = f.rows;
        let unknown = positions.iter().filter(|p| p.is_none()).count();
        if let Some(first) = rows.first_mut() {
            first.input += unknown;
            first.pending += unknown;
        }
        let kept = f
            .kept
            .iter()
            .map(|k| {
                let at = |p: u32| k.is_valid(p as usize).then(|| k.value(p as usize));
                positions.iter().map(|p| p.and_then(at)).collect()
            })
            .collect();
        (rows, kept)
    }
}

/// The videos a run's pipeline selected under its own thresholds (sorted ids) and the funnel
/// that selected them: what `split` and a release start from.
pub async fn pipeline_selection(run: &RunView) -> Result<(Vec<String>, Vec<FunnelRow>), RunError> {
    Ok(decide(run, &[]).await?.selected())
}

/// A split made before: video id → split name, and the split's report (`NAME.json`, Null when
/// missing). The error says how to make it.
pub async fn read_split(
    store: &std::sync::Arc<dyn crate::store::Store>,
    name: &str,
) -> Result<(BTreeMap<String, String>, serde_json::Value), RunError> {
    let path = format!("splits/{name}.parquet");
    let data = store.get(&path).await.map_err(|e| {
        RunError::Config(format!(
            "{}/{path}: {e}: make the split first, e.g. `vidcurate split RUN --name {name} --stratify label`",
            store.location()
        ))
    })?;
    let mut out = BTreeMap::new();
    for b in crate::store::shards::table_batches(&path, data)? {
        let (Some(ids), Some(splits)) = (
            crate::store::shards::text_column(&b, "video_id"),
            crate::store::shards::text_column(&b, "split"),
        ) else {
            return Err(RunError::Internal(format!(
                "{path}: no video_id or split column"
            )));
        };
        for i in 0..b.num_rows() {
            out.insert(ids.value(i).to_string(), splits.value(i).to_string());
        }
    }
    let report = match store.get(&format!("splits/{name}.json")).await {
        Ok(d) => serde_json::from_slice(&d).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    Ok((out, report))
}
