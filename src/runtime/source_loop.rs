//! The source task: reads the source's stream, persists the `source` table (every rank's videos
//! on the rank that collects for all), and forwards this rank's records to the first stage.
//! Reads the table's prior shards; writes the `source` table, its rejects and the
//! collected-marker; calls `Source::run`.

use super::stage::{self, StageContext};
use super::stage_loop::{RejectLog, note_lost, open_stage_tables};
use super::{StageCounts, StageSettings, collected, ranks};
use crate::error::RunError;
use crate::record::{SourceInfo, Stamp, VideoRecord, id_key};
use crate::runtime::progress::StageProgress;
use crate::runtime::rerun;
use crate::runtime::watch::StageWatch;
use crate::store::shards::retired::{RetiredEntry, why};
use crate::store::shards::{self, ShardWriter};
use futures::StreamExt;
use std::collections::HashSet;
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
    /// Every stage table of the run: a video that left the source leaves them all.
    pub tables: Vec<String>,
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
        tables,
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
        seen: Default::default(),
        turned_rejects: Default::default(),
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
                table.keep_for_other_rank(item, &cx).await?;
                table.writer.maybe_flush().await?;
                cx.tally.add("collected_for_other_ranks", 1);
            }
            // Otherwise that rank lists, persists and forwards it itself.
            continue;
        }
        if !table.settle(item, &cx, &output, &progress, &watch).await? {
            break;
        }
    }
    if ended && !cancel.is_cancelled() && !table.committed_elsewhere {
        table.retire_unlisted(&cx, &tables).await?;
        // A complete listing knows which files the run still has: the digests of the others
        // (a moved corpus's old paths) need not be kept.
        if let Err(e) = cx.media_digests.compact() {
            tracing::warn!(error = %e, "Could not compact the media digests (cache/media): they are read again next time.");
        }
    }
    let collected_for = collect_for.as_deref().filter(|_| ended);
    table.close(&cx, collected_for, &progress, &watch).await
}

