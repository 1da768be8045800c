//! Speech recognition services that speak OpenAI's `POST /v1/audio/transcriptions` (OpenAI's
//! `whisper-1` / `gpt-4o-transcribe`, vLLM, whisper.cpp's server, faster-whisper servers), asked
//! for `verbose_json` so each answer carries timed segments.
//!
//! A call goes: response cache (hit → no call) → request budget → one multipart POST with a
//! timeout → cache. As with the chat services (`clients::llm`), the runner owns retries: a 429,
//! 5xx, timeout or unreadable body is an external error carrying the wait the server asked for;
//! a refused key or `insufficient_quota` is a configuration error that stops the run, and is
//! remembered so later calls fail at once. Keys come from the environment and are scrubbed from
//! every message. The multipart body is written here (a file part and four text fields), which
//! is all this API takes.

use super::cached::{Answered, through_cache};
use super::endpoint::{Auth, Endpoint, EndpointError};
use crate::config::{ServiceApi, ServiceConfig};
use crate::error::{ErrorKind, StageError};
use crate::store::cache::{CacheKey, CachedResponse, ResponseCache};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde_json::{Value, json};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One upload: a WAV file and what is asked of it.
#[derive(Debug, Clone)]
pub struct TranscribeRequest {
    pub model: String,
    /// ISO-639-1 code of the spoken language, when known (skips the model's own detection).
    pub language: Option<String>,
    pub wav: Arc<Vec<u8>>,
}

/// A timed piece of the answer, in seconds from the start of the uploaded file.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    pub text: String,
}

/// A `verbose_json` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcription {
    pub text: String,
    /// As the service names it ("english" from OpenAI, "en" from some servers).
    pub language: Option<String>,
    pub duration: Option<f64>,
    pub segments: Vec<Segment>,
    /// Whether the service timed the segments (false for a plain `json` answer: one segment,
    /// start and end 0).
    pub timed: bool,
    /// Answered from the response cache (no call made).
    pub cached: bool,
}

/// The gpt-4o transcription models refuse `verbose_json` (they answer `json` or `text` only), so
/// they are asked for `json`; every other model for `verbose_json` with segment timestamps.
pub fn timed_format(model: &str) -> bool {
    !model.starts_with("gpt-4o")
}

/// A service table that cannot make a transcription service, or an answer that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AsrError {
    #[error(
        "a transcription service speaks OpenAI's audio/transcriptions API: `api = \"gemini\"` does not apply"
    )]
    GeminiApi,
    #[error(
        "max_retries applies to the youtube source only: a transcription stage's attempts per video are the stage's `retries` (default 2)"
    )]
    MaxRetries,
    #[error(
        "tokens_per_minute does not apply to a transcription service (it is billed by audio time); use requests_per_minute"
    )]
    TokensPerMinute,
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The body is not JSON.
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("no `text` in the answer")]
    NoText,
    #[error("segment {0} has no start or end")]
    SegmentTimes(usize),
}

pub struct AsrService {
    pub name: String,
    /// URL, key, timeouts, the one send and the reading of refusals (shared with the chat
    /// services).
    ep: Endpoint,
    requests: Option<DefaultDirectRateLimiter>,
    /// Requests sent over the network by this process.
    pub calls: AtomicU64,
}

impl AsrService {
    pub fn new(name: &str, cfg: &ServiceConfig) -> Result<Self, AsrError> {
        if cfg.api == Some(ServiceApi::Gemini) {
            return Err(AsrError::GeminiApi);
        }
        if cfg.max_retries.is_some() {
            return Err(AsrError::MaxRetries);
        }
        if cfg.tokens_per_minute.is_some() {
            return Err(AsrError::TokensPerMinute);
        }
        Ok(Self {
            name: name.to_string(),
            // Long audio takes long: a 24 MiB chunk is ~13 minutes of speech.
            ep: Endpoint::new(name, cfg, Auth::Bearer, Duration::from_secs(600))?,
            requests: cfg
                .requests_per_minute
                .and_then(NonZeroU32::new)
                .map(|n| RateLimiter::direct(Quota::per_minute(n).allow_burst(NonZeroU32::MIN))),
            calls: AtomicU64::new(0),
        })
    }

    /// The audio enters the key as its BLAKE3 hash: the same chunk of the same video (or the
    /// same bytes in another video) is never paid for twice.
    fn cache_key(&self, req: &TranscribeRequest) -> CacheKey {
        CacheKey {
            service: self.name.clone(),
            method: format!("audio/transcriptions:{}", req.model),
            request: json!({
                "model": req.model,
                "audio_blake3": blake3::hash(&req.wav).to_hex().to_string(),
                "language": req.language,
                "timed": timed_format(&req.model),
            })
            .to_string(),
        }
    }

