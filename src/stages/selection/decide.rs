//! Every stage of a run decided per source video, as bits: done, rejected, and which of the done
//! ones go on under the pipeline's `select` and under the `--set` values; and the funnel over
//! those bits (Arrow's boolean kernels, a word at a time).
//!
//! Reads, through `scan`, each stage table of the manifest's fingerprint a shard at a time: the
//! source table's footers (its video ids), every other table's footers, and of a scoring stage
//! only the columns its rule reads (`rules`), compared by Arrow kernels as each batch streams
//! by. What is kept per video is a position in the sorted source ids (`ids::VideoIds`) and a
//! few bits per stage, never its rows; so memory grows with the videos (the ids, their index
//! and a few bits: under 100 bytes a video at the peak, while the ids are sorted), not with the
//! rows or the width of the tables. The stages decided from whole rows by their own
//! code (`rules::Rule::Rows`) hold their rows, as before. Writes nothing; caches nothing.

use super::ids::VideoIds;
use super::rules::{Rule, column_rule};
use super::scan::{IdList, Prepare, Shard, Take, for_each_shard};
use super::{FunnelRow, Override, reselect, scoring, threshold_error};
use crate::error::RunError;
use crate::record::COL_VIDEO_ID;
use crate::store::manifest::ManifestStage;
use crate::store::run::RunView;
use arrow::array::{Array, BooleanArray, BooleanBufferBuilder, RecordBatch, StringArray};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One stage after the source, decided per source video (positions in `Decided::ids`).
pub struct StageVerdicts {
    pub id: String,
    pub kind: String,
    /// Done and not rejected.
    done: BooleanBuffer,
    rejected: BooleanBuffer,
    /// Of the done, those that go on under the pipeline's `select`; None: every one.
    before: Option<BooleanBuffer>,
    /// Under the `--set` values; None when no `--set` names the stage (`before` decides).
    after: Option<BooleanBuffer>,
}

/// A run's stages decided, and the thresholds they were decided under.
pub struct Decided {
    /// The source's video ids, sorted.
    pub ids: Arc<VideoIds>,
    /// The stages after the source, in chain order.
    pub stages: Vec<StageVerdicts>,
    /// The new `select` settings of each scoring stage, defaults filled in.
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// A funnel over the source videos.
pub struct Funnel {
    pub rows: Vec<FunnelRow>,
    /// Per stage and source video: kept (true/false), or null when not reached or not done.
    pub kept: Vec<BooleanArray>,
    /// What comes out of the last stage (every video when there is none).
    pub selected: BooleanBuffer,
}

/// A stage's thresholds before and after the `--set` values, checked before any table is read.
struct Plan<'a> {
    stage: &'a ManifestStage,
    before: Option<Rule>,
    after: Option<Rule>,
}

/// Reads every stage table (current fingerprint only) and decides each scoring stage's videos
/// under its stored `select` and under the one with the `--set` values.
pub async fn decide(run: &RunView, overrides: &[Override]) -> Result<Decided, RunError> {
    let (plans, settings) = plan(run, overrides)?;
    let source = run
        .manifest
        .stages
        .iter()
        .find(|s| s.id == crate::runtime::chain::SOURCE_STAGE_ID);
    let ids = Arc::new(match source {
        Some(s) => source_ids(run, s).await?,
        None => VideoIds::build(&[])?,
    });
    let mut stages = vec![];
    for p in plans {
        stages.push(read_stage(run, &ids, p).await?);
    }
    Ok(Decided {
        ids,
        stages,
        settings,
    })
}

