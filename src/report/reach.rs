//! What a run would do per video, for `run --dry-run`: the source listed again (a listing of
//! local files or a dataset; a source that spends a quota is taken as its stored rows, or as
//! the most its searches can find when nothing is stored), each record walked down the chain
//! as the stage loop would settle it, with no stage computing anything.
//!
//! At each stage a video is free when its stored settlement holds (the same input digest,
//! `runtime::rerun::decide`) and then goes on as its stored rows decide under today's
//! thresholds; otherwise the stage computes it, and it is assumed to pass (a bound), unless the
//! stage refuses it outright (`StageTask::refuses`: YouTube downloads off).
//!
//! Reads: the source's listing, every stage's shard footers (`peek_prior`) and the scoring
//! stages' threshold columns (`selection::decide`). Writes nothing; calls nothing; caches nothing.

use crate::error::RunError;
use crate::record::{Stamp, VideoRecord, id_key};
use crate::runtime::chain::{PlannedStage, SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use crate::runtime::rerun::{self, Settle};
use crate::runtime::stage::{Source, StageContext};
use crate::stages::selection::Decided;
use crate::store::run::RunView;
use crate::store::shards::{Prior, peek_prior};
use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};

/// What the source's listing is against the stored `source` table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceChanges {
    /// Videos listed (or, with `assumed`, the most a search can find).
    pub listed: u64,
    /// Whether the records are the stored ones or stand-ins (a source with a quota).
    pub assumed: bool,
    pub changed: u64,
    pub added: u64,
    pub removed: u64,
    /// The ids of the removed videos, sorted.
    pub removed_ids: Vec<String>,
    /// Listed records the source rejects (a missing file, an unmapped label).
    pub rejected: u64,
}

/// What one stage would do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageReach {
    /// Videos reaching it (at most).
    pub videos: u64,
    /// Of them, settled before with the same inputs: nothing to compute.
    pub free: u64,
    /// Of them, computed: `videos - free`.
    pub todo: u64,
    /// Of `todo`, settled before from other inputs (a rerun's recomputation).
    pub recomputed: u64,
    /// Videos it refuses before computing, by reason: nothing after it is priced for them.
    pub refused: BTreeMap<String, u64>,
}

/// The walk's result: the source, and the plan's stages in order.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    pub source: SourceChanges,
    pub stages: Vec<StageReach>,
}

/// A stage as the walk sees it: what its stored rows are, and how they go on.
struct Step<'a> {
    stage: &'a PlannedStage,
    reads: (Vec<crate::record::Slot>, bool),
    prior: Option<Prior<serde_json::Value>>,
}

/// Where the walk's records come from.
pub enum Listing {
    /// The source's own listing (files, a dataset), opened.
    Listed(Box<dyn Source>),
    /// The stored `source` rows: a source that spends a quota (its searches are priced apart;
    /// the videos they would add are not known without them), less those it could no longer
    /// list (`Source::could_list`). When none are stored, this many stand-ins like this
    /// record: the most its searches can find.
    /// With stored rows, the second count is what searches not made before may add (a
    /// collection again): that many stand-ins after the stored rows.
    Stored(u64, u64, Box<VideoRecord>, Box<dyn Source>),
}

