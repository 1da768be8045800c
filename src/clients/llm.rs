//! Model endpoints for every judging stage: OpenAI-compatible `chat/completions` (OpenAI, vLLM,
//! Ollama, llama.cpp's server...) and Gemini `generateContent`, text plus images.
//!
//! One `LlmService` per `[services.<name>]`, shared by every stage that names it, so its request
//! and token budgets (governor rate limiters) count all of them together. A call goes: response
//! cache (hit → no call) → rate limiters → one HTTP request with a timeout → cache. A 429 / 5xx /
//! timeout / unreadable body is an external error carrying the wait the server asked for
//! (`Retry-After`, OpenAI's "try again in 6ms", Gemini's `RetryInfo.retryDelay`; checked and
//! capped by `max_wait_secs`): the runner owns retries, so a video costs at most the stage's
//! `retries` + 1 attempts of each call, and answers that did arrive come from the cache on the
//! retry. Errors that no retry can fix (a refused key, `insufficient_quota`) are configuration
//! errors: the run stops with the message. Keys come from the environment and are scrubbed from
//! every message.

mod batch;
mod dialect;
mod models;
mod settle;

pub use dialect::{learnt_label, learnt_line};
pub use settle::import;

use super::cached::{Answered, through_cache};
use super::endpoint::{Auth, Endpoint, EndpointError};
use crate::config::{
    BatchFallback, RepairRoute, ServiceApi, ServiceConfig, ServiceMode, Structured,
};
use crate::error::{ErrorKind, StageError};
use crate::store::batch::BatchQueue;
use crate::store::cache::{CacheKey, CachedResponse, ResponseCache};
use base64::Engine;
use dialect::Rung;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde_json::{Value, json};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The protocol, as it enters the response cache's keys ("open_ai", "gemini"): kept apart from
/// the pipeline file's spelling (`config::ServiceApi`) so cached answers stay valid.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    OpenAi,
    Gemini,
}

/// One image sent with a prompt.
#[derive(Debug, Clone)]
pub struct ImageInput {
    pub jpeg: Arc<Vec<u8>>,
    /// BLAKE3 of the bytes: what the cache key holds instead of the image.
    pub hash: String,
}

impl ImageInput {
    pub fn new(jpeg: Vec<u8>) -> Self {
        let hash = blake3::hash(&jpeg).to_hex().to_string();
        Self {
            jpeg: Arc::new(jpeg),
            hash,
        }
    }
}

/// A JSON Schema an answer must follow: OpenAI's (and vLLM's) `response_format` of type
/// `json_schema` with `strict: true`, Gemini's `responseJsonSchema`. The client only sends it;
/// the stage validates what comes back (a provider may ignore or loosen parts of it).
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseSchema {
    /// `[a-zA-Z0-9_-]{1,64}` (OpenAI's rule for `json_schema.name`).
    pub name: String,
    pub schema: Value,
    /// BLAKE3 of the schema's JSON text: what the cache key holds.
    pub hash: String,
}

impl ResponseSchema {
    pub fn new(name: &str, schema: Value) -> Self {
        // The same schema file gives the same text, so the same key.
        let hash = blake3::hash(schema.to_string().as_bytes()).to_hex()[..32].to_string();
        Self {
            name: name.to_string(),
            schema,
            hash,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub model: String,
    pub prompt: String,
    pub images: Vec<ImageInput>,
    pub temperature: f32,
    pub max_tokens: u32,
    /// Ask for JSON output where the API has a switch for it.
    pub json: bool,
    /// Ask for JSON that follows this schema (constrained decoding where the API has it).
    /// Implies `json`.
    pub schema: Option<Arc<ResponseSchema>>,
    /// Sampling seed (OpenAI `seed`, Gemini `generationConfig.seed`): k samples of one prompt
    /// are k requests, each cached under its own seed.
    pub seed: Option<u32>,
    /// A repair request (the answer to the first failed validation): in batch mode it goes to
    /// the next batch or live, per `batch_repairs`. Not part of the cache key.
    pub repair: bool,
}

/// What the model said.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub text: Option<String>,
    /// Normalised: `stop`, `length`, `refusal`, `blocked`, or the API's own word.
    pub finish: String,
    /// The refusal or block reason, when there is one.
    pub refusal: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Answered from the response cache (no call made).
    pub cached: bool,
}

/// A service table that cannot make a chat service, or a 200 answer that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(
        "max_retries applies to the youtube source only: a model stage's attempts per video are the stage's `retries` (default 2)"
    )]
    MaxRetries,
    #[error("batch_max_requests must be 1..=50000, got {0}")]
    BatchMaxRequests(usize),
    #[error("batch_inline_mib must be between 0 and 19 (Gemini takes 20 MB inline), got {0}")]
    BatchInlineMib(f64),
    #[error("batch_max_mib must be above 0 and at most 200, got {0}")]
    BatchMaxMib(f64),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The body is not JSON.
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("no choices")]
    NoChoices,
    /// Gemini: neither a candidate nor a block reason.
    #[error("no candidates")]
    NoCandidates,
}

