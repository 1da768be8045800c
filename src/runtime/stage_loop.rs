//! The loop of a processor stage: reads its input channel, settles each video (rows from an
//! earlier run, an earlier reject, or a computation: `retry`), writes rows and rejects to the
//! stage's shards, and forwards the kept records to the next stage.
//! Reads the stage's prior shards (`store::shards::load_prior`); writes through `ShardWriter`;
//! calls the `Processor`'s `process`, `keep` and `attach`.

use super::retry::{Outcome, compute_with_retries};
use super::stage::{self, Processor, StageContext};
use super::{StageCounts, StageIo, StageSettings, StageTask};
use crate::error::{ErrorKind, RunError, StageError};
use crate::record::{Stamp, VideoRecord};
use crate::runtime::progress::StageProgress;
use crate::runtime::rerun;
use crate::runtime::watch::StageWatch;
use crate::store::shards::retired::{RetiredEntry, why};
use crate::store::shards::{self, ShardWriter};
use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Wraps a `Processor` with the runtime's machinery.
pub struct ProcessorTask<P: Processor>(pub Arc<P>);

#[async_trait]
impl<P: Processor> StageTask for ProcessorTask<P> {
    fn requires(&self) -> &'static [crate::record::Slot] {
        self.0.requires()
    }
    fn provides(&self) -> crate::record::Slot {
        self.0.provides()
    }
    fn schema_id(&self) -> String {
        match shards::fields_of::<P::Row>() {
            Ok(fields) => fields
                .iter()
                .map(|f| format!("{}:{}", f.name(), f.data_type()))
                .collect::<Vec<_>>()
                .join(","),
            Err(e) => e.to_string(),
        }
    }
    fn estimate(&self) -> stage::StageEstimate {
        self.0.estimate()
    }
    fn reads(&self) -> (Vec<crate::record::Slot>, bool) {
        (self.0.reads(), self.0.reads_extras())
    }
    fn refuses(&self, rec: &VideoRecord) -> Option<StageError> {
        self.0.refuses(rec)
    }
    fn reads_decoded_frames(&self) -> bool {
        self.0.reads_decoded_frames()
    }
    fn columns(&self) -> Vec<String> {
        shards::fields_of::<P::Row>()
            .map(|fields| fields.iter().map(|f| f.name().clone()).collect())
            .unwrap_or_default()
    }

    /// The stage loop. Its one rule: the videos in flight are polled all the time, also while
    /// the loop waits for room downstream (a future left unpolled could sit on a shared resource
    /// and stall every stage: issue 10). So the loop waits on four things at once: a finished
    /// video, room in the output channel for one that is waiting to be sent, a new input (only
    /// while fewer than `max_in_flight` videos are computing or waiting to be sent, which is what
    /// bounds the stage's memory), and the flush timer.
    async fn run(self: Box<Self>, io: StageIo, cx: StageContext) -> Result<StageCounts, RunError> {
        let StageIo {
            mut input,
            output,
            settings,
            progress,
            watch,
        } = io;
        let (prior, mut writer) = open_stage_tables::<P::Row>(&cx, &settings).await?;
        let limit = settings.max_in_flight.max(1);
        let mut flow = Flow::<P::Row> {
            in_flight: FuturesUnordered::new(),
            to_send: VecDeque::new(),
            input_open: true,
            downstream_open: true,
        };
        let mut books = Books::default();
        let mut tick = tokio::time::interval(settings.flush_every.max(Duration::from_millis(100)));
        loop {
            if !flow.input_open && flow.in_flight.is_empty() && flow.to_send.is_empty() {
                break;
            }
            let room = flow.in_flight.len() + flow.to_send.len() < limit;
            let step = flow
                .next_step(&cx, &mut input, &output, &watch, &mut tick, room)
                .await;
            match step {
                Step::InputClosed => {
                    flow.input_open = false;
                    input.close();
                    watch.input_closed();
                }
                Step::Received(mut rec) => {
                    watch.received();
                    books.sent.insert(crate::record::id_key(&rec.video_id));
                    let settle =
                        self.settle(&mut rec, &prior, &cx, &mut writer, &mut books.rewrite);
                    flow.in_flight
                        .push(self.start(rec, settle, &prior, &cx, &settings, &watch));
                }
                Step::Finished(outcome) => {
                    let video = outcome.video_id().map(str::to_owned);
                    let kept = self
                        .finish(outcome, &cx, &mut writer, &progress, &watch, &mut books)
                        .await?;
                    flow.forward(kept, video, &cx, &mut books.counts);
                    watch.publish(&books.counts);
                    writer.maybe_flush().await?;
                }
                Step::Sent => {}
                Step::DownstreamClosed => {
                    // Downstream has stopped (a fatal error there, or Ctrl-C): finish and
                    // persist what is in flight, forward nothing more.
                    flow.downstream_open = false;
                    for rec in flow.to_send.drain(..) {
                        cx.decoded.forget(&rec.video_id);
                    }
                }
                Step::Tick => writer.maybe_flush().await?,
            }
            watch.set_waiting_to_send(flow.to_send.len());
        }
        // Only a single process holds rows apart (ranks share the tables: nothing compacts them).
        if !cx.cancel.is_cancelled() && !cx.rank.explicit {
            let unsent = prior.unsent_visible(&books.sent);
            if !unsent.is_empty() {
                cx.unsent.add(&cx.stage_id, prior.ids_of(&unsent).await?);
            }
        }
        close(writer, &cx, &books.rejects, &progress, &watch, books.counts).await
    }
}

