//! Retries of the calls whose answer broke while it was read, which the crate's client does not
//! retry itself (see the module comment of `objects`).

use std::time::Duration;

/// Attempts of a call whose answer broke while it was read (see the module comment).
pub(super) const BODY_ATTEMPTS: u32 = 6;

/// Whether `e` is a transport fault the crate's client has not retried itself: an HTTP error of a
/// transient kind (connection reset, incomplete body, timeout) that no retry loop wrapped (the
/// client's own retries wrap theirs in a "Error performing …" error, and have been spent).
pub(super) fn unretried_transport_fault(e: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind as K};
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.to_string().starts_with("Error performing ") {
            return false;
        }
        if let Some(h) = err.downcast_ref::<HttpError>() {
            return matches!(
                h.kind(),
                K::Connect | K::Request | K::Timeout | K::Interrupted | K::Decode
            );
        }
        cur = err.source();
    }
    false
}

/// Runs `call` again, with backoff, while it fails with a fault the client did not retry.
pub(super) async fn attempts<T, F, Fut>(what: &str, call: F) -> Result<T, object_store::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, object_store::Error>>,
{
    attempts_while(what, unretried_transport_fault, call).await
}

/// Runs `call` again, with backoff, while it fails with an error `transient` accepts.
pub(super) async fn attempts_while<T, E, F, Fut>(
    what: &str,
    transient: impl Fn(&E) -> bool,
    call: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < BODY_ATTEMPTS && transient(&e) => {
                tracing::debug!(what, attempt, error = %e, "An answer broke while it was read; retrying.");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                attempt += 1;
            }
            r => return r,
        }
    }
}
