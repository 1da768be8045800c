//! YouTube Data API v3 through `google-youtube3`, with the run's response cache and a persistent
//! quota ledger in front of every call.
//!
//! A call goes: response cache (hit → no call, no quota) → quota ledger (would the call overspend
//! today's budget? → stop) → the API, retried with backoff on 429, 5xx and transport errors →
//! cache. `quotaExceeded` marks the day's bucket spent and stops; `keyInvalid` stops at once. The
//! key travels only as the `key` query parameter; the cache and every message name the key by a
//! short hash.
//!
//! Here: the client and its calls. `quota` keeps the ledger and the Pacific-day arithmetic;
//! `errors` says what a failed call becomes (retry, spent, refused).

mod errors;
mod quota;

pub use errors::YtError;
pub use quota::{QuotaConfig, QuotaLedger, pacific_day};

use super::cached::{Answered, through_cache};
use crate::store::cache::{CacheKey, CachedResponse, ResponseCache};
use chrono::{DateTime, NaiveDate, Utc};
use errors::{Failure, classify};
use google_youtube3::api::{SearchListResponse, VideoListResponse};
use google_youtube3::{YouTube, common};
use quota::until_reset;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Connector = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    Search,
    Videos,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Search => "search.list",
            Method::Videos => "videos.list",
        }
    }
}

/// Connection settings, from `[services.youtube]`.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub base_url: String,
    pub api_key_env: String,
    pub timeout: Duration,
    pub max_retries: u32,
    pub quota: QuotaConfig,
}

