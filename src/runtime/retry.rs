//! One video's computation: the stage's timeout around `Processor::process`, and retries of
//! external errors after the runtime's `backoff` (or the wait the service asked for), so a
//! busy service costs time rather than a reject. Reads the stage's settings; writes nothing;
//! calls the processor.

use super::stage::{Processor, StageContext};
use super::watch::StageWatch;
use super::{StageSettings, backoff};
use crate::error::{ErrorKind, StageError};
use crate::record::VideoRecord;
use std::sync::Arc;
use std::time::Duration;

pub(super) enum Outcome<R> {
    Reused(VideoRecord, Vec<R>),
    RejectedBefore,
    /// A reject held apart, recorded in the table again as it was (`Settle::RestoreReject`).
    Restored(VideoRecord, StageError),
    /// With the compute time (set by the stage loop, for the stall detector).
    Computed(VideoRecord, Result<Vec<R>, StageError>, Option<Duration>),
}

impl<R> Outcome<R> {
    /// The video settled, when the outcome still holds its record.
    pub(super) fn video_id(&self) -> Option<&str> {
        match self {
            Self::Reused(rec, _) | Self::Restored(rec, _) | Self::Computed(rec, ..) => {
                Some(&rec.video_id)
            }
            Self::RejectedBefore => None,
        }
    }
}

pub(super) async fn compute_with_retries<P: Processor>(
    p: Arc<P>,
    rec: VideoRecord,
    cx: StageContext,
    settings: StageSettings,
    watch: Arc<StageWatch>,
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
                let wait = wait_before_retry(&e, attempt, &rec.video_id);
                tracing::warn!(stage = %cx.stage_id, video_id = %rec.video_id, error = %e, wait_ms = wait.as_millis() as u64, "Retrying.");
                watch.retrying(wait, e.retry_after.is_some());
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return Outcome::Computed(rec, other, None),
        }
    }
}

/// How long to wait before retry `attempt` after `e`: a wait the service asked for (checked and
/// capped by its client) wins over our backoff.
fn wait_before_retry(e: &StageError, attempt: u32, seed: &str) -> Duration {
    e.retry_after.map_or_else(
        || backoff(attempt, seed),
        |w| w.max(Duration::from_millis(50)),
    )
}

/// `f` again after the runtime's `backoff` (or the wait the service asked for) while it fails
/// with an external error, at most `retries` times: the same policy for calls made outside a
/// stage (`evaluate`'s judge) as for a stage's videos.
pub async fn retrying<T, F, Fut>(retries: u32, seed: &str, mut f: F) -> Result<T, StageError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StageError>>,
{
    let mut attempt = 0;
    loop {
        match f().await {
            Err(e) if e.kind == ErrorKind::External && attempt < retries => {
                let wait = wait_before_retry(&e, attempt, seed);
                tracing::warn!(call = %seed, error = %e, wait_ms = wait.as_millis() as u64, "Retrying.");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Slot;
    use async_trait::async_trait;
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

    /// A `Flaky` with `fail` and `hang` computed under `s`: its result and the calls made.
    async fn compute(
        fail: u32,
        hang: bool,
        s: StageSettings,
    ) -> (Result<Vec<u32>, StageError>, u32) {
        compute_watched(fail, hang, s).await.0
    }

    /// `compute`, and the stage's watch after it (what the metrics show of the retries).
    async fn compute_watched(
        fail: u32,
        hang: bool,
        s: StageSettings,
    ) -> ((Result<Vec<u32>, StageError>, u32), Arc<StageWatch>) {
        let calls = AtomicU32::new(0);
        let p = Arc::new(Flaky { calls, fail, hang });
        let rec = crate::store::test_support::record("v1");
        let cx = StageContext::detached(&std::env::temp_dir()).unwrap();
        let watch = StageWatch::new("s", std::time::Instant::now());
        match compute_with_retries(p.clone(), rec, cx, s, watch.clone()).await {
            Outcome::Computed(_, r, _) => ((r, p.calls.load(Ordering::SeqCst)), watch),
            _ => panic!("a computed outcome"),
        }
    }

    // Virtual time: the waits are the runtime's backoff, exactly, and take no wall time.
    #[tokio::test(start_paused = true)]
    async fn external_failures_are_retried_after_the_backoff() {
        let started = tokio::time::Instant::now();
        let ((r, calls), watch) = compute_watched(2, false, settings(2, None)).await;
        assert_eq!(r.unwrap(), vec![2]);
        assert_eq!(calls, 3);
        let waited = backoff(0, "v1") + backoff(1, "v1");
        assert_eq!(started.elapsed(), waited);
        // The metrics count both retries as our backoff's, with the time waited.
        let seen = watch.sample(None);
        assert_eq!(seen.retries, [0, 2]);
        assert_eq!(seen.retry_wait_ms, [0, waited.as_millis() as u64]);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_run_out_and_the_error_is_the_last_one() {
        let (r, calls) = compute(5, false, settings(1, None)).await;
        assert_eq!(r.unwrap_err().reason, "status_503");
        assert_eq!(calls, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_an_external_failure_and_is_retried() {
        let started = tokio::time::Instant::now();
        let (r, calls) = compute(0, true, settings(1, Some(Duration::from_secs(5)))).await;
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
}