/// Commits what is buffered at the end of the stage and returns its counts.
async fn close<R: Serialize + serde::de::DeserializeOwned + Send + 'static>(
    mut writer: ShardWriter<R>,
    cx: &StageContext,
    rejects: &RejectLog,
    progress: &StageProgress,
    watch: &StageWatch,
    mut counts: StageCounts,
) -> Result<StageCounts, RunError> {
    writer.flush().await?;
    note_lost(cx, writer.lost());
    rejects.summary(&cx.stage_id);
    progress.finish();
    watch.publish(&counts);
    watch.ended();
    counts.tally = cx.tally.snapshot();
    Ok(counts)
}

/// What the stage loop keeps about the videos it settles besides their rows: its counts, the reject log,
/// and the videos whose stored rows are written again with new extra-column values.
#[derive(Default)]
struct Books {
    counts: StageCounts,
    rejects: RejectLog,
    rewrite: std::collections::HashSet<String>,
    /// Keys of the videos this pass sent to the stage: the earlier settlements of the others
    /// are held apart at the end of a complete pass.
    sent: std::collections::HashSet<u64>,
}

/// Logs rejects the first few times per reason, then counts them: a manifest of thousands of bad
/// lines must not print thousands of warnings (every reject is in `rejects/` anyway).
#[derive(Default)]
pub(super) struct RejectLog {
    seen: std::collections::BTreeMap<String, u64>,
}

impl RejectLog {
    const SHOWN: u64 = 5;

    /// Whether this reject is to be logged one by one.
    pub(super) fn note(&mut self, reason: &str) -> bool {
        let n = self.seen.entry(reason.to_string()).or_default();
        *n += 1;
        *n <= Self::SHOWN
    }

    /// One line per reason that was cut short.
    pub(super) fn summary(&self, stage: &str) {
        for (reason, n) in &self.seen {
            if *n > Self::SHOWN {
                tracing::warn!(
                    stage,
                    reason = %reason,
                    "{} more rejected for this reason ({n} in all; see rejects/).",
                    n - Self::SHOWN
                );
            }
        }
    }
}

/// The videos the stage loop holds (computing, or finished and waiting for room downstream), and
/// which of its channels are still open.
struct Flow<R> {
    in_flight: FuturesUnordered<BoxFuture<'static, Outcome<R>>>,
    to_send: VecDeque<VideoRecord>,
    input_open: bool,
    downstream_open: bool,
}

impl<R> Flow<R> {
    /// Queues a settled video for the next stage, when it goes on. Frames held for a reader
    /// it will not reach make room for others.
    fn forward(
        &mut self,
        kept: Option<VideoRecord>,
        video: Option<String>,
        cx: &StageContext,
        counts: &mut StageCounts,
    ) {
        match kept {
            Some(rec) => {
                counts.forwarded += 1;
                if self.downstream_open {
                    self.to_send.push_back(rec);
                } else {
                    cx.decoded.forget(&rec.video_id);
                }
            }
            None => video.iter().for_each(|v| cx.decoded.forget(v)),
        }
    }

    /// Waits for what comes first of the things `ProcessorTask::run` waits on; a record that
    /// finds room downstream is sent here. `room`: a new input may be taken.
    async fn next_step(
        &mut self,
        cx: &StageContext,
        input: &mut mpsc::Receiver<VideoRecord>,
        output: &mpsc::Sender<VideoRecord>,
        watch: &StageWatch,
        tick: &mut tokio::time::Interval,
        room: bool,
    ) -> Step<R> {
        tokio::select! {
            biased;
            // Ctrl-C: queued videos are not started (they are not recorded as done, so the
            // rerun does them); those in flight are finished and persisted.
            _ = cx.cancel.cancelled(), if self.input_open => Step::InputClosed,
            Some(o) = self.in_flight.next(), if !self.in_flight.is_empty() => Step::Finished(o),
            permit = output.reserve(), if !self.to_send.is_empty() => match permit {
                Ok(permit) => {
                    if let Some(rec) = self.to_send.pop_front() {
                        permit.send(rec);
                        watch.sent();
                    }
                    Step::Sent
                }
                Err(_) => Step::DownstreamClosed,
            },
            r = input.recv(), if self.input_open && room => match r {
                Some(rec) => Step::Received(rec),
                None => Step::InputClosed,
            },
            _ = tick.tick() => Step::Tick,
        }
    }
}

