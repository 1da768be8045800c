//! The source task: reads the source's stream, persists the `source` table (every rank's videos
//! on the rank that collects for all), and forwards this rank's records to the first stage.
//! Reads the table's prior shards; writes the `source` table, its rejects and the
//! collected-marker; calls `Source::run`.

use super::stage::{self, StageContext};
use super::stage_loop::{RejectLog, note_lost, open_stage_tables};
use super::{StageCounts, StageSettings, collected, ranks};
use crate::error::RunError;
use crate::record::{SourceInfo, VideoRecord};
use crate::runtime::progress::StageProgress;
use crate::runtime::watch::StageWatch;
use crate::store::shards::{self, ShardWriter};
use futures::StreamExt;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the source task is in this worker.
pub struct SourceRole {
    /// Rank 0 of a ranked run whose source collects once: the run's pipeline fingerprint, which
    /// the completion marker names.
    pub collect_for: Option<String>,
    /// Where a source that stops half-way leaves its error, for the runner to report once the
    /// other stages have drained.
    pub stopped: Arc<std::sync::Mutex<Option<RunError>>>,
}

/// Reads the source stream, persists the `source` table, forwards the records (this rank's).
/// With `collect_for` (rank 0 of a ranked run whose source collects once; the run's pipeline
/// fingerprint) every video is
/// persisted, and a marker tells the other ranks when the table is complete.
pub async fn run_source(
    source: Box<dyn stage::Source>,
    output: mpsc::Sender<VideoRecord>,
    cx: StageContext,
    settings: StageSettings,
    progress: Arc<StageProgress>,
    watch: Arc<StageWatch>,
    role: SourceRole,
) -> Result<StageCounts, RunError> {
    let SourceRole {
        collect_for,
        stopped,
    } = role;
    let for_all_ranks = collect_for.is_some();
    let table_cx = source_table_context(&cx, for_all_ranks);
    let (prior, writer) = open_stage_tables::<SourceInfo>(&table_cx, &settings).await?;
    let mut ended = false;
    let cancel = cx.cancel.clone();
    let mut table = SourceTable {
        prior,
        writer,
        counts: StageCounts::default(),
        rejects: RejectLog::default(),
        committed_elsewhere: source.already_committed(),
    };
    let mut items = source.run(cx.clone());
    loop {
        let item = tokio::select! {
            _ = cancel.cancelled() => break,
            i = items.next() => match i {
                Some(Ok(i)) => i,
                Some(Err(e)) => {
                    // What came before goes on down the chain; the runner reports `e` once the
                    // other stages have drained.
                    tracing::warn!(error = %e, "The source stopped; finishing the videos it passed on.");
                    *stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    break;
                }
                None => { ended = true; break }
            },
        };
        let item = refuse_unsafe_id(item);
        let id = match &item {
            Ok(rec) => &rec.video_id,
            Err(rej) => &rej.video_id,
        };
        if !cx.rank.owns(id) {
            if for_all_ranks {
                keep_for_other_rank(item, &table.prior, &mut table.writer);
                table.writer.maybe_flush().await?;
                cx.tally.add("collected_for_other_ranks", 1);
            }
            // Otherwise that rank lists, persists and forwards it itself.
            continue;
        }
        if !table.settle(item, &output, &progress, &watch).await? {
            break;
        }
    }
    let collected_for = collect_for.as_deref().filter(|_| ended);
    table.close(&cx, collected_for, &progress, &watch).await
}

/// A record whose id cannot name a file becomes a reject (`unsafe_id`), whatever the source: the
/// sources that know a file and line refuse such ids themselves, and this catches the rest
/// before any stage builds a path from one.
fn refuse_unsafe_id(item: stage::SourceItem) -> stage::SourceItem {
    let rec = item?;
    match crate::record::video_id_problem(&rec.video_id) {
        None => Ok(rec),
        Some(why) => Err(stage::SourceReject {
            video_id: rec.video_id,
            extra: rec.extra,
            error: crate::error::StageError::data("unsafe_id", why),
        }),
    }
}

/// The context the source table is opened with: with `for_all_ranks` the table keeps every
/// rank's videos (as a world of one); only forwarding is by rank.
fn source_table_context(cx: &StageContext, for_all_ranks: bool) -> StageContext {
    let mut table_cx = cx.clone();
    if for_all_ranks {
        table_cx.rank = ranks::Rank {
            world: 1,
            ..cx.rank
        };
        table_cx.rank.rank = 0;
    }
    table_cx
}