/// A record whose id cannot name a file becomes a reject (`unsafe_id`), whatever the source: the
/// sources that know a file and line refuse such ids themselves, and this catches the rest
/// before any stage builds a path from one.
pub fn refuse_unsafe_id(item: stage::SourceItem) -> stage::SourceItem {
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

/// On a terminal, the source's bar says how much media it has read to know files by their bytes
/// (a new, copied or touched corpus is read once; an unchanged one is not).
fn note_hashing(cx: &StageContext, progress: &StageProgress) {
    let (files, bytes) = cx.media_digests.hashed();
    if let (Some(bar), true) = (&progress.bar, files > 0) {
        bar.set_message(format!(
            "{files} media files read ({:.1} GiB)",
            bytes as f64 / (1u64 << 30) as f64
        ));
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
    /// Keys of the videos this listing yielded (done or rejected): a settled video not among
    /// them has left the source.
    seen: HashSet<u64>,
    /// Videos settled as done before that the source now rejects.
    turned_rejects: HashSet<String>,
}

impl SourceTable {
    /// Counts one of this rank's items and forwards it, or records it as a reject.
    /// `Ok(false)`: the next stage has stopped listening.
    async fn settle(
        &mut self,
        item: stage::SourceItem,
        cx: &StageContext,
        output: &mpsc::Sender<VideoRecord>,
        progress: &StageProgress,
        watch: &StageWatch,
    ) -> Result<bool, RunError> {
        self.counts.received += 1;
        watch.received();
        watch.finished(None);
        note_hashing(cx, progress);
        match item {
            Ok(rec) => {
                if !self.forward(rec, cx, output, progress, watch).await? {
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
        mut rec: VideoRecord,
        cx: &StageContext,
        output: &mpsc::Sender<VideoRecord>,
        progress: &StageProgress,
        watch: &StageWatch,
    ) -> Result<bool, RunError> {
        let stored = self.prior.stamp(&rec.video_id);
        rerun::source_lineage_since(&mut rec, &cx.extras, stored);
        if self.committed_elsewhere {
            self.counts.reused += 1;
        } else if self.store_row(&rec, cx).await? {
            self.counts.computed += 1;
        } else {
            self.counts.reused += 1;
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
        if self.store_reject(&rej) {
            self.counts.rejected += 1;
            if self.rejects.note(&rej.error.reason) {
                tracing::warn!(video_id = %rej.video_id, reason = %rej.error.reason, detail = %rej.error.detail, "Source rejected an entry.");
            }
        } else {
            self.counts.rejected_before += 1;
        }
        self.writer.maybe_flush().await
    }

    /// Persists another rank's video (or reject) in the shared source table, unless it is there
    /// as it is now.
    async fn keep_for_other_rank(
        &mut self,
        item: stage::SourceItem,
        cx: &StageContext,
    ) -> Result<(), RunError> {
        match item {
            Ok(mut rec) => {
                let stored = self.prior.stamp(&rec.video_id);
                rerun::source_lineage_since(&mut rec, &cx.extras, stored);
                self.store_row(&rec, cx).await?;
            }
            Err(rej) => {
                self.store_reject(&rej);
            }
        }
        Ok(())
    }

    /// Writes the video's source row unless the stored one is the same (`Ok(false)`); a stored
    /// row that differs, or a stored reject, is retired, and the change counted by field.
    async fn store_row(&mut self, rec: &VideoRecord, cx: &StageContext) -> Result<bool, RunError> {
        let id = &rec.video_id;
        self.seen.insert(id_key(id));
        let stamp = rec.lineage.stamp.unwrap_or(Stamp {
            input: 0,
            extras: 0,
        });
        let replaced = if self.prior.is_done(id) {
            if rec.media.as_ref().is_some_and(|m| m.hashed) {
                cx.tally.add(rerun::tally::REHASHED, 1);
            }
            let stored = self.prior.stamp(id);
            if stored == Some(stamp) {
                return Ok(false);
            }
            let old = self.prior.take(id).await?;
            let fields = match (stored, old.first()) {
                (Some(s), Some(old)) => self.what_changed(id, (old, s), rec, cx).await?,
                // A row of a version before stamps: compared as it stands.
                (None, Some(old)) if *old == rec.source => return Ok(false),
                (None, Some(old)) => rerun::changed_fields(old, &rec.source),
                (_, None) => vec![],
            };
            if fields == ["path"] {
                cx.tally.add(rerun::tally::MOVED, 1);
            } else {
                cx.tally.add(rerun::tally::CHANGED, 1);
                for f in fields {
                    cx.tally.add(&format!("{}:{f}", rerun::tally::CHANGED), 1);
                }
            }
            Some(why::SOURCE_CHANGED)
        } else if self.prior.is_rejected(id) {
            Some(why::NOW_LISTED)
        } else {
            if self.prior.settled() > 0 {
                cx.tally.add(rerun::tally::ADDED, 1);
            }
            None
        };
        if let (Some(why), Some((shard, sum))) = (replaced, self.prior.shard_of(id)) {
            self.writer.retire(RetiredEntry {
                shard: shard.to_string(),
                commit: sum.to_string(),
                video: id.clone(),
                why: why.into(),
            });
        }
        self.writer.add(rec, vec![rec.source.clone()]);
        Ok(true)
    }

    /// The names of what differs between the stored row (with its stamp) and `rec`: its fields,
    /// its extra columns (read back from the stored shard: only rows whose extras changed pay
    /// for it), and
    /// `file` when the media's bytes are new (the stored row with today's media digest is not
    /// what was stamped; a move alone changes only `path`).
    async fn what_changed(
        &self,
        id: &str,
        (old, stored): (&SourceInfo, Stamp),
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<String>, RunError> {
        let mut fields = rerun::changed_fields(old, &rec.source);
        let media = rec.lineage.slot(crate::record::Slot::Media);
        if media.is_some() && rerun::row_input(old, media) != stored.input {
            fields.push("file".into());
        }
        // Which extra columns changed is read back only when their digest says some did: a
        // moved corpus rewrites every row, and reading a shard per row would be quadratic.
        let extras_changed = rec.lineage.stamp.is_some_and(|s| s.extras != stored.extras);
        if let Some((shard, _)) = self.prior.shard_of(id).filter(|_| extras_changed) {
            let stored = shards::stored_extras(cx.store.as_ref(), shard, id, &cx.extras).await?;
            for (i, name) in cx.extras.iter().enumerate() {
                if stored.get(i) != rec.extra.get(i) {
                    fields.push(name.clone());
                }
            }
        }
        if fields.is_empty() {
            fields.push("file".into());
        }
        fields.dedup();
        Ok(fields)
    }

    /// Writes the reject unless the video was rejected before (`false`); a stored row of a
    /// video the source now rejects (its file gone, its label unmapped) is retired.
    fn store_reject(&mut self, rej: &stage::SourceReject) -> bool {
        let id = &rej.video_id;
        self.seen.insert(id_key(id));
        if self.prior.is_rejected(id) {
            return false;
        }
        if let (true, Some((shard, sum))) = (self.prior.is_done(id), self.prior.shard_of(id)) {
            self.writer.retire(RetiredEntry {
                shard: shard.to_string(),
                commit: sum.to_string(),
                video: id.clone(),
                why: why::NOW_REJECTED.into(),
            });
            self.turned_rejects.insert(id.clone());
        }
        self.writer.reject(id, &rej.extra, &rej.error, None);
        true
    }

    /// After a complete listing: the settled videos it did not yield have left the source, and
    /// leave every table (the source's own through this writer's next commit).
    async fn retire_unlisted(
        &mut self,
        cx: &StageContext,
        tables: &[String],
    ) -> Result<(), RunError> {
        let gone: HashSet<u64> = self
            .prior
            .settled_keys()
            .filter(|k| !self.seen.contains(k))
            .collect();
        if gone.is_empty() && self.turned_rejects.is_empty() {
            return Ok(());
        }
        let ids = self.prior.ids_of(&gone).await?;
        let mut names: HashSet<String> = ids.iter().map(|(v, _, _)| v.clone()).collect();
        cx.tally.add(rerun::tally::REMOVED, names.len() as u64);
        for (video, shard, sum) in ids {
            self.writer.retire(RetiredEntry {
                shard,
                commit: sum,
                video,
                why: why::REMOVED.into(),
            });
        }
        // A video the source now rejects leaves the stage tables too (its source row is retired
        // by `store_reject`).
        names.extend(self.turned_rejects.drain());
        let name = format!("{}removed", cx.rank.shard_prefix());
        let tables = rerun::every_table(cx.store.as_ref(), tables).await?;
        rerun::retire_removed(cx.store.as_ref(), &tables, &names, &name).await?;
        tracing::info!(
            videos = names.len(),
            "Videos no longer in the source: retired from every table."
        );
        Ok(())
    }
}