/// What woke the stage loop.
enum Step<R> {
    InputClosed,
    Received(VideoRecord),
    Finished(Outcome<R>),
    Sent,
    DownstreamClosed,
    Tick,
}

impl<P: Processor> ProcessorTask<P> {
    /// Stamps the record with what this stage reads of it and decides what to do with an earlier
    /// run's settlement (`rerun::decide`); a settlement replaced is retired before the commit
    /// that replaces it.
    fn settle(
        &self,
        rec: &mut VideoRecord,
        prior: &shards::Prior<P::Row>,
        cx: &StageContext,
        writer: &mut ShardWriter<P::Row>,
        rewrite: &mut std::collections::HashSet<String>,
    ) -> rerun::Settle {
        let input = rerun::input_digest(&self.0.reads(), self.0.reads_extras(), &rec.lineage);
        let input = rerun::salted(input, &cx.input_salt);
        let stamp = Stamp {
            input,
            extras: rec.lineage.extras,
        };
        rec.lineage.stamp = Some(stamp);
        rec.lineage
            .set(self.0.provides(), rerun::output_digest(&cx.stage_id, input));
        let settle = rerun::decide(prior, &rec.video_id, stamp);
        if let Some(key) = rerun::tally_of(&settle) {
            cx.tally.add(key, 1);
        }
        let replaced = match &settle {
            rerun::Settle::Rewrite { shard, why } => {
                rewrite.insert(rec.video_id.clone());
                Some((shard.clone(), *why))
            }
            rerun::Settle::RestoreReject { shard } => Some((shard.clone(), why::RESTORED)),
            rerun::Settle::Compute { replaces } => replaces.clone(),
            _ => None,
        };
        if let Some(((shard, sum), why)) = replaced {
            writer.retire(RetiredEntry {
                shard,
                commit: sum,
                video: rec.video_id.clone(),
                why: why.into(),
            });
        }
        settle
    }