/// The `source` table of this worker while the source runs, and what it counted.
struct SourceTable {
    prior: Arc<shards::Prior<SourceInfo>>,
    writer: ShardWriter<SourceInfo>,
    counts: StageCounts,
    rejects: RejectLog,
    /// The table was written elsewhere (the rank that collected it): nothing is persisted here.
    committed_elsewhere: bool,
}

impl SourceTable {
    /// Counts one of this rank's items and forwards it, or records it as a reject.
    /// `Ok(false)`: the next stage has stopped listening.
    async fn settle(
        &mut self,
        item: stage::SourceItem,
        output: &mpsc::Sender<VideoRecord>,
        progress: &StageProgress,
        watch: &StageWatch,
    ) -> Result<bool, RunError> {
        self.counts.received += 1;
        watch.received();
        watch.finished(None);
        match item {
            Ok(rec) => {
                if !self.forward(rec, output, progress, watch).await? {
                    return Ok(false);
                }
            }
            Err(rej) => self.reject(rej, progress).await?,
        }
        watch.publish(&self.counts);
        Ok(true)
    }

    /// Commits what is buffered and, with `collected_for` (the source ended on the rank that
    /// collects for all), writes the marker naming that fingerprint; returns the counts.
    async fn close(
        mut self,
        cx: &StageContext,
        collected_for: Option<&str>,
        progress: &StageProgress,
        watch: &StageWatch,
    ) -> Result<StageCounts, RunError> {
        self.writer.flush().await?;
        if let Some(fp) = collected_for {
            cx.store
                .put(collected::COLLECTED, collected::marker(fp))
                .await
                .map_err(|e| RunError::io(collected::COLLECTED, e))?;
        }
        note_lost(cx, self.writer.lost());
        self.rejects.summary(&cx.stage_id);
        progress.finish();
        watch.publish(&self.counts);
        watch.ended();
        let mut counts = self.counts;
        counts.tally = cx.tally.snapshot();
        Ok(counts)
    }

    /// Persists one of this rank's videos (unless an earlier run did) and sends it on.
    /// `Ok(false)`: the next stage has stopped listening.
    async fn forward(
        &mut self,
        rec: VideoRecord,
        output: &mpsc::Sender<VideoRecord>,
        progress: &StageProgress,
        watch: &StageWatch,
    ) -> Result<bool, RunError> {
        if self.committed_elsewhere {
            self.counts.reused += 1;
        } else if self.prior.is_done(&rec.video_id) {
            let before = self.prior.take(&rec.video_id).await?;
            self.counts.reused += 1;
            // Finished work is keyed by video id: a different file under the same id keeps
            // the old results. Say so rather than mix them silently.
            if before
                .first()
                .is_some_and(|b| b.size_bytes != rec.source.size_bytes)
            {
                tracing::warn!(
                    video_id = %rec.video_id,
                    path = rec.source.path.as_deref().unwrap_or(""),
                    "This id was processed from a different file; its results are the old file's. Give the new file a new id, or use a new run directory."
                );
            }
        } else {
            self.counts.computed += 1;
            self.writer.add(&rec, vec![rec.source.clone()]);
        }
        progress.inc(false);
        self.writer.maybe_flush().await?;
        self.counts.forwarded += 1;
        if output.send(rec).await.is_err() {
            return Ok(false);
        }
        watch.sent();
        Ok(true)
    }

    /// Records one of this rank's source rejects (unless an earlier run did).
    async fn reject(
        &mut self,
        rej: stage::SourceReject,
        progress: &StageProgress,
    ) -> Result<(), RunError> {
        progress.inc(true);
        if self.prior.is_rejected(&rej.video_id) {
            self.counts.rejected_before += 1;
        } else {
            self.counts.rejected += 1;
            if self.rejects.note(&rej.error.reason) {
                tracing::warn!(video_id = %rej.video_id, reason = %rej.error.reason, detail = %rej.error.detail, "Source rejected an entry.");
            }
            self.writer.reject(&rej.video_id, &rej.extra, &rej.error);
        }
        self.writer.maybe_flush().await
    }
}

/// Persists another rank's video (or reject) in the shared source table, unless it is there.
fn keep_for_other_rank(
    item: stage::SourceItem,
    prior: &shards::Prior<SourceInfo>,
    writer: &mut ShardWriter<SourceInfo>,
) {
    match item {
        Ok(rec) => {
            if !prior.is_done(&rec.video_id) {
                writer.add(&rec, vec![rec.source.clone()]);
            }
        }
        Err(rej) => {
            if !prior.is_rejected(&rej.video_id) {
                writer.reject(&rej.video_id, &rej.extra, &rej.error);
            }
        }
    }
}
