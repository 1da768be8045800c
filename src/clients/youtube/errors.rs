//! What a failed YouTube call becomes: retried (429, 5xx, transport, timeouts), the day's
//! bucket spent (`quotaExceeded`), the key refused, or the request refused. Reads Google's
//! JSON error bodies; writes nothing; the key is scrubbed from every message it keeps.

use google_youtube3::common;

/// Why a call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum YtError {
    /// Today's budget for this key is spent (by our ledger or by the API's `quotaExceeded`).
    #[error("{0}")]
    QuotaSpent(String),
    #[error(
        "the YouTube API rejected the key in ${env} (reason `{reason}`): check the key, and that the YouTube Data API v3 is enabled for its project"
    )]
    KeyInvalid { env: String, reason: String },
    /// A request the API refuses whatever we retry (bad parameter...).
    #[error("{method} refused ({code} {reason}): {message}")]
    Refused {
        method: &'static str,
        code: i64,
        reason: String,
        message: String,
    },
    /// Retries used up on 429, 5xx or transport errors.
    #[error("{method} failed after {attempts} attempts: {last}")]
    Unavailable {
        method: &'static str,
        attempts: u32,
        last: String,
    },
    #[error("{0}")]
    Setup(String),
}

pub(super) enum Failure {
    Retry(String),
    QuotaExceeded(String),
    KeyInvalid(String),
    Refused(i64, String, String),
}

impl Failure {
    pub(super) fn scrub(self, key: &str) -> Self {
        let s = |t: String| crate::secrets::scrub(&t, &[key]);
        match self {
            Failure::Retry(m) => Failure::Retry(s(m)),
            Failure::QuotaExceeded(m) => Failure::QuotaExceeded(s(m)),
            Failure::KeyInvalid(m) => Failure::KeyInvalid(s(m)),
            Failure::Refused(c, r, m) => Failure::Refused(c, s(r), s(m)),
        }
    }
}

/// Maps the crate's error to what we do about it. Transport error texts never contain the URL
/// (and so never the key); API error bodies are Google's JSON.
pub(super) fn classify(e: common::Error) -> Failure {
    match e {
        common::Error::BadRequest(json) => classify_body(&json),
        common::Error::Failure(resp) => {
            let status = resp.status().as_u16();
            if status == 429 || status >= 500 {
                Failure::Retry(format!("HTTP {status}"))
            } else {
                Failure::Refused(
                    status as i64,
                    "http_status".into(),
                    format!("HTTP {status} without a JSON body"),
                )
            }
        }
        common::Error::HttpError(e) => Failure::Retry(format!("transport: {e}")),
        common::Error::Io(e) => Failure::Retry(format!("transport: {e}")),
        common::Error::JsonDecodeError(_, e) => Failure::Refused(
            200,
            "bad_json".into(),
            format!("the answer is not the expected JSON: {e}"),
        ),
        other => Failure::Refused(0, "client".into(), other.to_string()),
    }
}

/// What Google's JSON error body says: the day's bucket spent, the key refused, worth a retry,
/// or the request refused.
fn classify_body(json: &serde_json::Value) -> Failure {
    let err = &json["error"];
    let code = err["code"].as_i64().unwrap_or(0);
    let message = err["message"].as_str().unwrap_or("").to_string();
    let reasons = reasons_in(&err["errors"]);
    let details = reasons_in(&err["details"]);
    let all: Vec<&str> = reasons
        .iter()
        .chain(details.iter())
        .map(String::as_str)
        .collect();
    let first = all.first().map(|s| s.to_string()).unwrap_or_default();
    if let Some(r) = all
        .iter()
        .find(|r| matches!(**r, "quotaExceeded" | "dailyLimitExceeded"))
    {
        Failure::QuotaExceeded(r.to_string())
    } else if let Some(r) = all.iter().find(|r| {
        matches!(
            **r,
            "keyInvalid" | "API_KEY_INVALID" | "keyExpired" | "accessNotConfigured" | "forbidden"
        )
    }) {
        Failure::KeyInvalid(r.to_string())
    } else if code == 429
        || code >= 500
        || all.iter().any(|r| {
            matches!(
                *r,
                "rateLimitExceeded" | "userRateLimitExceeded" | "backendError"
            )
        })
    {
        Failure::Retry(format!("{code} {first}: {message}"))
    } else {
        Failure::Refused(code, first, message)
    }
}

/// The `reason` of each entry of an error body's `errors` or `details` list.
fn reasons_in(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["reason"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The response cache refusing a read or a write stops the run as a setup fault.
impl From<crate::error::StageError> for YtError {
    fn from(e: crate::error::StageError) -> Self {
        YtError::Setup(e.detail)
    }
}