pub struct YouTubeClient {
    hub: YouTube<Connector>,
    key: String,
    key_id: String,
    settings: ClientSettings,
    cache: Arc<ResponseCache>,
    ledger: Arc<QuotaLedger>,
    /// Requests that went over the network in this process.
    pub calls: AtomicU64,
    /// Quota units (or search calls) charged in this process, per bucket name.
    pub charged: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

/// A short, stable name for a key that does not reveal it.
pub fn key_id(key: &str) -> String {
    blake3::hash(format!("vidcurate-key\0{key}").as_bytes()).to_hex()[..12].to_string()
}

impl YouTubeClient {
    pub fn new(settings: ClientSettings, cache: Arc<ResponseCache>) -> Result<Self, YtError> {
        let key = std::env::var(&settings.api_key_env)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| {
                YtError::Setup(format!(
                    "set ${} to a YouTube Data API v3 key (the pipeline's services.youtube.api_key_env names this variable)",
                    settings.api_key_env
                ))
            })?;
        crate::tls::ensure_provider();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| YtError::Setup(format!("TLS roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let mut hub = YouTube::new(client, common::NoToken);
        let mut base = settings.base_url.clone();
        if !base.ends_with('/') {
            base.push('/');
        }
        hub.base_url(base.clone());
        hub.root_url(base);
        let ledger = Arc::new(QuotaLedger::open(&settings.quota.ledger_path())?);
        Ok(Self {
            hub,
            key_id: key_id(&key),
            key,
            settings,
            cache,
            ledger,
            calls: AtomicU64::new(0),
            charged: Default::default(),
        })
    }

    /// A ledger call on a blocking thread: SQLite may wait for another run's lock (busy timeout),
    /// and a tokio worker must not.
    async fn on_ledger<T: Send + 'static>(
        &self,
        f: impl FnOnce(&QuotaLedger, &str) -> Result<T, YtError> + Send + 'static,
    ) -> Result<T, YtError> {
        let (ledger, key_id) = (self.ledger.clone(), self.key_id.clone());
        tokio::task::spawn_blocking(move || f(&ledger, &key_id))
            .await
            .map_err(|e| YtError::Setup(format!("quota ledger: {e}")))?
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// What is left today, per bucket, for messages.
    pub fn remaining(&self) -> Result<Vec<(&'static str, u64, u64)>, YtError> {
        let day = pacific_day(Utc::now());
        let q = &self.settings.quota;
        let mut buckets = vec![("units", q.units_per_day)];
        if q.search_bucket {
            buckets.insert(0, ("search.list", q.search_calls_per_day));
        }
        buckets
            .into_iter()
            .map(|(b, budget)| Ok((b, self.ledger.used(&self.key_id, day, b)?, budget)))
            .collect()
    }

    /// One search.list page. `params` are YouTube's parameter names and values (sorted: they are
    /// also the cache key).
    pub async fn search(
        &self,
        params: &std::collections::BTreeMap<String, String>,
    ) -> Result<SearchListResponse, YtError> {
        let request = canonical(params);
        self.cached(Method::Search, request, || {
            let mut call = self
                .hub
                .search()
                .list(&vec!["snippet".to_string()])
                .param("key", &self.key);
            // The builder refuses its own parameters as custom ones: use its setters.
            for (k, v) in params {
                call = match k.as_str() {
                    "q" => call.q(v),
                    "type" => call.add_type(v),
                    "maxResults" => call.max_results(v.parse().unwrap_or(50)),
                    "pageToken" => call.page_token(v),
                    "publishedAfter" | "publishedBefore" => match DateTime::parse_from_rfc3339(v) {
                        Ok(t) if k == "publishedAfter" => call.published_after(t.to_utc()),
                        Ok(t) => call.published_before(t.to_utc()),
                        Err(_) => call.param(k, v),
                    },
                    "regionCode" => call.region_code(v),
                    "relevanceLanguage" => call.relevance_language(v),
                    "videoDuration" => call.video_duration(v),
                    "videoDefinition" => call.video_definition(v),
                    "videoCaption" => call.video_caption(v),
                    "videoLicense" => call.video_license(v),
                    "order" => call.order(v),
                    "safeSearch" => call.safe_search(v),
                    "location" => call.location(v),
                    "locationRadius" => call.location_radius(v),
                    _ => call.param(k, v),
                };
            }
            call.doit()
        })
        .await
    }

    /// One videos.list call for up to 50 ids.
    pub async fn videos(&self, ids: &[String]) -> Result<VideoListResponse, YtError> {
        let parts = ["snippet", "contentDetails", "statistics", "status"];
        let request = format!("part={}&id={}", parts.join(","), ids.join(","));
        self.cached(Method::Videos, request, || {
            self.hub
                .videos()
                .list(&parts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .add_id(&ids.join(","))
                .max_results(50)
                .param("key", &self.key)
                .doit()
        })
        .await
    }

    async fn cached<T, F, Fut>(
        &self,
        method: Method,
        request: String,
        call: F,
    ) -> Result<T, YtError>
    where
        T: serde::de::DeserializeOwned,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = common::Result<(common::Response, T)>>,
    {
        let key = CacheKey {
            service: "youtube".into(),
            method: method.name().into(),
            request,
        };
        let read_hit = |hit: &CachedResponse| {
            serde_json::from_slice(&hit.body).map(Some).map_err(|e| {
                YtError::Setup(format!(
                    "cached {} answer does not parse ({e}); delete the run's cache/responses.sqlite to refetch",
                    method.name()
                ))
            })
        };
        through_cache(&self.cache, &key, read_hit, || {
            self.call(method, &key, call)
        })
        .await
    }

    /// The call `cached` makes on a miss: booked in the ledger, retried on 429, 5xx and
    /// transport errors.
    async fn call<T, F, Fut>(
        &self,
        method: Method,
        key: &CacheKey,
        call: F,
    ) -> Result<Answered<T>, YtError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = common::Result<(common::Response, T)>>,
    {
        let (bucket, cost, budget) = self.settings.quota.charge(method);
        let mut attempt = 0u32;
        loop {
            let charge = Charge {
                day: pacific_day(Utc::now()),
                bucket,
                cost,
                budget,
            };
            self.reserve(method, &charge).await?;
            let failure = match self.attempt(&call).await {
                Ok(answered) => return Ok(answered),
                Err(failure) => failure,
            };
            match failure {
                Failure::Retry(last) if attempt < self.settings.max_retries => {
                    let wait = crate::runtime::backoff(attempt, &key.request);
                    tracing::warn!(method = method.name(), attempt = attempt + 1, wait_ms = wait.as_millis() as u64, error = %last, "Retrying YouTube call.");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                failure => return Err(self.give_up(failure, method, attempt, &charge).await),
            }
        }
    }

    /// Books one call's units in the ledger before it is sent (and in this client's counters);
    /// a budget the ledger says is spent stops here.
    async fn reserve(&self, method: Method, charge: &Charge) -> Result<(), YtError> {
        let Charge {
            day,
            bucket,
            cost,
            budget,
        } = *charge;
        let reserved = self
            .on_ledger(move |l, key_id| l.reserve(key_id, day, bucket, cost, budget))
            .await?;
        let used = match reserved {
            Ok(u) | Err(u) => u,
        };
        crate::runtime::metrics::quota_left(&self.key_id, bucket, budget.saturating_sub(used));
        if let Err(used) = reserved {
            return Err(YtError::QuotaSpent(format!(
                "the {bucket} budget of key {} for {day} (Pacific) is spent: {used} of {budget} used, {} needs {cost}; it resets in {}",
                self.key_id,
                method.name(),
                human(until_reset(Utc::now()))
            )));
        }
        *self
            .charged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(bucket)
            .or_default() += cost;
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One call within the time limit: the answer with the body the cache keeps, or how it
    /// failed (secrets scrubbed).
    async fn attempt<T, F, Fut>(&self, call: &F) -> Result<Answered<T>, Failure>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = common::Result<(common::Response, T)>>,
    {
        let started = Instant::now();
        match tokio::time::timeout(self.settings.timeout, call()).await {
            Ok(Ok((resp, value))) => {
                let body = common::to_bytes(resp.into_body())
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                let record = CachedResponse {
                    status: 200,
                    body,
                    latency_ms: started.elapsed().as_millis() as i64,
                    ..Default::default()
                };
                Ok(Answered { value, record })
            }
            // Google's messages do not echo keys today; scrub anyway before anything is logged.
            Ok(Err(e)) => Err(classify(e).scrub(&self.key)),
            Err(_) => Err(Failure::Retry(format!(
                "no answer within {} s",
                self.settings.timeout.as_secs_f64()
            ))),
        }
    }

    /// The error a failure that is not retried (any more) ends the call with; an answer that
    /// the quota is exceeded also marks the bucket spent in the ledger.
    async fn give_up(
        &self,
        failure: Failure,
        method: Method,
        attempt: u32,
        charge: &Charge,
    ) -> YtError {
        let Charge {
            day,
            bucket,
            budget,
            ..
        } = *charge;
        match failure {
            Failure::Retry(last) => YtError::Unavailable {
                method: method.name(),
                attempts: attempt + 1,
                last,
            },
            Failure::QuotaExceeded(reason) => {
                if let Err(e) = self
                    .on_ledger(move |l, key_id| l.exhaust(key_id, day, bucket, budget))
                    .await
                {
                    return e;
                }
                crate::runtime::metrics::quota_left(&self.key_id, bucket, 0);
                YtError::QuotaSpent(format!(
                    "YouTube answered `{reason}` for key {} on {day} (Pacific); the {bucket} bucket is counted as spent until it resets in {}",
                    self.key_id,
                    human(until_reset(Utc::now()))
                ))
            }
            Failure::KeyInvalid(reason) => YtError::KeyInvalid {
                env: self.settings.api_key_env.clone(),
                reason,
            },
            Failure::Refused(code, reason, message) => YtError::Refused {
                method: method.name(),
                code,
                reason,
                message,
            },
        }
    }
}

/// What one call is booked as: the Pacific day, the quota bucket, its cost and the budget.
#[derive(Clone, Copy)]
struct Charge {
    day: NaiveDate,
    bucket: &'static str,
    cost: u64,
    budget: u64,
}

fn human(d: Duration) -> String {
    let m = d.as_secs() / 60;
    format!("{} h {:02} min", m / 60, m % 60)
}

/// The response-cache key of the search.list page `params` asks for (what `search` looks up
/// first): a dry run asks whether a window was searched before.
pub fn search_key(params: &std::collections::BTreeMap<String, String>) -> CacheKey {
    CacheKey {
        service: "youtube".into(),
        method: Method::Search.name().into(),
        request: canonical(params),
    }
}

/// Sorted `k=v` pairs joined by `&`: the cache key of a request (the key is never in it).
fn canonical(params: &std::collections::BTreeMap<String, String>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Seconds of an ISO 8601 duration as YouTube and others write it: `PT21M7S`, fractions
/// (`PT1H0.040S`), a trailing `Z`, a missing leading `P` (`T30M38S`). Years and months count as
/// 365 and 30 days (YouTube never sends them for videos; yt-dlp does the same).
pub fn parse_duration(s: &str) -> Option<f64> {
    let t = s.trim();
    let t = t.strip_suffix('Z').unwrap_or(t);
    let owned;
    let t = if t.starts_with('T') {
        owned = format!("P{t}");
        owned.as_str()
    } else {
        t
    };
    match iso8601::duration(t).ok()? {
        iso8601::Duration::YMDHMS {
            year,
            month,
            day,
            hour,
            minute,
            second,
            millisecond,
        } => Some(
            ((year as f64 * 365.0 + month as f64 * 30.0 + day as f64) * 86_400.0)
                + hour as f64 * 3600.0
                + minute as f64 * 60.0
                + second as f64
                + millisecond as f64 / 1000.0,
        ),
        iso8601::Duration::Weeks(w) => Some(w as f64 * 7.0 * 86_400.0),
    }
}