/// Each stage's rules under the stored `select` and (when a `--set` names it) the new one: a
/// mistaken value is reported before a large table is read.
fn plan<'a>(
    run: &'a RunView,
    overrides: &[Override],
) -> Result<(Vec<Plan<'a>>, BTreeMap<String, serde_json::Value>), RunError> {
    let selects = run.selects();
    let (mut plans, mut settings) = (vec![], BTreeMap::new());
    for st in &run.manifest.stages {
        if st.id == crate::runtime::chain::SOURCE_STAGE_ID {
            continue;
        }
        let stored = selects.get(&st.id).cloned().unwrap_or_default();
        let mut changed = stored.clone();
        let mut overridden = false;
        for o in overrides.iter().filter(|o| o.stage == st.id) {
            changed.insert(o.key.clone(), o.value.clone());
            overridden = true;
        }
        let mut plan = Plan {
            stage: st,
            before: None,
            after: None,
        };
        if scoring(&st.kind) {
            let (rule, mut applied) = rule_of(st, stored)?;
            plan.before = Some(rule);
            if overridden {
                let (rule, a) = rule_of(st, changed)?;
                (plan.after, applied) = (Some(rule), a);
            }
            settings.insert(st.id.clone(), applied);
        }
        plans.push(plan);
    }
    Ok((plans, settings))
}

/// A scoring stage's rule under `select`, and its thresholds as applied. The kinds decided from
/// whole rows are checked by their own `reselect` over no rows, which reads the thresholds only.
fn rule_of(st: &ManifestStage, select: toml::Table) -> Result<(Rule, serde_json::Value), RunError> {
    if let Some(r) = column_rule(&st.kind, &select).map_err(|e| threshold_error(&st.id, e))? {
        return Ok(r);
    }
    let empty = crate::store::shards::TableView::default();
    let checked = reselect(&st.kind, &st.id, &select, &empty)?;
    let applied = checked.map(|r| r.settings).unwrap_or_default();
    Ok((Rule::Rows(select), applied))
}

/// The source's video ids: the union of its shards' footer lists, sorted.
async fn source_ids(run: &RunView, st: &ManifestStage) -> Result<VideoIds, RunError> {
    let mut lists = vec![];
    let prepare: Prepare<IdList> = Arc::new(|s: Shard| Ok(s.done));
    for_each_shard(
        &run.store,
        &st.id,
        &st.fingerprint,
        Take::Footers,
        prepare,
        |l| {
            lists.push(l);
            Ok(())
        },
    )
    .await?;
    tokio::task::spawn_blocking(move || VideoIds::build(&lists))
        .await
        .map_err(|e| RunError::Internal(format!("sorting the source videos: {e}")))?
}

/// What a shard adds to a stage, found on the blocking pool: positions of its done and
/// rejected videos, and per row the video's position and its verdicts (bit 0: the stored
/// `select`, bit 1: the new one).
struct Hits {
    done: Vec<u32>,
    rejected: Vec<u32>,
    rows: Vec<(u32, u8)>,
    batches: Vec<RecordBatch>,
}

/// The stage's rules under the stored `select` and the new one.
type Rules = [Option<Rule>; 2];

/// Bits of `n` videos, all `v`.
pub(super) fn bits(n: usize, v: bool) -> BooleanBufferBuilder {
    let mut b = BooleanBufferBuilder::new(n);
    b.append_n(n, v);
    b
}

