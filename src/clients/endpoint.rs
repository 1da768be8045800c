//! What every paid API client shares (the chat services of `clients::llm`, the transcription
//! services of `clients::asr`): the base URL, the key from the environment (sent as a bearer
//! token or Gemini's `x-goog-api-key`, scrubbed from every message), the timeouts, one send,
//! how a non-200 answer is read (retry with the wait the server asked for, reject, or stop the
//! run), and the latch that fails every later call at once after a refused key.
//!
//! One attempt per call everywhere: the runner owns retries.

use super::refusal::{self, Refusal};
use crate::config::ServiceConfig;
use crate::error::{ErrorKind, StageError};
use serde_json::Value;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How the key is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Auth {
    Bearer,
    GoogApiKey,
}

/// A service table that cannot make an endpoint, or a request that got no answer.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The HTTP client could not be built (TLS set-up).
    #[error("{0}")]
    Client(reqwest::Error),
    #[error("max_wait_secs must be between 0 and 86400, got {0}")]
    MaxWait(f64),
    /// No answer came (timeout, connection error, body cut off). Holds the error without its
    /// URL, which may carry a key.
    #[error("{0}")]
    Send(reqwest::Error),
}

/// A POST that gave no value: the status (0: no answer), the error for the runner, and the
/// server's refusal of the request's shape, when that is what it answered.
#[derive(Debug)]
pub struct Failure {
    pub status: u16,
    pub error: StageError,
    pub refusal: Option<Refusal>,
}

pub struct Endpoint {
    pub name: String,
    /// Ends with `/`.
    pub base_url: String,
    pub(crate) key: Option<String>,
    pub(crate) key_env: Option<String>,
    pub timeout: Duration,
    /// Cap on any wait a server asks for between attempts (it may ask for anything).
    pub max_wait: Duration,
    pub http: reqwest::Client,
    auth: Auth,
    /// A fatal answer (bad key, no quota): later calls fail at once with the same message.
    fatal: Mutex<Option<String>>,
}

impl Endpoint {
    /// `default_timeout` applies when the service sets no `timeout_secs`.
    pub fn new(
        name: &str,
        cfg: &ServiceConfig,
        auth: Auth,
        default_timeout: Duration,
    ) -> Result<Self, EndpointError> {
        // Read now but required only when a call is made, so `validate` and `rethreshold` work
        // without keys.
        let key = cfg
            .api_key_env
            .as_ref()
            .and_then(|env| std::env::var(env).ok())
            .filter(|k| !k.trim().is_empty());
        crate::tls::ensure_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .build()
            .map_err(EndpointError::Client)?;
        let mut base_url = cfg.base_url.clone();
        if !base_url.ends_with('/') {
            base_url.push('/');
        }
        let max_wait = match cfg.max_wait_secs {
            None => Duration::from_secs(60),
            Some(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => return Err(EndpointError::MaxWait(s)),
        };
        Ok(Self {
            name: name.to_string(),
            base_url,
            key,
            key_env: cfg.api_key_env.clone(),
            timeout: cfg
                .timeout_secs
                .map_or(default_timeout, Duration::from_secs),
            max_wait,
            http,
            auth,
            fatal: Mutex::new(None),
        })
    }

    pub fn scrub(&self, text: &str) -> String {
        crate::secrets::scrub(text, &[self.key.as_deref().unwrap_or_default()])
    }

    /// Refuses a call the service is known to refuse (an earlier fatal answer) or cannot
    /// authorise (no key), before any waiting.
    pub fn check_callable(&self) -> Result<(), StageError> {
        if let Some(msg) = self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(StageError::new(ErrorKind::Config, "service_refused", msg));
        }
        if let (None, Some(env)) = (&self.key, &self.key_env) {
            return Err(StageError::new(
                ErrorKind::Config,
                "missing_key",
                format!("set ${env} to the API key of service `{}`", self.name),
            ));
        }
        Ok(())
    }

