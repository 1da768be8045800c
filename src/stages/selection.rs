//! A run's selection: each scoring stage's stored rows decided again under its `select`
//! thresholds (the stage's own threshold type, through the registry's `reselect`), and the
//! funnel they make — which videos each stage took, kept, rejected or never reached. What
//! `rethreshold`, `status`, the dry run, `split`, `release` and `annotate export` start from.
//! Reads the run's tables through a `RunView`; writes nothing.
//!
//! Funnel: every stage in chain order takes the videos the stages before it passed on; of those,
//! `done` have rows, `rejected` failed there, `pending` were never reached (a lower threshold
//! upstream lets through videos a rerun must still score), and `out` go on.

use super::{Reselected, stage_kind};
use crate::error::RunError;
use crate::store::run::RunView;
use crate::store::shards::{TableView, read_table};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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

/// A scoring stage's `select` (stored, or with the `--set` values) applied to its rows; None for
/// stages without thresholds.
fn reselect(
    kind: &str,
    stage: &str,
    select: &toml::Table,
    view: &TableView,
) -> Result<Option<Reselected>, RunError> {
    let Some(f) = stage_kind(kind).and_then(|k| k.reselect) else {
        return Ok(None);
    };
    f(select, view).map(Some).map_err(|e| {
        RunError::Config(if e.key.is_empty() {
            format!("select of stage {stage}: {}", e.message)
        } else {
            format!("{stage}.{}: {}", e.key, e.message)
        })
    })
}

/// Whether a stage kind has thresholds to re-decide.
pub fn scoring(kind: &str) -> bool {
    stage_kind(kind).is_some_and(|k| k.reselect.is_some())
}

/// One stage of a run as the funnel reads it: its stored table and its thresholds, as the
/// pipeline had them (`before`) and with the `--set` values (`after`).
pub struct StageData {
    pub id: String,
    pub kind: String,
    pub view: TableView,
    before: Option<Reselected>,
    /// None when no `--set` names the stage: `before` decides both funnels.
    after: Option<Reselected>,
}

fn funnel(
    sources: &[String],
    stages: &[StageData],
    after: bool,
) -> (Vec<FunnelRow>, Vec<Vec<Option<bool>>>) {
    let mut current: Vec<&String> = sources.iter().collect();
    let mut rows = vec![];
    // Per stage, per source video: kept (Some(true/false)) or not reached / not done (None).
    let mut kept: Vec<Vec<Option<bool>>> = vec![];
    let index: HashMap<&String, usize> = sources.iter().enumerate().map(|(i, s)| (s, i)).collect();
    for st in stages {
        let rule = match &st.after {
            Some(_) if after => &st.after,
            _ => &st.before,
        };
        let mut r = FunnelRow {
            stage: st.id.clone(),
            kind: st.kind.clone(),
            input: current.len(),
            ..Default::default()
        };
        let mut col = vec![None; sources.len()];
        let mut next = vec![];
        for id in current {
            if st.view.rejected.contains(id.as_str()) {
                r.rejected += 1;
                col[index[id]] = Some(false);
            } else if st.view.done.contains(id.as_str()) {
                r.done += 1;
                let k = rule.as_ref().is_none_or(|rule| (rule.keep)(id));
                col[index[id]] = Some(k);
                if k {
                    next.push(id);
                }
            } else {
                r.pending += 1;
            }
        }
        r.out = next.len();
        rows.push(r);
        kept.push(col);
        current = next;
    }
    (rows, kept)
}

/// What the funnels are computed from.
pub struct RunStages {
    /// The source's video ids, sorted.
    pub sources: Vec<String>,
    /// The stages after the source, in chain order.
    pub stages: Vec<StageData>,
    /// The new `select` settings of each scoring stage, defaults filled in.
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// Reads every stage's table (current fingerprint only) and decides each scoring stage's videos
/// under its stored `select` and under the one with the `--set` values.
pub async fn read_stages(run: &RunView, overrides: &[Override]) -> Result<RunStages, RunError> {
    let selects = run.selects();
    let mut out = RunStages {
        sources: vec![],
        stages: vec![],
        settings: BTreeMap::new(),
    };
    for st in &run.manifest.stages {
        let view = read_table(&run.store, &st.id, &st.fingerprint, scoring(&st.kind)).await?;
        if st.id == crate::runtime::chain::SOURCE_STAGE_ID {
            let mut ids: Vec<String> = view.done.iter().cloned().collect();
            ids.sort();
            out.sources = ids;
            continue;
        }
        let stored = selects.get(&st.id).cloned().unwrap_or_default();
        let mut changed = stored.clone();
        let mut overridden = false;
        for o in overrides.iter().filter(|o| o.stage == st.id) {
            changed.insert(o.key.clone(), o.value.clone());
            overridden = true;
        }
        // Deciding reads the stage's rows into a per-video map: done twice only for a stage
        // whose thresholds change (the rows of a large stage are most of the command's cost).
        let before = reselect(&st.kind, &st.id, &stored, &view)?;
        let after = if overridden {
            reselect(&st.kind, &st.id, &changed, &view)?
        } else {
            None
        };
        if let Some(r) = after.as_ref().or(before.as_ref()) {
            out.settings.insert(st.id.clone(), r.settings.clone());
        }
        out.stages.push(StageData {
            id: st.id.clone(),
            kind: st.kind.clone(),
            view,
            before,
            after,
        });
    }
    Ok(out)
}

impl RunStages {
    /// The funnel over `sources` (the run's, or one rank's share), under the pipeline's
    /// thresholds or (`after`) the `--set` ones; with, per stage and source video, whether it
    /// was kept (None: not reached or not done).
    pub fn funnel_of(
        &self,
        sources: &[String],
        after: bool,
    ) -> (Vec<FunnelRow>, Vec<Vec<Option<bool>>>) {
        funnel(sources, &self.stages, after)
    }

    /// The videos the pipeline's own thresholds selected (sorted ids), and the funnel.
    pub fn selected(&self) -> (Vec<String>, Vec<FunnelRow>) {
        let (rows, kept) = self.funnel_of(&self.sources, false);
        let selected = self
            .sources
            .iter()
            .enumerate()
            .filter(|(i, _)| kept.last().is_none_or(|k| k[*i] == Some(true)))
            .map(|(_, id)| id.clone())
            .collect();
        (selected, rows)
    }
}

/// The videos a run's pipeline selected under its own thresholds (sorted ids) and the funnel
/// that selected them: what `split` and a release start from.
pub async fn pipeline_selection(run: &RunView) -> Result<(Vec<String>, Vec<FunnelRow>), RunError> {
    Ok(read_stages(run, &[]).await?.selected())
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