pub struct LlmService {
    pub name: String,
    /// The folder of its batch queue under `batches/`: the name, or `name@mode` for a stage
    /// that overrides the service's mode (the cache is shared: answers are the same).
    pub queue_name: String,
    pub api: Api,
    /// URL, key, timeouts, the one send and the reading of refusals.
    ep: Endpoint,
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<DefaultDirectRateLimiter>,
    token_burst: u32,
    /// Tokens answers used beyond what was charged for them (negative: charged but not used).
    /// The token budget is charged an estimate before a call (the real count is only known
    /// after); each answer's `usage` settles the difference here, and the next call pays it.
    token_balance: AtomicI64,
    /// Real usage per estimated token (f64 bits), learnt from the answers: a model whose
    /// tokenizer counts 3 characters a token is charged for that from then on, so the calls in
    /// flight are charged nearly right, not only corrected after they return.
    usage_ratio: AtomicU64,
    /// Requests sent over the network by this process.
    pub calls: AtomicU64,
    pub mode: ServiceMode,
    /// Batch and offline modes: requests the cache cannot answer wait here.
    batch: Option<BatchQueue>,
    batch_errors: BatchFallback,
    batch_repairs: RepairRoute,
    pub batch_max_requests: usize,
    pub batch_max_bytes: u64,
    /// Gemini: a job up to this size goes inline, a larger one as an uploaded JSONL file.
    pub batch_inline_bytes: u64,
    batch_poll: Duration,
    completion_window: String,
    /// A pinned way of asking for structured output (`structured`), else learnt per model.
    structured: Option<Structured>,
    /// Per model: what the server was learnt to refuse of structured output.
    learnt: std::sync::Mutex<
        std::collections::HashMap<String, Arc<tokio::sync::Mutex<dialect::Learnt>>>,
    >,
}

/// The token limiter for a limit of `per_minute` tokens: (rate per minute, burst). A server
/// counting a sliding minute sees at most rate + burst in any minute, so the two together stay
/// 3 % under the limit; the margin absorbs the answers still in flight when their real usage
/// differs from the estimate (tests/budget.rs: 8 in flight, 25 % more tokens than estimated).
/// The burst is 0.6 s worth.
fn token_quota(per_minute: u32) -> (u32, u32) {
    let burst = (per_minute / 100).max(1);
    let rate = (per_minute as u64 * 97 / 100)
        .saturating_sub(burst as u64)
        .max(1) as u32;
    (rate, burst)
}

/// Per-minute quota that refills smoothly with a burst of `burst`: requests are spaced evenly,
/// so no 60-second window ever holds more than the limit (a server counting a sliding minute
/// never throttles us).
fn smooth_quota(per_minute: u32, burst: u32) -> Option<Quota> {
    let n = NonZeroU32::new(per_minute)?;
    Some(Quota::per_minute(n).allow_burst(NonZeroU32::new(burst.max(1)).expect("at least 1")))
}