    /// One POST of `body` (of `content_type`) to `url` with the key and the timeout, timed: a
    /// 200 whose body `parse` reads gives the value, that body and the latency in milliseconds.
    /// Anything else is the error `failed` makes of it, with the status (0: no answer came)
    /// and, when the server refused the request's shape, what it said (`refusal::read`).
    pub async fn post<T, E: std::fmt::Display>(
        &self,
        url: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
        parse: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<(T, Vec<u8>, i64), Failure> {
        let r = self
            .http
            .post(url)
            .header("content-type", content_type)
            .body(body);
        let started = Instant::now();
        let reply = self
            .send_full(r)
            .await
            .map(|(status, retry_after, _, bytes)| (status, retry_after, bytes))
            .map_err(|e| tracing::debug!(error = %e, "request failed"))
            .ok();
        let latency = started.elapsed().as_millis() as i64;
        let unreadable = match &reply {
            Some((200, _, bytes)) => match parse(bytes) {
                Ok(value) => {
                    let body = reply.map(|r| r.2).unwrap_or_default();
                    return Ok((value, body, latency));
                }
                Err(e) => Some(e.to_string()),
            },
            _ => None,
        };
        let status = reply.as_ref().map_or(0, |r| r.0);
        let refusal = match (&reply, &unreadable) {
            (Some((status, _, bytes)), None) => refusal::read(*status, &refusal::body(bytes)),
            _ => None,
        };
        Err(Failure {
            status,
            error: self.failed(reply, unreadable),
            refusal,
        })
    }

    /// Sends `r` with the key and the timeout: the status, the Retry-After seconds, the
    /// answer's headers (a resumable upload's URL comes in one) and the body, or why no answer
    /// came (without the URL, which may hold a key).
    pub async fn send_full(
        &self,
        r: reqwest::RequestBuilder,
    ) -> Result<(u16, Option<f64>, reqwest::header::HeaderMap, Vec<u8>), EndpointError> {
        let r = self.authorised(r);
        let _in_flight = crate::runtime::metrics::call_started(&self.name);
        let resp = r.timeout(self.timeout).send().await.map_err(|e| {
            crate::runtime::metrics::call_answered(&self.name, None);
            EndpointError::Send(e.without_url())
        })?;
        let status = resp.status().as_u16();
        crate::runtime::metrics::call_answered(&self.name, Some(status));
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let headers = resp.headers().clone();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| EndpointError::Send(e.without_url()))?;
        Ok((status, retry_after, headers, bytes.to_vec()))
    }

    /// `r` with the key, as this service takes it (none where no key is set).
    pub fn authorised(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match (&self.key, self.auth) {
            (Some(k), Auth::Bearer) => r.bearer_auth(k),
            (Some(k), Auth::GoogApiKey) => r.header("x-goog-api-key", k),
            (None, _) => r,
        }
    }

    /// A non-200 answer: why to retry it and the wait its body asks for, or the error that ends
    /// the call (a fatal refusal, remembered for later calls, or a request no retry can fix).
    pub fn retry_or_fail(
        &self,
        status: u16,
        bytes: &[u8],
    ) -> Result<(String, Option<f64>), StageError> {
        match classify(status, &refusal::body(bytes)) {
            Class::Fatal(why) => {
                let msg = self.scrub(&format!(
                    "service `{}` refused the request ({status}, {why}){}",
                    self.name,
                    self.key_env
                        .as_ref()
                        .map(|e| format!("; check the key in ${e} and its plan"))
                        .unwrap_or_default()
                ));
                *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg.clone());
                Err(StageError::new(ErrorKind::Config, "service_refused", msg))
            }
            Class::Retry(why, hint) => Ok((why, hint)),
            Class::Reject(why) => Err(StageError::data(
                "request_refused",
                self.scrub(&format!("{status}: {why}")),
            )),
            Class::NoImages(why) => Err(StageError::data(
                "images_not_supported",
                self.scrub(&format!(
                    "service `{}`: the model takes no images ({status}: {why}); point this stage at a vision model",
                    self.name
                )),
            )),
        }
    }

    /// The wait before the next attempt, from the server's Retry-After or body hint: checked
    /// and capped at `max_wait` (see `server_wait`).
    pub fn asked_wait(&self, secs: Option<f64>) -> Option<Duration> {
        secs.and_then(|s| server_wait(s, self.max_wait))
    }

    /// The error of a call that did not give an answer: `None` (no answer came), a 200 whose
    /// body was unreadable (`unreadable`), or another status. Retryable ones carry the wait the
    /// server asked for; a refusal is the error `retry_or_fail` makes of it.
    pub fn failed(
        &self,
        reply: Option<(u16, Option<f64>, Vec<u8>)>,
        unreadable: Option<String>,
    ) -> StageError {
        let (why, hint) = match (reply, unreadable) {
            (_, Some(e)) => (format!("unreadable answer: {e}"), None),
            (None, None) => ("no answer (timeout or connection error)".to_string(), None),
            (Some((status, retry_after, bytes)), None) => {
                match self.retry_or_fail(status, &bytes) {
                    Ok((why, hint)) => (why, retry_after.or(hint)),
                    Err(e) => return e,
                }
            }
        };
        StageError::external(
            "service_unavailable",
            self.scrub(&format!("{}: {why}", self.name)),
        )
        .with_retry_after(self.asked_wait(hint))
    }
}

#[derive(Debug)]
enum Class {
    /// With the wait the server asked for, in seconds (unchecked).
    Retry(String, Option<f64>),
    Fatal(String),
    Reject(String),
    /// Images sent to a model that reads none: no retry can change that answer.
    NoImages(String),
}

/// A wait a server asked for, in seconds, made safe to sleep on: a negative or non-number value
/// is ignored (our own backoff applies), anything longer than `cap` (an infinity, 1e30) is cut to
/// `cap`. Both are logged; neither can panic.
fn server_wait(secs: f64, cap: Duration) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        tracing::warn!(
            asked = secs,
            "Ignoring a server's retry wait that is not a duration."
        );
        return None;
    }
    if secs > cap.as_secs_f64() {
        tracing::warn!(
            asked = secs,
            cap_secs = cap.as_secs_f64(),
            "A server asked for a longer retry wait than max_wait_secs; waiting max_wait_secs."
        );
        return Some(cap);
    }
    Some(Duration::from_secs_f64(secs))
}