/// One stage's table streamed into its bits: done, rejected, and under each rule which done
/// videos go on (a video's first row decides a column rule; the stage's code the others).
async fn read_stage(
    run: &RunView,
    ids: &Arc<VideoIds>,
    plan: Plan<'_>,
) -> Result<StageVerdicts, RunError> {
    let st = plan.stage;
    let rules: Arc<Rules> = Arc::new([plan.before, plan.after]);
    let n = ids.len();
    let no_rows = |r: &Option<Rule>| r.as_ref().is_some_and(Rule::no_rows);
    let (mut done, mut rejected, mut seen) = (bits(n, false), bits(n, false), bits(n, false));
    let mut first = [bits(n, no_rows(&rules[0])), bits(n, no_rows(&rules[1]))];
    let mut batches = vec![];
    let prepare: Prepare<Hits> = {
        let (ids, rules, stage) = (ids.clone(), rules.clone(), st.id.clone());
        Arc::new(move |s: Shard| hits(&ids, &rules, &stage, s))
    };
    let take = take_for(&rules);
    for_each_shard(&run.store, &st.id, &st.fingerprint, take, prepare, |h| {
        h.done.iter().for_each(|&p| done.set_bit(p as usize, true));
        let rej = h.rejected.iter();
        rej.for_each(|&p| rejected.set_bit(p as usize, true));
        // A video's first row decides (`RowThresholds::keep` reads `rows.first()`).
        for (p, v) in h.rows {
            let p = p as usize;
            if !seen.get_bit(p) {
                seen.set_bit(p, true);
                first[0].set_bit(p, v & 1 != 0);
                first[1].set_bit(p, v & 2 != 0);
            }
        }
        batches.extend(h.batches);
        Ok(())
    })
    .await?;
    let rejected = rejected.finish();
    let done = &done.finish() & &!&rejected;
    // The stages decided by their own code see their rows as `read_table` gives them (rows
    // only: no `reselect` reads the done and rejected sets of its view).
    let mut view = crate::store::shards::TableView::default();
    view.batches = batches;
    let mut keep = [None, None];
    for (i, rule) in rules.iter().enumerate() {
        keep[i] = match rule {
            None => None,
            Some(Rule::Every) => Some(BooleanBuffer::new_set(n)),
            Some(Rule::FirstRow { .. }) => Some(first[i].finish()),
            Some(Rule::Rows(select)) => Some(keep_rows(st, select, &view, ids, &done)?),
        };
    }
    let [before, after] = keep;
    Ok(StageVerdicts {
        id: st.id.clone(),
        kind: st.kind.clone(),
        done,
        rejected,
        before,
        after,
    })
}

/// The columns the rules read, with the video ids; every column when a stage's own code decides.
fn take_for(rules: &Rules) -> Take {
    if rules.iter().flatten().any(|r| matches!(r, Rule::Rows(_))) {
        return Take::All;
    }
    let mut cols: Vec<String> = rules
        .iter()
        .flatten()
        .filter_map(Rule::column)
        .map(str::to_string)
        .collect();
    if cols.is_empty() {
        return Take::Footers;
    }
    cols.push(COL_VIDEO_ID.to_string());
    cols.sort();
    cols.dedup();
    Take::Columns(cols.into())
}

/// A shard's videos as positions among the source's (others are not in the funnel), and each
/// row's verdicts from its batch's rule column by an Arrow comparison kernel.
fn hits(ids: &VideoIds, rules: &Rules, stage: &str, s: Shard) -> Result<Hits, RunError> {
    let mut done_at = Vec::with_capacity(s.done.len());
    ids.positions(s.done.iter(), |p| done_at.push(p));
    let mut h = Hits {
        done: done_at.iter().flatten().copied().collect(),
        rejected: Vec::new(),
        rows: vec![],
        batches: vec![],
    };
    ids.positions(s.rejected.iter(), |p| h.rejected.extend(p));
    let columnar = rules.iter().flatten().any(|r| r.column().is_some());
    if !columnar {
        h.batches = s.batches;
        return Ok(h);
    }
    let bad = |e: String| {
        RunError::Config(format!(
            "select of stage {stage}: reading the stored rows: {e}"
        ))
    };
    // The writer lists a shard's videos in the order it wrote their rows: a row's video is
    // most often the previous row's or the next one of the footer, found with no lookup.
    let mut footer = s.done.iter().zip(done_at).peekable();
    let mut last: Option<(&str, Option<u32>)> = None;
    for b in s.batches.iter().filter(|b| b.num_rows() > 0) {
        let vids = b
            .column_by_name(COL_VIDEO_ID)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| bad(format!("no {COL_VIDEO_ID} column")))?;
        let verdict = |r: &Option<Rule>| match r {
            Some(r) => r.verdicts(r.column().and_then(|c| b.column_by_name(c)), b.num_rows()),
            None => Ok(BooleanArray::from(vec![true; b.num_rows()])),
        };
        let (v0, v1) = (
            verdict(&rules[0]).map_err(|e| bad(e.to_string()))?,
            verdict(&rules[1]).map_err(|e| bad(e.to_string()))?,
        );
        h.rows.reserve(b.num_rows());
        for i in 0..b.num_rows() {
            let id = vids.value(i);
            let p = match last {
                Some((prev, p)) if prev == id => p,
                _ => match footer.next_if(|(f, _)| *f == id) {
                    Some((_, p)) => p,
                    None => ids.position(id),
                },
            };
            last = Some((id, p));
            if let Some(p) = p {
                h.rows
                    .push((p, v0.value(i) as u8 | (v1.value(i) as u8) << 1));
            }
        }
    }
    Ok(h)
}