    /// The future that settles one video: rows from an earlier run, an earlier reject, or a
    /// computation with retries.
    fn start(
        &self,
        rec: VideoRecord,
        settle: rerun::Settle,
        prior: &Arc<shards::Prior<P::Row>>,
        cx: &StageContext,
        settings: &StageSettings,
        watch: &Arc<StageWatch>,
    ) -> BoxFuture<'static, Outcome<P::Row>> {
        if matches!(settle, rerun::Settle::Reuse | rerun::Settle::Rewrite { .. }) {
            let prior = prior.clone();
            Box::pin(async move {
                match prior.take(&rec.video_id).await {
                    Ok(rows) => Outcome::Reused(rec, rows),
                    // An unreadable shard of our own: stop rather than redo or guess.
                    Err(e) => {
                        let err = StageError::internal("prior_shard", e.to_string());
                        Outcome::Computed(rec, Err(err), None)
                    }
                }
            })
        } else if settle == rerun::Settle::RejectedBefore {
            cx.decoded.forget(&rec.video_id);
            Box::pin(futures::future::ready(Outcome::RejectedBefore))
        } else if let rerun::Settle::RestoreReject { shard } = settle {
            let store = cx.store.clone();
            Box::pin(async move {
                let held = shards::held::held_reject(store.as_ref(), &shard.0, &rec.video_id);
                match held.await {
                    Ok(Some((reason, detail))) => {
                        Outcome::Restored(rec, StageError::data(reason, detail))
                    }
                    Ok(None) => {
                        let why = "a held reject without its reject row";
                        Outcome::Computed(rec, Err(StageError::internal("prior_shard", why)), None)
                    }
                    Err(e) => {
                        let err = StageError::internal("prior_shard", e.to_string());
                        Outcome::Computed(rec, Err(err), None)
                    }
                }
            })
        } else {
            watch.started_computing();
            let (p, cx, settings) = (self.0.clone(), cx.clone(), settings.clone());
            let watch = watch.clone();
            Box::pin(async move {
                let t0 = std::time::Instant::now();
                match compute_with_retries(p, rec, cx, settings, watch).await {
                    Outcome::Computed(rec, r, _) => Outcome::Computed(rec, r, Some(t0.elapsed())),
                    other => other,
                }
            })
        }
    }

    /// Counts, persists and selects one settled video; the record to forward, if any.
    async fn finish(
        &self,
        outcome: Outcome<P::Row>,
        cx: &StageContext,
        writer: &mut ShardWriter<P::Row>,
        progress: &StageProgress,
        watch: &StageWatch,
        books: &mut Books,
    ) -> Result<Option<VideoRecord>, RunError> {
        let counts = &mut books.counts;
        counts.received += 1;
        let took = match &outcome {
            Outcome::Computed(_, _, took) => *took,
            _ => None,
        };
        watch.finished(took);
        Ok(match outcome {
            Outcome::Reused(rec, rows) => {
                counts.reused += 1;
                progress.inc(false);
                if books.rewrite.remove(&rec.video_id) {
                    writer.add(&rec, rows.clone());
                }
                select(&*self.0, rec, rows, &cx.extras, counts)
            }
            Outcome::RejectedBefore => {
                counts.rejected_before += 1;
                progress.inc(true);
                None
            }
            Outcome::Restored(rec, e) => {
                counts.rejected_before += 1;
                progress.inc(true);
                writer.reject(&rec.video_id, &rec.extra, &e, rec.lineage.stamp);
                None
            }
            Outcome::Computed(rec, Ok(rows), _) => {
                counts.computed += 1;
                progress.inc(false);
                writer.add(&rec, rows.clone());
                writer.add_objects(cx.objects.take(&rec.video_id));
                select(&*self.0, rec, rows, &cx.extras, counts)
            }
            Outcome::Computed(rec, Err(e), _) => {
                return self.failed(rec, e, cx, writer, progress, books).await;
            }
        })
    }

    /// A video whose computation failed: a reject for what it is or for a service (recorded), a
    /// request deferred to a batch (nothing written), or an error that stops the run.
    async fn failed(
        &self,
        rec: VideoRecord,
        e: StageError,
        cx: &StageContext,
        writer: &mut ShardWriter<P::Row>,
        progress: &StageProgress,
        books: &mut Books,
    ) -> Result<Option<VideoRecord>, RunError> {
        let counts = &mut books.counts;
        Ok(match e.kind {
            ErrorKind::Data | ErrorKind::External => {
                counts.rejected += 1;
                progress.inc(true);
                if books.rejects.note(&e.reason) {
                    tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, reason = %e.reason, detail = %e.detail, "Rejected.");
                }
                writer.reject(&rec.video_id, &rec.extra, &e, rec.lineage.stamp);
                // What it stored is referred to by no row.
                cx.objects.take(&rec.video_id);
                None
            }
            ErrorKind::Deferred => {
                // Neither done nor rejected: nothing is written, and the next pass (after
                // the batch is answered) computes it from the cache.
                counts.deferred += 1;
                progress.inc(false);
                None
            }
            ErrorKind::Config => {
                // A refused key, a missing tool: no other video would fare better.
                writer.flush().await?;
                return Err(RunError::Config(format!(
                    "stage {}: {} (at video {})",
                    cx.stage_id, e.detail, rec.video_id
                )));
            }
            ErrorKind::Internal => {
                // Keep what is finished, then stop the run.
                writer.flush().await?;
                return Err(RunError::Internal(format!(
                    "stage {} failed on video {}: {e}",
                    cx.stage_id, rec.video_id
                )));
            }
        })
    }
}

/// Applies the stage's thresholds; a kept record gets its rows attached.
fn select<P: Processor>(
    p: &P,
    mut rec: VideoRecord,
    rows: Vec<P::Row>,
    extras: &[String],
    counts: &mut StageCounts,
) -> Option<VideoRecord> {
    if p.keep(&rec, extras, &rows) {
        P::attach(&mut rec, rows);
        Some(rec)
    } else {
        counts.filtered += 1;
        None
    }
}

/// What earlier runs finished for this stage, and the writer for this run's shards.
pub(super) async fn open_stage_tables<
    R: Serialize + serde::de::DeserializeOwned + Send + 'static,
>(
    cx: &StageContext,
    settings: &StageSettings,
) -> Result<(Arc<shards::Prior<R>>, ShardWriter<R>), RunError> {
    let (rank, prefix) = (cx.rank, cx.rank.shard_prefix());
    let prior = shards::load_prior::<R>(
        &cx.store,
        &cx.stage_id,
        &cx.fingerprint,
        &prefix,
        Arc::new(move |v: &str| rank.owns(v)),
    )
    .await?;
    let writer = ShardWriter::<R>::open(
        cx.store.clone(),
        &cx.stage_id,
        &cx.fingerprint,
        cx.extras.clone(),
        shards::Slots {
            prefix: &prefix,
            next: prior.next_slot,
        },
        settings.max_rows_per_shard,
        settings.flush_every,
    )
    .await?
    .publishing(cx.cache.clone());
    Ok((Arc::new(prior), writer))
}

/// Counts the videos another worker of this rank committed first (a requeued task running beside
/// the old one): worth seeing in the summary, harmless to the tables.
pub(super) fn note_lost(cx: &StageContext, lost: u64) {
    if lost > 0 {
        cx.tally.add("committed_by_another_worker", lost);
    }
}