impl LlmService {
    /// `api` is `openai` or `gemini`; when absent it is inferred from the base URL.
    pub fn new(name: &str, cfg: &ServiceConfig) -> Result<Self, LlmError> {
        let api = match cfg.api {
            Some(ServiceApi::OpenAi) => Api::OpenAi,
            Some(ServiceApi::Gemini) => Api::Gemini,
            None if cfg.base_url.contains("generativelanguage") => Api::Gemini,
            None => Api::OpenAi,
        };
        if cfg.max_retries.is_some() {
            return Err(LlmError::MaxRetries);
        }
        let auth = match api {
            Api::OpenAi => Auth::Bearer,
            Api::Gemini => Auth::GoogApiKey,
        };
        let ep = Endpoint::new(name, cfg, auth, Duration::from_secs(120))?;
        Ok(Self {
            name: name.to_string(),
            queue_name: name.to_string(),
            api,
            ep,
            requests: cfg
                .requests_per_minute
                .and_then(|r| smooth_quota(r, 1))
                .map(RateLimiter::direct),
            tokens: cfg
                .tokens_per_minute
                .and_then(|t| {
                    let (rate, burst) = token_quota(t);
                    smooth_quota(rate, burst)
                })
                .map(RateLimiter::direct),
            token_burst: cfg.tokens_per_minute.map_or(1, |t| token_quota(t).1),
            token_balance: AtomicI64::new(0),
            usage_ratio: AtomicU64::new(1f64.to_bits()),
            calls: AtomicU64::new(0),
            mode: cfg.mode,
            batch: (cfg.mode != ServiceMode::Live).then(BatchQueue::default),
            batch_errors: cfg.batch_errors,
            batch_repairs: cfg.batch_repairs,
            batch_max_requests: match cfg.batch_max_requests {
                None => 50_000,
                Some(n) if (1..=50_000).contains(&n) => n,
                Some(n) => return Err(LlmError::BatchMaxRequests(n)),
            },
            batch_inline_bytes: match cfg.batch_inline_mib {
                // Gemini takes inline requests up to 20 MB.
                None => 19 << 20,
                Some(m) if m.is_finite() && (0.0..=19.0).contains(&m) => (m * 1048576.0) as u64,
                Some(m) => return Err(LlmError::BatchInlineMib(m)),
            },
            batch_max_bytes: match cfg.batch_max_mib {
                None => 190 << 20,
                Some(m) if m.is_finite() && m > 0.0 && m <= 200.0 => (m * 1048576.0) as u64,
                Some(m) => return Err(LlmError::BatchMaxMib(m)),
            },
            batch_poll: crate::store::batch::poll_every(cfg.batch_poll_secs),
            completion_window: cfg
                .completion_window
                .clone()
                .unwrap_or_else(|| "24h".into()),
            structured: cfg.structured,
            learnt: Default::default(),
        })
    }

    /// The queue of a batch- or offline-mode service.
    pub fn batch_queue(&self) -> Option<&BatchQueue> {
        self.batch.as_ref()
    }

    pub fn batch_poll_every(&self) -> Duration {
        self.batch_poll
    }

    /// The request body and the URL path for this API, structured output asked for at `rung`.
    fn body(&self, req: &ChatRequest, rung: Rung) -> (String, Value) {
        let b64 = |i: &ImageInput| base64::engine::general_purpose::STANDARD.encode(&*i.jpeg);
        match self.api {
            Api::OpenAi => {
                let mut content = vec![json!({"type": "text", "text": req.prompt})];
                for i in &req.images {
                    content.push(json!({"type": "image_url", "image_url": {"url": format!("data:image/jpeg;base64,{}", b64(i))}}));
                }
                let content = if req.images.is_empty() {
                    json!(req.prompt)
                } else {
                    json!(content)
                };
                let mut body = json!({
                    "model": req.model,
                    "messages": [{"role": "user", "content": content}],
                    "temperature": req.temperature,
                    "max_tokens": req.max_tokens,
                });
                if let Some(seed) = req.seed {
                    body["seed"] = json!(seed);
                }
                if req.json || req.schema.is_some() {
                    let (name, schema) = match &req.schema {
                        Some(sc) => (sc.name.as_str(), Some(&sc.schema)),
                        None => ("object", None),
                    };
                    dialect::apply(&mut body, rung, name, schema);
                }
                ("chat/completions".to_string(), body)
            }
            Api::Gemini => {
                let mut parts = vec![json!({"text": req.prompt})];
                for i in &req.images {
                    parts.push(json!({"inline_data": {"mime_type": "image/jpeg", "data": b64(i)}}));
                }
                let mut gen_cfg =
                    json!({"temperature": req.temperature, "maxOutputTokens": req.max_tokens});
                if req.json || req.schema.is_some() {
                    gen_cfg["responseMimeType"] = json!("application/json");
                }
                if let Some(sc) = &req.schema {
                    gen_cfg["responseJsonSchema"] = sc.schema.clone();
                }
                if let Some(seed) = req.seed {
                    gen_cfg["seed"] = json!(seed);
                }
                (
                    format!("models/{}:generateContent", req.model),
                    json!({"contents": [{"role": "user", "parts": parts}], "generationConfig": gen_cfg}),
                )
            }
        }
    }

    /// Whether `cache` already holds an answer to `req` (what a dry run does not pay for).
    pub fn is_cached(&self, req: &ChatRequest, cache: &ResponseCache) -> bool {
        cache.stored_status(&self.cache_key(req)).ok().flatten() == Some(200)
    }

