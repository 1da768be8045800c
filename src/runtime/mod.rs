//! The runner: one task per stage, joined by bounded channels.
//!
//! The runtime owns everything but the computing: what is already done (read back from the run
//! directory), concurrency (`max_in_flight`), timeouts, retries of external errors with backoff,
//! persistence of rows and rejects, progress, Ctrl-C, and the manifest. A full channel blocks the
//! stage upstream, so memory stays bounded however large the source.

pub mod cache;
pub mod manifest;
pub mod progress;
pub mod runner;
pub mod shards;
pub mod stage;
pub mod store;

use crate::error::{ErrorKind, RunError, StageError};
use crate::record::{SourceInfo, VideoRecord};
use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use progress::StageProgress;
use serde::{Deserialize, Serialize};
use shards::ShardWriter;
use stage::{Processor, StageContext};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Per-stage limits that do not change results (so they are not part of the fingerprint).
#[derive(Debug, Clone, Serialize)]
pub struct StageSettings {
    pub max_in_flight: usize,
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub max_rows_per_shard: usize,
    pub flush_every: Duration,
}

/// What one stage did in one invocation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StageCounts {
    /// Records that reached the stage.
    pub received: u64,
    /// Computed in this invocation.
    pub computed: u64,
    /// Taken from shards of an earlier invocation.
    pub reused: u64,
    /// Rejected in this invocation.
    pub rejected: u64,
    /// Rejected by an earlier invocation (not retried).
    pub rejected_before: u64,
    /// Scored but below the stage's `select` thresholds (not passed on).
    #[serde(default)]
    pub filtered: u64,
    /// Passed on to the next stage.
    pub forwarded: u64,
}

/// The channel ends and limits a stage task runs with.
pub struct StageIo {
    pub input: mpsc::Receiver<VideoRecord>,
    pub output: mpsc::Sender<VideoRecord>,
    pub settings: StageSettings,
    pub progress: Arc<StageProgress>,
}

/// A type-erased stage, as the planner builds it.
#[async_trait]
pub trait StageTask: Send + Sync + 'static {
    fn requires(&self) -> &'static [crate::record::Slot];
    fn provides(&self) -> crate::record::Slot;
    /// The persisted columns and their types: part of the fingerprint, so a new column in a new
    /// version of the tool redoes the stage instead of failing to read old shards.
    fn schema_id(&self) -> String;
    /// Runs until the input closes (or a fatal error). Dropping the future aborts the stage.
    async fn run(self: Box<Self>, io: StageIo, cx: StageContext) -> Result<StageCounts, RunError>;
}

/// Wraps a `Processor` with the runtime's machinery.
pub struct ProcessorTask<P: Processor>(pub Arc<P>);

enum Outcome<R> {
    Reused(VideoRecord, Vec<R>),
    RejectedBefore,
    Computed(VideoRecord, Result<Vec<R>, StageError>),
}

/// Exponential backoff with jitter: 0.5 s, 1 s, 2 s ... capped at 30 s.
fn backoff(attempt: u32, seed: &str) -> Duration {
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
                let wait = backoff(attempt, &rec.video_id);
                tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, error = %e, wait_ms = wait.as_millis() as u64, "Retrying.");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return Outcome::Computed(rec, other),
        }
    }
}

