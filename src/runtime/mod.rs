//! The runner: one task per stage, joined by bounded channels.
//!
//! The runtime owns everything but the computing: what is already done (read back from the run
//! directory), concurrency (`max_in_flight`), timeouts, retries of external errors with backoff,
//! persistence of rows and rejects, progress, Ctrl-C, and the manifest. A full channel blocks the
//! stage upstream, so memory stays bounded however large the source.
//!
//! Here: what the planner hands a stage (`StageTask`, `StageIo`, `StageSettings`) and the one
//! backoff. The loop every processor stage runs is in `stage_loop` (one video's computation,
//! with its timeout and retries, in `retry`); the source task's is in `source_loop`.

pub mod batch;
pub mod chain;
pub mod collected;
pub mod cpu;
pub mod decoded;
pub mod metrics;
pub mod progress;
pub mod ranks;
pub mod rerun;
pub mod runner;
pub mod stage;
pub mod watch;

mod retry;
mod source_loop;
pub use source_loop::refuse_unsafe_id;
mod stage_loop;

pub use crate::store::manifest::StageCounts;
pub use retry::retrying;
pub use source_loop::{SourceRole, run_source};
pub use stage_loop::ProcessorTask;

use crate::error::RunError;
use crate::record::VideoRecord;
use async_trait::async_trait;
use progress::StageProgress;
use serde::Serialize;
use stage::StageContext;
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
    /// The slots its input digest covers (`Processor::reads`) and whether it reads the extra
    /// columns: what `run --dry-run` compares with the stored rows, as the stage loop does.
    fn reads(&self) -> (Vec<crate::record::Slot>, bool) {
        (self.requires().to_vec(), false)
    }
    /// `Processor::refuses`: a video this stage rejects before computing anything.
    fn refuses(&self, _rec: &crate::record::VideoRecord) -> Option<crate::error::StageError> {
        None
    }
    /// Whether the stage reads frames as decoded (`StageContext::decoded`): the frames stage
    /// then hands its decoded frames over instead of only storing them as JPEG.
    fn reads_decoded_frames(&self) -> bool {
        false
    }
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

/// The one tokio runtime a command's async work runs on.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::at("starting the runtime", e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