    fn cache_key(&self, req: &ChatRequest) -> CacheKey {
        let hashes: Vec<&str> = req.images.iter().map(|i| i.hash.as_str()).collect();
        let mut request = json!({
            "api": self.api, "model": req.model, "prompt": req.prompt, "images": hashes,
            "temperature": req.temperature, "max_tokens": req.max_tokens, "json": req.json,
        });
        // Another server under the same service name and model (a vLLM or llama.cpp at another
        // address) answers differently: its answers are its own. The public APIs' own
        // addresses stay out, so every answer cached before this stays valid.
        if !is_public_api(&self.ep.base_url) {
            request["base_url"] = json!(self.ep.base_url.trim_end_matches('/'));
        }
        // Only when there is one: the keys of every answer cached before schemas stay valid.
        if let Some(sc) = &req.schema {
            request["schema"] = json!(sc.hash);
        }
        if let Some(seed) = req.seed {
            request["seed"] = json!(seed);
        }
        CacheKey {
            service: self.name.clone(),
            method: format!("{:?}:{}", self.api, req.model).to_lowercase(),
            request: request.to_string(),
        }
    }

    /// Sends `req` (or answers it from `cache`; in batch mode, queues it under `stage` for the
    /// next batch and defers the video).
    pub async fn chat(
        &self,
        req: &ChatRequest,
        cache: &Arc<ResponseCache>,
        stage: &str,
    ) -> Result<ChatAnswer, StageError> {
        let key = self.cache_key(req);
        let read_hit = |hit: &CachedResponse| {
            Ok(parse_answer(self.api, &hit.body).ok().map(|mut a| {
                a.cached = true;
                a
            }))
        };
        // The caller names its stage (evaluate's judge is no stage of the runtime's): the
        // answer and the lookup are counted for it.
        let ask = through_cache(cache, &key, read_hit, || {
            self.structured_call(req, &key, stage, cache)
        });
        crate::store::cache::for_stage(stage, ask).await
    }

    /// The call `chat` makes on a cache miss (in batch mode, the request queued instead), with
    /// structured output asked for at `rung`; a failure carries the server's refusal of the
    /// request's shape, when that is what it answered.
    async fn call(
        &self,
        req: &ChatRequest,
        key: &CacheKey,
        stage: &str,
        rung: Rung,
    ) -> Result<Answered<ChatAnswer>, dialect::CallFailed> {
        let (path, body) = self.body(req, rung);
        if let Some(q) = &self.batch {
            let id = key.hash();
            let go_live = match q.failure(&id) {
                Some(why) if self.batch_errors == BatchFallback::Reject => {
                    return Err(StageError::data(
                        "batch_error",
                        self.ep
                            .scrub(&format!("{}: the batch answered {why}", self.name)),
                    )
                    .into());
                }
                // Offline: asked again in the next export.
                Some(_) => self.mode == ServiceMode::Batch,
                None => req.repair && self.batch_repairs == RepairRoute::Live,
            };
            if !go_live {
                if self.mode == ServiceMode::Batch {
                    self.ep.check_callable()?;
                }
                q.defer(stage, key, &self.batch_line(&id, &path, &body))?;
                return Err(StageError::new(
                    ErrorKind::Deferred,
                    "batch",
                    format!("{}: waits for a batch", self.name),
                )
                .into());
            }
        }
        self.ep.check_callable()?;
        let url = format!("{}{}", self.ep.base_url, path);
        let charged = self.wait_for_budget(req).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        // One attempt per call: the runner owns retries (per video, the stage's `retries`),
        // waiting at least what the server asked for.
        let (a, body, latency) = self
            .ep
            .post(&url, "application/json", body.to_string(), |b| {
                parse_answer(self.api, b)
            })
            .await
            .map_err(|f| dialect::CallFailed(f.error, f.refusal))?;
        self.settle_tokens(charged, &a);
        let record = CachedResponse {
            status: 200,
            parsed: a.text.clone(),
            input_tokens: Some(a.input_tokens),
            output_tokens: Some(a.output_tokens),
            latency_ms: latency,
            body,
            batch: false,
            stage: None,
        };
        Ok(Answered { value: a, record })
    }

