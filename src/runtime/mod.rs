//! The runner: one task per stage, joined by bounded channels.
//!
//! The runtime owns everything but the computing: what is already done (read back from the run
//! directory), concurrency (`max_in_flight`), timeouts, retries of external errors with backoff,
//! persistence of rows and rejects, progress, Ctrl-C, and the manifest. A full channel blocks the
//! stage upstream, so memory stays bounded however large the source.

pub mod batch;
pub mod chain;
pub mod collected;
pub mod cpu;
pub mod progress;
pub mod ranks;
pub mod runner;
pub mod stage;
pub mod watch;

pub use crate::store::manifest::StageCounts;

use crate::error::{ErrorKind, RunError, StageError};
use crate::record::{SourceInfo, VideoRecord};
use crate::store::shards::{self, ShardWriter};
use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use progress::StageProgress;
use serde::Serialize;
use stage::{Processor, StageContext};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use watch::StageWatch;

/// Per-stage limits that do not change results (so they are not part of the fingerprint).
#[derive(Debug, Clone, Serialize)]
pub struct StageSettings {
    pub max_in_flight: usize,
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub max_rows_per_shard: usize,
    pub flush_every: Duration,
}

/// The channel ends and limits a stage task runs with.
pub struct StageIo {
    pub input: mpsc::Receiver<VideoRecord>,
    pub output: mpsc::Sender<VideoRecord>,
    pub settings: StageSettings,
    pub progress: Arc<StageProgress>,
    pub watch: Arc<StageWatch>,
}

/// A type-erased stage, as the planner builds it.
#[async_trait]
pub trait StageTask: Send + Sync + 'static {
    fn requires(&self) -> &'static [crate::record::Slot];
    fn provides(&self) -> crate::record::Slot;
    /// The persisted columns and their types: part of the fingerprint, so a new column in a new
    /// version of the tool redoes the stage instead of failing to read old shards.
    fn schema_id(&self) -> String;
    /// The names of the columns this stage writes (besides `video_id` and the fingerprint).
    fn columns(&self) -> Vec<String>;
    /// Runs until the input closes (or a fatal error). Dropping the future aborts the stage.
    async fn run(self: Box<Self>, io: StageIo, cx: StageContext) -> Result<StageCounts, RunError>;
    /// What one video costs the stage, for `run --dry-run`.
    fn estimate(&self) -> stage::StageEstimate {
        stage::StageEstimate::default()
    }
}

/// Wraps a `Processor` with the runtime's machinery.
pub struct ProcessorTask<P: Processor>(pub Arc<P>);

enum Outcome<R> {
    Reused(VideoRecord, Vec<R>),
    RejectedBefore,
    /// With the compute time (set by the stage loop, for the stall detector).
    Computed(VideoRecord, Result<Vec<R>, StageError>, Option<Duration>),
}

/// The one backoff of external retries (the runner's per-video retries and the YouTube
/// collection's): 0.5 s, 1 s, 2 s ... capped at 30 s, plus up to half as much again of jitter
/// derived from `seed`, so videos that failed together do not come back together.
pub fn backoff(attempt: u32, seed: &str) -> Duration {
    let base = 500u64.saturating_mul(1 << attempt.min(6)).min(30_000);
    let jitter =
        blake3::hash(format!("{seed}{attempt}").as_bytes()).as_bytes()[0] as u64 * base / 512;
    Duration::from_millis(base + jitter)
}