    /// Transcribes `req` (or answers it from `cache`).
    pub async fn transcribe(
        &self,
        req: &TranscribeRequest,
        cache: &Arc<ResponseCache>,
    ) -> Result<Transcription, StageError> {
        let key = self.cache_key(req);
        let read_hit = |hit: &CachedResponse| {
            Ok(parse_verbose_json(&hit.body).ok().map(|mut t| {
                t.cached = true;
                t
            }))
        };
        through_cache(cache, &key, read_hit, || self.call(req)).await
    }

    /// The upload `transcribe` makes on a cache miss.
    async fn call(&self, req: &TranscribeRequest) -> Result<Answered<Transcription>, StageError> {
        self.ep.check_callable()?;
        if let Some(l) = &self.requests {
            l.until_ready().await;
        }
        let (content_type, body) = multipart(req);
        let url = format!("{}audio/transcriptions", self.ep.base_url);
        self.calls.fetch_add(1, Ordering::Relaxed);
        let (t, body, latency) = self
            .ep
            .post(&url, &content_type, body, parse_verbose_json)
            .await
            .map_err(
                |super::endpoint::Failure {
                     status,
                     error: mut e,
                     ..
                 }| {
                    if e.kind == ErrorKind::Data {
                        // A request the server will never take: for a 413, what to change.
                        e.detail = format!(
                            "{}: {}{}",
                            self.name,
                            e.detail,
                            if status == 413 {
                                " (lower the stage's max_upload_bytes)"
                            } else {
                                ""
                            }
                        );
                    }
                    e
                },
            )?;
        let record = CachedResponse {
            status: 200,
            parsed: Some(t.text.clone()),
            latency_ms: latency,
            body,
            ..Default::default()
        };
        Ok(Answered { value: t, record })
    }
}

/// The multipart/form-data body of one request and its content type. The boundary comes from
/// the audio's hash, so a request is the same bytes every time it is made.
fn multipart(req: &TranscribeRequest) -> (String, Vec<u8>) {
    let boundary = format!("vidcurate-{}", &blake3::hash(&req.wav).to_hex()[..32]);
    let mut b = Vec::with_capacity(req.wav.len() + 1024);
    let mut field = |name: &str, value: &str| {
        b.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    };
    field("model", &req.model);
    if timed_format(&req.model) {
        field("response_format", "verbose_json");
        field("timestamp_granularities[]", "segment");
    } else {
        field("response_format", "json");
    }
    if let Some(l) = &req.language {
        field("language", l);
    }
    b.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes(),
    );
    b.extend_from_slice(&req.wav);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

/// Reads a `verbose_json` body: `text`, `language`, `duration`, `segments[{start, end, text}]`.
/// A plain `json` answer (the gpt-4o transcription models have no other) has no segments: its
/// text is kept with `timed` false, and the caller times it as the whole upload.
pub fn parse_verbose_json(body: &[u8]) -> Result<Transcription, AsrError> {
    let v: Value = serde_json::from_slice(body).map_err(AsrError::Json)?;
    let text = v["text"].as_str().ok_or(AsrError::NoText)?.to_string();
    let duration = v["duration"].as_f64();
    let mut segments = vec![];
    let timed = v["segments"].is_array();
    match v["segments"].as_array() {
        Some(list) => {
            for (i, s) in list.iter().enumerate() {
                let (Some(start), Some(end)) = (s["start"].as_f64(), s["end"].as_f64()) else {
                    return Err(AsrError::SegmentTimes(i));
                };
                segments.push(Segment {
                    start,
                    end,
                    text: s["text"].as_str().unwrap_or("").trim().to_string(),
                });
            }
        }
        None if !text.trim().is_empty() => segments.push(Segment {
            start: 0.0,
            end: 0.0,
            text: text.trim().to_string(),
        }),
        None => {}
    }
    segments.retain(|s| !s.text.is_empty());
    Ok(Transcription {
        text,
        language: v["language"].as_str().map(String::from),
        duration,
        segments,
        timed,
        cached: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_has_the_file_and_fields() {
        let req = TranscribeRequest {
            model: "whisper-1".into(),
            language: Some("en".into()),
            wav: Arc::new(crate::engines::audio::wav(&[1, 2, 3])),
        };
        let (ct, body) = multipart(&req);
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
        for f in [
            "name=\"model\"\r\n\r\nwhisper-1\r\n",
            "name=\"response_format\"\r\n\r\nverbose_json\r\n",
            "name=\"timestamp_granularities[]\"\r\n\r\nsegment\r\n",
            "name=\"language\"\r\n\r\nen\r\n",
            "filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF",
        ] {
            assert!(text.contains(f), "{f:?} missing in {text}");
        }
        assert_eq!(
            multipart(&req),
            (ct, body),
            "a request is the same bytes every time"
        );
    }

    #[test]
    fn plain_json_answers_keep_their_text() {
        let t = parse_verbose_json(br#"{"text":" hello there","duration":2.5}"#).unwrap();
        assert!(!t.timed);
        assert_eq!(
            t.segments,
            vec![Segment {
                start: 0.0,
                end: 0.0,
                text: "hello there".into()
            }]
        );
        assert!(parse_verbose_json(br#"{"segments":[]}"#).is_err());
    }
}