/// A stage decided by its own code over whole rows (`StageKind::reselect`): its verdict on
/// each done video.
fn keep_rows(
    st: &ManifestStage,
    select: &toml::Table,
    view: &crate::store::shards::TableView,
    ids: &VideoIds,
    done: &BooleanBuffer,
) -> Result<BooleanBuffer, RunError> {
    let mut keep = bits(ids.len(), false);
    if let Some(r) = reselect(&st.kind, &st.id, select, view)? {
        for p in done.set_indices() {
            keep.set_bit(p, (r.keep)(ids.id(p)));
        }
    }
    Ok(keep.finish())
}

impl Decided {
    /// The funnel over the videos of `start` (every source video, or a rank's share), under the
    /// pipeline's thresholds or (`after`) the `--set` ones.
    ///
    /// Every stage in chain order takes the videos the stages before it passed on; of those,
    /// `done` have rows, `rejected` failed there, `pending` were never reached, `out` go on.
    pub fn funnel(&self, start: BooleanBuffer, after: bool) -> Funnel {
        let mut current = start;
        let (mut rows, mut kept) = (vec![], vec![]);
        for st in &self.stages {
            let keep = match &st.after {
                Some(k) if after => Some(k),
                _ => st.before.as_ref(),
            };
            let rejected = &current & &st.rejected;
            let done = &current & &st.done;
            let next = keep.map_or_else(|| done.clone(), |k| &done & k);
            let input = current.count_set_bits();
            let (n_rej, n_done) = (rejected.count_set_bits(), done.count_set_bits());
            rows.push(FunnelRow {
                stage: st.id.clone(),
                kind: st.kind.clone(),
                input,
                done: n_done,
                rejected: n_rej,
                pending: input - n_rej - n_done,
                out: next.count_set_bits(),
            });
            // No validity buffer when every video is valid: the Parquet writer cuts pages
            // differently for an array that has one, and a selection's bytes stay as they were.
            let valid = Some(NullBuffer::new(&rejected | &done)).filter(|v| v.null_count() > 0);
            kept.push(BooleanArray::new(next.clone(), valid));
            current = next;
        }
        Funnel {
            rows,
            kept,
            selected: current,
        }
    }

    /// Whether the stored rows of stage `stage` for video `id` go on under the pipeline's
    /// thresholds: None when the stage holds no rows for it (or is not in the run).
    pub fn goes_on(&self, stage: &str, id: &str) -> Option<bool> {
        let st = self.stages.iter().find(|s| s.id == stage)?;
        let p = self.ids.position(id)? as usize;
        st.done
            .value(p)
            .then(|| st.before.as_ref().is_none_or(|k| k.value(p)))
    }

    /// The funnel over every source video.
    pub fn funnel_all(&self, after: bool) -> Funnel {
        self.funnel(BooleanBuffer::new_set(self.ids.len()), after)
    }

    /// The videos the pipeline's own thresholds selected (sorted ids), and the funnel.
    pub fn selected(&self) -> (Vec<String>, Vec<FunnelRow>) {
        let f = self.funnel_all(false);
        let ids = f.selected.set_indices().map(|p| self.ids.id(p).to_string());
        (ids.collect(), f.rows)
    }
}