/// The stage's input; ends when upstream closes or on Ctrl-C (videos still queued are not
/// started: they were not recorded as done, so the rerun does them).
fn recv_stream(
    rx: mpsc::Receiver<VideoRecord>,
    cancel: tokio_util::sync::CancellationToken,
) -> impl futures::Stream<Item = VideoRecord> {
    futures::stream::unfold((rx, cancel), |(mut rx, cancel)| async move {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            r = rx.recv() => r.map(|r| (r, (rx, cancel))),
        }
    })
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

    async fn run(self: Box<Self>, io: StageIo, cx: StageContext) -> Result<StageCounts, RunError> {
        let StageIo {
            input,
            output,
            settings,
            progress,
        } = io;
        let (mut prior, mut writer) = open_stage_tables::<P::Row>(&cx, &settings).await?;
        let mut counts = StageCounts::default();
        let p = self.0.clone();
        let (cx2, settings2) = (cx.clone(), settings.clone());
        let mut outcomes = recv_stream(input, cx.cancel.clone())
            .map(move |rec| -> BoxFuture<'static, Outcome<P::Row>> {
                if let Some(rows) = prior.rows.remove(&rec.video_id) {
                    Box::pin(futures::future::ready(Outcome::Reused(rec, rows)))
                } else if prior.rejected.contains(&rec.video_id) {
                    Box::pin(futures::future::ready(Outcome::RejectedBefore))
                } else {
                    Box::pin(compute_with_retries(
                        p.clone(),
                        rec,
                        cx2.clone(),
                        settings2.clone(),
                    ))
                }
            })
            .buffer_unordered(settings.max_in_flight.max(1))
            .boxed();
        let mut tick = tokio::time::interval(settings.flush_every.max(Duration::from_millis(100)));
        loop {
            let outcome = tokio::select! {
                o = outcomes.next() => match o { Some(o) => o, None => break },
                _ = tick.tick() => { writer.maybe_flush().await?; continue; }
            };
            counts.received += 1;
            let forward = match outcome {
                Outcome::Reused(rec, rows) => {
                    counts.reused += 1;
                    progress.inc(false);
                    select(&*self.0, rec, rows, &cx.extras, &mut counts)
                }
                Outcome::RejectedBefore => {
                    counts.rejected_before += 1;
                    progress.inc(true);
                    None
                }
                Outcome::Computed(rec, Ok(rows)) => {
                    counts.computed += 1;
                    progress.inc(false);
                    writer.add(&rec, rows.clone());
                    select(&*self.0, rec, rows, &cx.extras, &mut counts)
                }
                Outcome::Computed(rec, Err(e)) => match e.kind {
                    ErrorKind::Data | ErrorKind::External => {
                        counts.rejected += 1;
                        progress.inc(true);
                        tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, reason = %e.reason, detail = %e.detail, "Rejected.");
                        writer.reject(&rec.video_id, &rec.extra, &e);
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
            };
            writer.maybe_flush().await?;
            if let Some(rec) = forward {
                counts.forwarded += 1;
                if output.send(rec).await.is_err() {
                    // Downstream has stopped (fatal error there); finish what we have.
                    break;
                }
            }
        }
        writer.flush().await?;
        progress.finish();
        Ok(counts)
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
) -> Result<(shards::Prior<R>, ShardWriter<R>), RunError> {
    let prior = shards::load_prior::<R>(&cx.store, &cx.stage_id, &cx.fingerprint).await?;
    let writer = ShardWriter::<R>::open(
        cx.store.clone(),
        &cx.stage_id,
        &cx.fingerprint,
        cx.extras.clone(),
        settings.max_rows_per_shard,
        settings.flush_every,
    )
    .await?;
    Ok((prior, writer))
}

/// Reads the source stream, persists the `source` table, forwards the records.
pub async fn run_source(
    source: Box<dyn stage::Source>,
    output: mpsc::Sender<VideoRecord>,
    cx: StageContext,
    settings: StageSettings,
    progress: Arc<StageProgress>,
) -> Result<StageCounts, RunError> {
    let (mut prior, mut writer) = open_stage_tables::<SourceInfo>(&cx, &settings).await?;
    let mut counts = StageCounts::default();
    let cancel = cx.cancel.clone();
    let mut items = source.run(cx.clone());
    loop {
        let item = tokio::select! {
            _ = cancel.cancelled() => break,
            i = items.next() => match i { Some(i) => i, None => break },
        };
        counts.received += 1;
        match item {
            Ok(rec) => {
                if let Some(before) = prior.rows.remove(&rec.video_id) {
                    counts.reused += 1;
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
                    counts.computed += 1;
                    writer.add(&rec, vec![rec.source.clone()]);
                }
                progress.inc(false);
                writer.maybe_flush().await?;
                counts.forwarded += 1;
                if output.send(rec).await.is_err() {
                    break;
                }
            }
            Err(rej) => {
                progress.inc(true);
                if prior.rejected.contains(&rej.video_id) {
                    counts.rejected_before += 1;
                } else {
                    counts.rejected += 1;
                    tracing::warn!(video_id = %rej.video_id, reason = %rej.error.reason, detail = %rej.error.detail, "Source rejected an entry.");
                    writer.reject(&rej.video_id, &rej.extra, &rej.error);
                }
                writer.maybe_flush().await?;
            }
        }
    }
    writer.flush().await?;
    progress.finish();
    Ok(counts)
}