/// "try again in 6ms" / "in 1.5s" in an OpenAI message; Gemini's RetryInfo "retryDelay": "6s"
/// (seconds, not yet checked: see `server_wait`).
fn retry_hint(err: &Value) -> Option<f64> {
    let msg = err["error"]["message"].as_str().unwrap_or("");
    if let Some(i) = msg.find("try again in ") {
        let rest = &msg[i + 13..];
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let unit = &rest[num.len()..];
        if let Ok(v) = num.parse::<f64>() {
            return Some(if unit.starts_with("ms") {
                v / 1000.0
            } else {
                v
            });
        }
    }
    err["error"]["details"].as_array().and_then(|d| {
        d.iter().find_map(|x| {
            x["retryDelay"]
                .as_str()
                .and_then(|s| s.trim_end_matches('s').parse::<f64>().ok())
        })
    })
}

fn classify(status: u16, err: &Value) -> Class {
    let e = &err["error"];
    let code = e["code"].as_str().or(e["type"].as_str()).unwrap_or("");
    let reasons: Vec<&str> = e["details"]
        .as_array()
        .map(|d| d.iter().filter_map(|x| x["reason"].as_str()).collect())
        .unwrap_or_default();
    let message = e["message"].as_str().or(err.as_str()).unwrap_or("");
    let message = message.to_string();
    let why = |w: &str| {
        if message.is_empty() {
            w.to_string()
        } else {
            format!("{w}: {message}")
        }
    };
    if code == "insufficient_quota" || e["type"] == "insufficient_quota" {
        return Class::Fatal(why("insufficient_quota"));
    }
    if reasons.contains(&"API_KEY_INVALID")
        || code == "invalid_api_key"
        || status == 401
        || (status == 403 && !reasons.contains(&"RATE_LIMIT_EXCEEDED"))
    {
        let r = reasons.first().copied().unwrap_or(if code.is_empty() {
            "unauthorized"
        } else {
            code
        });
        return Class::Fatal(why(r));
    }
    // llama.cpp's server answers images sent to a model without a vision projector with a 500
    // (`image input is not supported`, tests/fixtures/llm/llamacpp): retried, it would be a
    // storm of the same refusal.
    if message.contains("image input is not supported") {
        return Class::NoImages(message);
    }
    // A request refused for its shape gets the same answer every time, whatever the status
    // (llama-cpp-python answers its validation errors with a 500).
    if let Some(r) = refusal::read(status, err) {
        return Class::Reject(format!(
            "{}{}",
            r.field.map(|f| format!("{f}: ")).unwrap_or_default(),
            r.why
        ));
    }
    if status == 429 || status >= 500 || status == 408 {
        return Class::Retry(
            why(if code.is_empty() {
                "rate limited or server error"
            } else {
                code
            }),
            retry_hint(err),
        );
    }
    Class::Reject(why(if code.is_empty() {
        e["status"].as_str().unwrap_or("bad request")
    } else {
        code
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_hints_from_both_apis() {
        let o: Value = serde_json::from_str(
            r#"{"error":{"message":"Limit 10000 / min. Please try again in 6ms. Visit"}}"#,
        )
        .unwrap();
        assert_eq!(retry_hint(&o), Some(0.006));
        let g: Value = serde_json::from_str(r#"{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}"#).unwrap();
        assert_eq!(retry_hint(&g), Some(1.5));
    }

    /// llama.cpp's server, as recorded (tests/fixtures/llm/llamacpp): what it refuses for good
    /// is not retried; what a moment may change is.
    #[test]
    fn llama_cpp_refusals_are_classified_by_their_bodies() {
        let body = |name: &str| -> Value {
            let p = format!(
                "{}/tests/fixtures/llm/llamacpp/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        let img = classify(500, &body("error_500_image_not_supported.json"));
        assert!(
            matches!(&img, Class::NoImages(m) if m.starts_with("image input is not supported")),
            "{img:?}"
        );
        let ctx = classify(400, &body("error_400_exceed_context_size.json"));
        assert!(
            matches!(&ctx, Class::Reject(m) if m.starts_with("exceed_context_size_error: request (2019 tokens) exceeds")),
            "{ctx:?}"
        );
        let files = classify(404, &body("error_404_files.json"));
        assert!(
            matches!(&files, Class::Reject(m) if m.starts_with("not_found_error")),
            "{files:?}"
        );
        let loading = classify(503, &body("error_503_loading.json"));
        assert!(matches!(loading, Class::Retry(..)), "{loading:?}");
    }

    #[test]
    fn server_waits_never_panic_and_never_pass_the_cap() {
        let cap = Duration::from_secs(5);
        for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
            assert_eq!(server_wait(bad, cap), None, "{bad}");
        }
        for huge in [f64::INFINITY, 1e30, 56.0, f64::MAX] {
            assert_eq!(server_wait(huge, cap), Some(cap), "{huge}");
        }
        assert_eq!(server_wait(1.5, cap), Some(Duration::from_millis(1500)));
        assert_eq!(server_wait(0.0, cap), Some(Duration::ZERO));
    }
}