/// `n` stand-ins like `rec` down the chain, each computed everywhere unless refused.
fn assumed(steps: &[Step<'_>], n: u64, mut rec: Box<VideoRecord>, extras: &[String]) -> Reach {
    rerun::source_lineage(&mut rec, extras);
    let mut out = Reach {
        source: SourceChanges {
            listed: n,
            assumed: true,
            added: n,
            ..Default::default()
        },
        stages: vec![StageReach::default(); steps.len()],
    };
    for _ in 0..n {
        settle_down(&mut out.stages, steps, None, (*rec).clone());
    }
    out
}

/// Walks every video of `listing` down `plan`'s chain against what the run directory holds
/// (`view`: None before the first run). `extras` names the source's extra columns.
pub async fn walk(
    stages: &[PlannedStage],
    pipeline: toml::Table,
    listing: Listing,
    extras: &[String],
    view: Option<RunView>,
    cx: StageContext,
) -> Result<Reach, RunError> {
    let mut steps = vec![];
    for st in stages {
        let prior = match &view {
            Some(v) => Some(peek_prior(&v.store, &st.id, &st.fingerprint).await?),
            None => None,
        };
        steps.push(Step {
            stage: st,
            reads: st.task.reads(),
            prior,
        });
    }
    let mut stream = match (listing, &view) {
        (Listing::Listed(source), _) => source.run(cx),
        (Listing::Stored(n, more, rec, source), Some(v)) => {
            match stored_records(v, extras, source.as_ref()).await? {
                None => return Ok(assumed(&steps, n, rec, extras)),
                Some(mut rows) => {
                    rows.extend((0..more).map(|i| {
                        let id = format!("new{i}");
                        Ok(Ok(VideoRecord::new(
                            id,
                            rec.source.clone(),
                            rec.extra.clone(),
                        )))
                    }));
                    futures::stream::iter(rows).boxed()
                }
            }
        }
        (Listing::Stored(n, _, rec, _), None) => return Ok(assumed(&steps, n, rec, extras)),
    };
    let (decided, source_prior) = match view {
        Some(v) => {
            let prior = peek_prior(&v.store, SOURCE_STAGE_ID, SOURCE_FINGERPRINT).await?;
            (Some(decided_under(v, stages, pipeline).await?), Some(prior))
        }
        None => (None, None),
    };
    let mut out = Reach {
        stages: vec![StageReach::default(); steps.len()],
        ..Default::default()
    };
    let mut listed: HashSet<u64> = HashSet::new();
    while let Some(item) = stream.next().await {
        match crate::runtime::refuse_unsafe_id(item?) {
            Ok(mut rec) => {
                let stored = source_prior.as_ref().and_then(|p| p.stamp(&rec.video_id));
                let stamp = rerun::source_lineage_since(&mut rec, extras, stored);
                listed.insert(id_key(&rec.video_id));
                out.source.listed += 1;
                compare_row(&mut out.source, source_prior.as_ref(), &rec.video_id, stamp);
                settle_down(&mut out.stages, &steps, decided.as_ref(), rec);
            }
            Err(_) => out.source.rejected += 1,
        }
    }
    if let Some(p) = &source_prior {
        let gone: HashSet<u64> = p.settled_keys().filter(|k| !listed.contains(k)).collect();
        out.source.removed = gone.len() as u64;
        let mut ids: Vec<String> = p.ids_of(&gone).await?.into_iter().map(|v| v.0).collect();
        ids.sort_unstable();
        ids.dedup();
        out.source.removed_ids = ids;
    }
    Ok(out)
}

/// The stored `source` rows as the records a rerun would pass on (None: nothing stored), less
/// those `source` could no longer list.
async fn stored_records(
    view: &RunView,
    extras: &[String],
    source: &dyn Source,
) -> Result<Option<Vec<SourceResult>>, RunError> {
    let table =
        crate::store::shards::read_table(&view.store, SOURCE_STAGE_ID, SOURCE_FINGERPRINT, true)
            .await?;
    let rows = table.rows::<crate::record::SourceInfo>()?;
    if rows.is_empty() {
        return Ok(None);
    }
    let columns: Vec<_> = extras
        .iter()
        .map(|name| table.column(name).unwrap_or_default())
        .collect();
    let records: Vec<SourceResult> = rows
        .into_iter()
        .filter_map(|(id, infos)| {
            let info = infos.into_iter().next().filter(|i| source.could_list(i))?;
            let extra = columns.iter().map(|c| c.get(&id).cloned()).collect();
            Some(Ok(Ok(VideoRecord::new(id, info, extra))))
        })
        .collect();
    Ok(Some(records))
}

type SourceResult = Result<crate::runtime::stage::SourceItem, RunError>;

/// The stored selection decided under the plan's thresholds, for the stages whose settings
/// are the plan's (another stage's stored rows are not what this run would read).
async fn decided_under(
    mut view: RunView,
    stages: &[PlannedStage],
    pipeline: toml::Table,
) -> Result<Decided, RunError> {
    view.pipeline = pipeline;
    view.manifest.stages.retain(|m| {
        m.id == SOURCE_STAGE_ID
            || stages
                .iter()
                .any(|s| s.id == m.id && s.fingerprint == m.fingerprint)
    });
    crate::stages::selection::decide(&view, &[]).await
}

/// Counts a listed row against the stored one.
fn compare_row(
    out: &mut SourceChanges,
    prior: Option<&Prior<serde_json::Value>>,
    id: &str,
    stamp: Stamp,
) {
    let Some(p) = prior else {
        out.added += 1;
        return;
    };
    if !p.is_done(id) && !p.is_rejected(id) {
        out.added += 1;
    } else if p.stamp(id).is_some_and(|s| s != stamp) {
        out.changed += 1;
    }
}

/// One video down the chain: at each stage free (then on as its stored rows decide) or
/// computed (then on, unless the stage refuses it).
fn settle_down(
    lines: &mut [StageReach],
    steps: &[Step<'_>],
    decided: Option<&Decided>,
    mut rec: VideoRecord,
) {
    for (line, step) in lines.iter_mut().zip(steps) {
        let st = step.stage;
        line.videos += 1;
        let (reads, extras) = &step.reads;
        let input = rerun::input_digest(reads, *extras, &rec.lineage);
        let input = rerun::salted(input, &st.input_salt);
        rec.lineage
            .set(st.task.provides(), rerun::output_digest(&st.id, input));
        let stamp = Stamp {
            input,
            extras: rec.lineage.extras,
        };
        let settle = match &step.prior {
            Some(p) => rerun::decide(p, &rec.video_id, stamp),
            None => Settle::Compute { replaces: None },
        };
        let goes_on = match settle {
            Settle::Reuse | Settle::Rewrite { .. } => {
                line.free += 1;
                decided
                    .and_then(|d| d.goes_on(&st.id, &rec.video_id))
                    .unwrap_or(true)
            }
            Settle::RejectedBefore | Settle::RestoreReject { .. } => {
                line.free += 1;
                false
            }
            Settle::Compute { replaces } => {
                line.todo += 1;
                line.recomputed += u64::from(replaces.is_some());
                match st.task.refuses(&rec) {
                    Some(e) => {
                        *line.refused.entry(e.detail).or_default() += 1;
                        false
                    }
                    None => true,
                }
            }
        };
        if !goes_on {
            return;
        }
    }
}
