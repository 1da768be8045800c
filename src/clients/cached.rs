//! The one path every paid client (chat, transcription, YouTube) takes through the response
//! cache: look the key up, call only on a miss, store what answered. Reads and writes the
//! `ResponseCache` it is handed; calls whatever the client passes in.
//!
//! Why one helper: a client that stores before it has parsed an answer pays for it again on the
//! next run, and one that forgets to store pays every time. Here the store happens exactly when
//! the call says it answered, and a hit the client cannot read falls through to a call (or is an
//! error, if the client says so) in one place.

use std::future::Future;
use std::sync::Arc;

use crate::error::StageError;
use crate::store::cache::{CacheKey, CachedResponse, ResponseCache};

/// What a call that answered gives back: the parsed value, and the record the cache keeps
/// (the raw body, so a later reader can parse it again).
pub struct Answered<T> {
    pub value: T,
    pub record: CachedResponse,
}

/// `key`'s answer: from `cache` when `read_hit` can read the stored one (`Ok(None)`: it cannot,
/// call again; `Err`: stop), else from `call`, stored before it is returned.
pub async fn through_cache<T, E, R, F, Fut>(
    cache: &Arc<ResponseCache>,
    key: &CacheKey,
    read_hit: R,
    call: F,
) -> Result<T, E>
where
    E: From<StageError>,
    R: FnOnce(&CachedResponse) -> Result<Option<T>, E>,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Answered<T>, E>>,
{
    if let Some(hit) = cache.lookup(key).await?
        && let Some(value) = read_hit(&hit)?
    {
        return Ok(value);
    }
    let Answered { value, record } = call().await?;
    cache.store(key, record).await?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn key(request: &str) -> CacheKey {
        CacheKey {
            service: "svc".into(),
            method: "m".into(),
            request: request.into(),
        }
    }

    fn answered(body: &str) -> Answered<String> {
        Answered {
            value: body.to_string(),
            record: CachedResponse {
                status: 200,
                body: body.as_bytes().to_vec(),
                ..Default::default()
            },
        }
    }

    fn read(hit: &CachedResponse) -> Result<Option<String>, StageError> {
        let s = String::from_utf8_lossy(&hit.body).to_string();
        Ok((s != "unreadable").then_some(s))
    }

    #[tokio::test]
    async fn calls_once_then_answers_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
        let calls = AtomicU32::new(0);
        for _ in 0..3 {
            let got = through_cache(&cache, &key("a"), read, || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Ok::<_, StageError>(answered("answer"))
            })
            .await
            .unwrap();
            assert_eq!(got, "answer");
        }
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_failed_call_stores_nothing_and_an_unreadable_hit_is_asked_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
        let failed = through_cache(&cache, &key("b"), read, || async {
            Err::<Answered<String>, _>(StageError::data("refused", "no"))
        })
        .await;
        assert!(failed.is_err());
        assert!(cache.get(&key("b")).unwrap().is_none());

        let stored = through_cache(&cache, &key("b"), read, || async {
            Ok::<_, StageError>(answered("unreadable"))
        })
        .await
        .unwrap();
        assert_eq!(stored, "unreadable");
        // The stored body cannot be read back: the next ask calls again and replaces it.
        let again = through_cache(&cache, &key("b"), read, || async {
            Ok::<_, StageError>(answered("fixed"))
        })
        .await
        .unwrap();
        assert_eq!(again, "fixed");
        let third = through_cache(&cache, &key("b"), read, || async {
            Err::<Answered<String>, _>(StageError::data("refused", "not called"))
        })
        .await
        .unwrap();
        assert_eq!(third, "fixed");
    }
}
