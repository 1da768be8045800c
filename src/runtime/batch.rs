//! Batch mode of the model services, as the runner sees it: between two passes it asks each
//! service in batch or offline mode to attach its queue, cut what a pass deferred into jobs and
//! drive them to their end. The queue files are the store's (`store::batch`), the providers'
//! protocols the clients' (`clients::llm`); the runtime only knows this interface and owns the
//! retries of its calls.

use crate::error::{ErrorKind, RunError, StageError};
use crate::store::cache::ResponseCache;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// A model service whose requests can wait for a batch.
#[async_trait::async_trait]
pub trait BatchService: Send + Sync {
    fn name(&self) -> &str;
    /// Loads the service's queue from the run's local folder (before each pass).
    fn attach(&self, run_dir: &Path) -> Result<(), RunError>;
    /// Batch mode sends its batches itself; offline mode leaves them to `vidcurate batch`.
    fn sends_batches(&self) -> bool;
    /// Requests deferred and not yet in a job.
    fn pending(&self) -> usize;
    /// Cuts the pending requests into jobs within the service's limits; returns how many.
    fn chunk(&self) -> Result<usize, RunError>;
    /// Drives every job not imported yet to its end (submit, poll, file the answers into
    /// `cache`); returns early (Ok) when `cancel` fires, with the jobs recorded.
    async fn settle(
        &self,
        cache: &ResponseCache,
        cancel: &CancellationToken,
    ) -> Result<Settled, RunError>;
}

/// What settling did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Settled {
    pub jobs: usize,
    pub answered: usize,
    pub errors: usize,
}

/// A protocol call of the batch interface with the runtime's retries: a 429, a 5xx or no answer
/// is tried again with backoff (8 attempts); a refused key stops the run.
pub async fn with_retries<T, F, Fut>(
    what: &str,
    cancel: &CancellationToken,
    mut f: F,
) -> Result<T, RunError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StageError>>,
{
    let mut attempt = 0;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == ErrorKind::External && attempt < 8 && !cancel.is_cancelled() => {
                let wait = e
                    .retry_after
                    .unwrap_or_else(|| super::backoff(attempt, what));
                tracing::warn!(call = what, error = %e, wait_ms = wait.as_millis() as u64, "Batch interface call failed; retrying.");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = cancel.cancelled() => {}
                }
                attempt += 1;
            }
            Err(e) => {
                return Err(match e.kind {
                    ErrorKind::Config => RunError::Config(e.detail),
                    ErrorKind::External => RunError::Stopped(format!(
                        "{}; the batches are recorded: rerun to resume polling them",
                        e.detail
                    )),
                    _ => RunError::Internal(e.detail),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    fn busy() -> StageError {
        StageError::external("status_503", "the batch interface answered 503")
    }

    // Virtual time: the backoff between attempts is waited for in full, and instantly.
    #[tokio::test(start_paused = true)]
    async fn retries_external_failures_with_the_runtime_backoff() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let r = with_retries("poll batch", &CancellationToken::new(), || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0..=2 => Err(busy()),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let want: Duration = (0..3).map(|a| super::super::backoff(a, "poll batch")).sum();
        assert_eq!(started.elapsed(), want);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_the_service_asked_for_replaces_the_backoff() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let r = with_retries("upload", &CancellationToken::new(), || async {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(busy().with_retry_after(Some(Duration::from_secs(42))))
            } else {
                Ok(())
            }
        })
        .await;
        assert!(r.is_ok());
        assert_eq!(started.elapsed(), Duration::from_secs(42));
    }

    #[tokio::test(start_paused = true)]
    async fn after_nine_attempts_the_run_stops_with_its_batches_recorded() {
        let calls = AtomicU32::new(0);
        let r: Result<(), RunError> =
            with_retries("create batch", &CancellationToken::new(), || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(busy()) }
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 9);
        match r {
            Err(RunError::Stopped(m)) => assert!(m.contains("rerun to resume polling"), "{m}"),
            other => panic!("expected a clean stop, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_key_stops_at_once_and_a_cancel_ends_the_wait() {
        let calls = AtomicU32::new(0);
        let r: Result<(), RunError> = with_retries("upload", &CancellationToken::new(), || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(StageError::new(ErrorKind::Config, "key_refused", "401")) }
        })
        .await;
        assert!(matches!(r, Err(RunError::Config(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        // Cancelled while waiting: the wait ends at once and the next failure is final.
        let cancel = CancellationToken::new();
        let (c2, started) = (cancel.clone(), tokio::time::Instant::now());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c2.cancel();
        });
        let r: Result<(), RunError> =
            with_retries("poll batch", &cancel, || async { Err(busy()) }).await;
        assert!(matches!(r, Err(RunError::Stopped(_))));
        assert_eq!(started.elapsed(), Duration::from_millis(10));
    }
}