    /// Waits until the service's request and token budgets allow `req`; returns the estimate
    /// charged for it.
    async fn wait_for_budget(&self, req: &ChatRequest) -> (i64, i64) {
        // Rough token count: 4 characters a token, ~260 per image, plus the answer's allowance,
        // scaled by what answers so far really used (see `usage_ratio`, `token_balance`).
        let raw =
            (req.prompt.len() / 4 + req.images.len() * 260 + req.max_tokens as usize).max(1) as i64;
        let ratio = f64::from_bits(self.usage_ratio.load(Ordering::Relaxed));
        let est = ((raw as f64 * ratio).ceil() as i64).max(1);
        if let Some(l) = &self.requests {
            l.until_ready().await;
        }
        if let Some(l) = &self.tokens {
            let owed = self.token_balance.swap(0, Ordering::SeqCst);
            let mut charge = est + owed;
            if charge < 0 {
                // More was charged than used so far: this call is paid for; keep the rest.
                self.token_balance.fetch_add(charge, Ordering::SeqCst);
                charge = 0;
            }
            // In pieces of at most the burst, so a request larger than it passes too.
            while charge > 0 {
                let n = charge.min(self.token_burst as i64) as u32;
                let _ = l
                    .until_n_ready(NonZeroU32::new(n).expect("at least 1"))
                    .await;
                charge -= n as i64;
            }
        }
        (raw, est)
    }

    /// What an answer really used against the estimate charged for it (`raw`, unscaled, and
    /// `charged`).
    fn settle_tokens(&self, (raw, charged): (i64, i64), a: &ChatAnswer) {
        let used = a.input_tokens + a.output_tokens;
        if self.tokens.is_none() || used <= 0 {
            return;
        }
        self.token_balance
            .fetch_add(used - charged, Ordering::SeqCst);
        let seen = (used as f64 / raw as f64).clamp(0.05, 20.0);
        // A moving average: one odd answer moves it a little, a new tokenizer within a few.
        let _ = self
            .usage_ratio
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((0.7 * f64::from_bits(bits) + 0.3 * seen).to_bits())
            });
    }
}

/// Reads a 200 body of either API.
pub fn parse_answer(api: Api, body: &[u8]) -> Result<ChatAnswer, LlmError> {
    let v: Value = serde_json::from_slice(body).map_err(LlmError::Json)?;
    match api {
        Api::OpenAi => {
            let choice = v["choices"].get(0).ok_or(LlmError::NoChoices)?;
            let msg = &choice["message"];
            let refusal = msg["refusal"].as_str().map(String::from);
            let finish = choice["finish_reason"].as_str().unwrap_or("").to_string();
            Ok(ChatAnswer {
                text: msg["content"].as_str().map(String::from),
                finish: if refusal.is_some() {
                    "refusal".into()
                } else {
                    finish
                },
                refusal,
                input_tokens: v["usage"]["prompt_tokens"].as_i64().unwrap_or(0),
                output_tokens: v["usage"]["completion_tokens"].as_i64().unwrap_or(0),
                cached: false,
            })
        }
        Api::Gemini => {
            let usage = &v["usageMetadata"];
            let (input_tokens, output_tokens) = (
                usage["promptTokenCount"].as_i64().unwrap_or(0),
                usage["candidatesTokenCount"].as_i64().unwrap_or(0),
            );
            let Some(c) = v["candidates"].get(0) else {
                // The prompt itself was blocked.
                let why = v["promptFeedback"]["blockReason"]
                    .as_str()
                    .ok_or(LlmError::NoCandidates)?;
                return Ok(ChatAnswer {
                    text: None,
                    finish: "blocked".into(),
                    refusal: Some(format!("prompt blocked: {why}")),
                    input_tokens,
                    output_tokens,
                    cached: false,
                });
            };
            let text: String = c["content"]["parts"]
                .as_array()
                .map(|p| p.iter().filter_map(|x| x["text"].as_str()).collect())
                .unwrap_or_default();
            let reason = c["finishReason"].as_str().unwrap_or("");
            let (finish, refusal) = match reason {
                "STOP" => ("stop".to_string(), None),
                "MAX_TOKENS" => ("length".to_string(), None),
                "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                | "IMAGE_SAFETY" => (
                    "blocked".to_string(),
                    Some(format!("finishReason {reason}")),
                ),
                other => (other.to_ascii_lowercase(), None),
            };
            Ok(ChatAnswer {
                text: if text.is_empty() { None } else { Some(text) },
                finish,
                refusal,
                input_tokens,
                output_tokens,
                cached: false,
            })
        }
    }
}

/// Whether `base_url` is OpenAI's or Gemini's own API (the addresses cache keys leave out).
fn is_public_api(base_url: &str) -> bool {
    let u = base_url.trim_end_matches('/');
    [
        "https://api.openai.com/v1",
        "https://generativelanguage.googleapis.com/v1beta",
        "https://generativelanguage.googleapis.com/v1",
    ]
    .contains(&u)
}