async fn compute_with_retries<P: Processor>(
    p: Arc<P>,
    rec: VideoRecord,
    cx: StageContext,
    settings: StageSettings,
) -> Outcome<P::Row> {
    let mut attempt = 0;
    loop {
        let fut = p.process(&rec, &cx);
        let result = match settings.timeout {
            Some(t) => tokio::time::timeout(t, fut).await.unwrap_or_else(|_| {
                Err(StageError::external(
                    "timeout",
                    format!("no result within {} s", t.as_secs_f64()),
                ))
            }),
            None => fut.await,
        };
        match result {
            Err(e)
                if e.kind == ErrorKind::External
                    && attempt < settings.retries
                    && !cx.cancel.is_cancelled() =>
            {
                // A wait the service asked for (checked and capped by its client) wins over ours.
                let wait = e.retry_after.map_or_else(
                    || backoff(attempt, &rec.video_id),
                    |w| w.max(Duration::from_millis(50)),
                );
                tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, error = %e, wait_ms = wait.as_millis() as u64, "Retrying.");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return Outcome::Computed(rec, other, None),
        }
    }
}

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
        let mut counts = StageCounts::default();
        let limit = settings.max_in_flight.max(1);
        let mut in_flight = FuturesUnordered::<BoxFuture<'static, Outcome<P::Row>>>::new();
        let mut to_send: VecDeque<VideoRecord> = VecDeque::new();
        let mut input_open = true;
        let mut downstream_open = true;
        let mut rejects = RejectLog::default();
        let mut tick = tokio::time::interval(settings.flush_every.max(Duration::from_millis(100)));
        loop {
            if !input_open && in_flight.is_empty() && to_send.is_empty() {
                break;
            }
            let room = in_flight.len() + to_send.len() < limit;
            let step = tokio::select! {
                biased;
                // Ctrl-C: queued videos are not started (they are not recorded as done, so the
                // rerun does them); those in flight are finished and persisted.
                _ = cx.cancel.cancelled(), if input_open => Step::InputClosed,
                Some(o) = in_flight.next(), if !in_flight.is_empty() => Step::Finished(o),
                permit = output.reserve(), if !to_send.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(rec) = to_send.pop_front() {
                            permit.send(rec);
                            watch.sent();
                        }
                        Step::Sent
                    }
                    Err(_) => Step::DownstreamClosed,
                },
                r = input.recv(), if input_open && room => match r {
                    Some(rec) => Step::Received(rec),
                    None => Step::InputClosed,
                },
                _ = tick.tick() => Step::Tick,
            };
            match step {
                Step::InputClosed => {
                    input_open = false;
                    input.close();
                    watch.input_closed();
                }
                Step::Received(rec) => {
                    watch.received();
                    in_flight.push(self.start(rec, &prior, &cx, &settings, &watch));
                }
                Step::Finished(outcome) => {
                    if let Some(rec) = self
                        .finish(
                            outcome,
                            &cx,
                            &mut writer,
                            &mut counts,
                            &progress,
                            &watch,
                            &mut rejects,
                        )
                        .await?
                    {
                        counts.forwarded += 1;
                        if downstream_open {
                            to_send.push_back(rec);
                        }
                    }
                    writer.maybe_flush().await?;
                }
                Step::Sent => {}
                Step::DownstreamClosed => {
                    // Downstream has stopped (a fatal error there, or Ctrl-C): finish and
                    // persist what is in flight, forward nothing more.
                    downstream_open = false;
                    to_send.clear();
                }
                Step::Tick => writer.maybe_flush().await?,
            }
            watch.set_waiting_to_send(to_send.len());
        }
        writer.flush().await?;
        note_lost(&cx, writer.lost());
        rejects.summary(&cx.stage_id);
        progress.finish();
        watch.ended();
        counts.tally = cx.tally.snapshot();
        Ok(counts)
    }
}

/// Logs rejects the first few times per reason, then counts them: a manifest of thousands of bad
/// lines must not print thousands of warnings (every reject is in `rejects/` anyway).
#[derive(Default)]
struct RejectLog {
    seen: std::collections::BTreeMap<String, u64>,
}

impl RejectLog {
    const SHOWN: u64 = 5;

    /// Whether this reject is to be logged one by one.
    fn note(&mut self, reason: &str) -> bool {
        let n = self.seen.entry(reason.to_string()).or_default();
        *n += 1;
        *n <= Self::SHOWN
    }

    /// One line per reason that was cut short.
    fn summary(&self, stage: &str) {
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
    /// The future that settles one video: rows from an earlier run, an earlier reject, or a
    /// computation with retries.
    fn start(
        &self,
        rec: VideoRecord,
        prior: &Arc<shards::Prior<P::Row>>,
        cx: &StageContext,
        settings: &StageSettings,
        watch: &Arc<StageWatch>,
    ) -> BoxFuture<'static, Outcome<P::Row>> {
        if prior.is_done(&rec.video_id) {
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
        } else if prior.is_rejected(&rec.video_id) {
            Box::pin(futures::future::ready(Outcome::RejectedBefore))
        } else {
            watch.started_computing();
            let (p, cx, settings) = (self.0.clone(), cx.clone(), settings.clone());
            Box::pin(async move {
                let t0 = std::time::Instant::now();
                match compute_with_retries(p, rec, cx, settings).await {
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
        counts: &mut StageCounts,
        progress: &StageProgress,
        watch: &StageWatch,
        rejects: &mut RejectLog,
    ) -> Result<Option<VideoRecord>, RunError> {
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
                select(&*self.0, rec, rows, &cx.extras, counts)
            }
            Outcome::RejectedBefore => {
                counts.rejected_before += 1;
                progress.inc(true);
                None
            }
            Outcome::Computed(rec, Ok(rows), _) => {
                counts.computed += 1;
                progress.inc(false);
                writer.add(&rec, rows.clone());
                select(&*self.0, rec, rows, &cx.extras, counts)
            }
            Outcome::Computed(rec, Err(e), _) => match e.kind {
                ErrorKind::Data | ErrorKind::External => {
                    counts.rejected += 1;
                    progress.inc(true);
                    if rejects.note(&e.reason) {
                        tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, reason = %e.reason, detail = %e.detail, "Rejected.");
                    }
                    writer.reject(&rec.video_id, &rec.extra, &e);
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
            },
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
async fn open_stage_tables<R: Serialize + serde::de::DeserializeOwned + Send + 'static>(
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
        table.counts.received += 1;
        watch.received();
        watch.finished(None);
        match item {
            Ok(rec) => {
                if !table.forward(rec, &output, &progress, &watch).await? {
                    break;
                }
            }
            Err(rej) => table.reject(rej, &progress).await?,
        }
    }
    table.writer.flush().await?;
    if let (Some(fp), true) = (&collect_for, ended) {
        cx.store
            .put(collected::COLLECTED, collected::marker(fp))
            .await
            .map_err(|e| RunError::io(collected::COLLECTED, e))?;
    }
    note_lost(&cx, table.writer.lost());
    table.rejects.summary(&cx.stage_id);
    progress.finish();
    watch.ended();
    let mut counts = table.counts;
    counts.tally = cx.tally.snapshot();
    Ok(counts)
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

/// Counts the videos another worker of this rank committed first (a requeued task running beside
/// the old one): worth seeing in the summary, harmless to the tables.
fn note_lost(cx: &StageContext, lost: u64) {
    if lost > 0 {
        cx.tally.add("committed_by_another_worker", lost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Slot;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Fails with an external error `fail` times, then answers one row; or never answers.
    struct Flaky {
        calls: AtomicU32,
        fail: u32,
        hang: bool,
    }

    #[async_trait]
    impl Processor for Flaky {
        type Row = u32;
        fn requires(&self) -> &'static [Slot] {
            &[]
        }
        fn provides(&self) -> Slot {
            Slot::Shots
        }
        async fn process(&self, _: &VideoRecord, _: &StageContext) -> Result<Vec<u32>, StageError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if self.hang {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            if n < self.fail {
                return Err(StageError::external("status_503", "busy"));
            }
            Ok(vec![n])
        }
        fn attach(_: &mut VideoRecord, _: Vec<u32>) {}
    }

    fn settings(retries: u32, timeout: Option<Duration>) -> StageSettings {
        StageSettings {
            max_in_flight: 1,
            timeout,
            retries,
            max_rows_per_shard: 10,
            flush_every: Duration::from_secs(30),
        }
    }

    async fn compute(p: Flaky, s: StageSettings) -> (Result<Vec<u32>, StageError>, u32) {
        let p = Arc::new(p);
        let rec = VideoRecord::new("v1".into(), SourceInfo::default(), vec![]);
        let cx = StageContext::detached(&std::env::temp_dir()).unwrap();
        match compute_with_retries(p.clone(), rec, cx, s).await {
            Outcome::Computed(_, r, _) => (r, p.calls.load(Ordering::SeqCst)),
            _ => panic!("a computed outcome"),
        }
    }

    // Virtual time: the waits are the runtime's backoff, exactly, and take no wall time.
    #[tokio::test(start_paused = true)]
    async fn external_failures_are_retried_after_the_backoff() {
        let started = tokio::time::Instant::now();
        let flaky = Flaky {
            calls: AtomicU32::new(0),
            fail: 2,
            hang: false,
        };
        let (r, calls) = compute(flaky, settings(2, None)).await;
        assert_eq!(r.unwrap(), vec![2]);
        assert_eq!(calls, 3);
        assert_eq!(started.elapsed(), backoff(0, "v1") + backoff(1, "v1"));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_run_out_and_the_error_is_the_last_one() {
        let flaky = Flaky {
            calls: AtomicU32::new(0),
            fail: 5,
            hang: false,
        };
        let (r, calls) = compute(flaky, settings(1, None)).await;
        assert_eq!(r.unwrap_err().reason, "status_503");
        assert_eq!(calls, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_an_external_failure_and_is_retried() {
        let started = tokio::time::Instant::now();
        let hang = Flaky {
            calls: AtomicU32::new(0),
            fail: 0,
            hang: true,
        };
        let (r, calls) = compute(hang, settings(1, Some(Duration::from_secs(5)))).await;
        let e = r.unwrap_err();
        assert_eq!(
            (e.kind, e.reason.as_str()),
            (ErrorKind::External, "timeout")
        );
        assert_eq!(calls, 2);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(10) + backoff(0, "v1")
        );
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_bounded_jitter() {
        for a in 0..10 {
            let base = Duration::from_millis((500u64 << a.min(6)).min(30_000));
            let b = backoff(a, "v");
            assert!(b >= base && b < base + base / 2, "attempt {a}: {b:?}");
        }
        assert_ne!(
            backoff(3, "a"),
            backoff(3, "b"),
            "jitter depends on the seed"
        );
    }
}
