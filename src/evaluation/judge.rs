//! The judge of `evaluate --judge FILE`: the judged metrics of MVFNDB B.3 through our own
//! clients. For each reference element of a `hit_rate.FIELD` metric, one call asks whether the
//! answer states it (r_i ∈ {0, 1}); for the ratings (factual consistency, theme relevance,
//! completeness) one call per item asks for the task's ratings on 0–5. With `samples = 2` each
//! call is made twice (seeds 0 and 1) and the judge's agreement with itself is reported.
//!
//! Reads: the judge file (`[services.<name>]` as in a pipeline file, and `[judge]`: service,
//! model, samples, temperature, max_tokens, in_flight, retries). Calls: the judge service,
//! under its rate limits, every answer through the response cache at `--judge-cache` (default
//! `<release>/.judge/responses.sqlite`), so scoring the same answer again, for this model or
//! another, never pays twice. Retries follow the runtime's policy (`runtime::retrying`). An
//! answer that breaks the schema is repaired once; if it is still wrong (or refused) the
//! element stays unjudged and is counted, never scored 0 or 1. Writes nothing else; a service in
//! `mode = "batch"` queues its calls beside the cache first (`judge_batch.rs`).

use crate::clients::llm::{ChatRequest, LlmService};
use crate::config::{ServiceConfig, ServiceMode, SourceText};
use crate::error::{ErrorKind, RunError, StageError};
use crate::stages::model_inputs::{ask_validated_in, cut_at_max_tokens, text_hash};
use crate::stages::one;
use crate::stages::structured::{OutputSchema, SchemaProblem};
use crate::store::cache::ResponseCache;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The judge's instruction for one reference element (written for this project after B.3).
pub const HIT_PROMPT: &str = "You check a model's answer about a news video against one reference element.\nReference element: [element]\n\nThe answer:\n[answer]\n\nDoes the answer state this element (the same fact, in any words)? Reply with the JSON object {\"hit\": true or false, \"reason\": one sentence}.";

/// The judge's instruction for the 0–5 ratings (written for this project after B.3).
pub const RATING_PROMPT: &str = "You rate a model's answer about a news video against the reference.\nThe reference:\n[reference]\n\nThe answer:\n[answer]\n\nRate on 0 (not at all) to 5 (fully): [ratings]. factual_consistency: the answer states nothing the reference contradicts or that is not in the video. theme_relevance: the answer is about the theme of the reference. completeness: the answer covers what the reference covers. Reply with the JSON object of those ratings as integers and a \"reason\".";

/// The ratings a task may name.
pub const RATINGS: [&str; 3] = ["factual_consistency", "theme_relevance", "completeness"];

fn tokens() -> u32 {
    256
}
fn in_flight() -> usize {
    16
}
fn retries() -> u32 {
    5
}

/// `[judge]` of a judge file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSettings {
    pub service: String,
    pub model: String,
    /// 1, or 2 to judge every call twice and report the judge's agreement with itself.
    #[serde(default = "one")]
    pub samples: u32,
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "tokens")]
    pub max_tokens: u32,
    #[serde(default = "in_flight")]
    pub in_flight: usize,
    #[serde(default = "retries")]
    pub retries: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeFile {
    services: BTreeMap<String, ServiceConfig>,
    judge: JudgeSettings,
}

/// Which judge made a score: printed with the scores and kept in the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JudgeInfo {
    pub service: String,
    pub model: String,
    pub samples: u32,
    pub temperature: f32,
    /// BLAKE3 of the two prompts (first 16 hex digits).
    pub prompts: String,
}

pub struct Judge {
    pub(super) svc: Arc<LlmService>,
    pub settings: JudgeSettings,
    pub(super) cache: Arc<ResponseCache>,
    /// The folder of the cache: a batch-mode service keeps its queue in `batches/` there.
    pub(super) cache_dir: PathBuf,
    prices: crate::config::Prices,
    hit_schema: OutputSchema,
}

/// One judgment to make: a hit (an element) or the ratings of an item, for one sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    Hit {
        element: String,
    },
    Ratings {
        metrics: Vec<String>,
        reference: String,
    },
}

/// A judgment's outcome: a hit or miss, ratings, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Hit(bool),
    Ratings(BTreeMap<String, u8>),
    Unjudged(String),
}

impl Judge {
    /// The judge of `path`, its answers cached in `cache`.
    pub fn load(path: &Path, cache: &Path) -> Result<Judge, RunError> {
        let src = SourceText::new(path, crate::config::read_file(path)?);
        let f: JudgeFile = src.parse()?;
        let s = &f.judge;
        let at = |keys: [&str; 2]| keys.map(|k| crate::config::Seg::Key(k.into()));
        let cfg = f.services.get(&s.service).ok_or_else(|| {
            src.error_at(
                &at(["judge", "service"]),
                format!(
                    "no [services.{}] in the judge file (known: {})",
                    s.service,
                    f.services.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        check_mode(&src, &s.service, cfg)?;
        if !(1..=2).contains(&s.samples) {
            return Err(src
                .error_at(
                    &at(["judge", "samples"]),
                    "samples is 1, or 2 for the judge's self-agreement",
                )
                .into());
        }
        let svc = LlmService::new(&s.service, cfg)
            .map_err(|e| src.error_at(&at(["services", &s.service]), e.to_string()))?;
        let cache_dir = cache.parent().unwrap_or(Path::new(".")).to_path_buf();
        let cache = ResponseCache::open(cache).map_err(|e| RunError::Internal(e.to_string()))?;
        let hit_schema = OutputSchema::new(
            "element_hit",
            json!({"type": "object", "properties": {"hit": {"type": "boolean"}, "reason": {"type": "string"}}, "required": ["hit", "reason"], "additionalProperties": false}),
            Path::new("(built in)"),
        )
        .expect("a valid schema");
        Ok(Judge {
            svc: Arc::new(svc),
            settings: f.judge.clone(),
            cache: Arc::new(cache),
            cache_dir,
            prices: cfg.prices(),
            hit_schema,
        })
    }

    /// Whether the service queues its calls for batches (`judge_batch.rs` sends them).
    pub fn batched(&self) -> bool {
        self.svc.mode == ServiceMode::Batch
    }

    pub fn info(&self) -> JudgeInfo {
        JudgeInfo {
            service: self.settings.service.clone(),
            model: self.settings.model.clone(),
            samples: self.settings.samples,
            temperature: self.settings.temperature,
            prompts: text_hash(&format!("{HIT_PROMPT}\n{RATING_PROMPT}")),
        }
    }

    fn rating_schema(metrics: &[String]) -> OutputSchema {
        let mut props = serde_json::Map::new();
        for m in metrics {
            props.insert(
                m.clone(),
                json!({"type": "integer", "minimum": 0, "maximum": 5}),
            );
        }
        props.insert("reason".into(), json!({"type": "string"}));
        let required: Vec<Value> = props.keys().map(|k| json!(k)).collect();
        OutputSchema::new(
            &format!("ratings_{}", metrics.join("_")),
            json!({"type": "object", "properties": props, "required": required, "additionalProperties": false}),
            Path::new("(built in)"),
        )
        .expect("a valid schema")
    }

    /// The request for one judgment of `answer`, sample `sample`.
    fn request(&self, ask: &Ask, answer: &str, sample: u32) -> (ChatRequest, Option<OutputSchema>) {
        let (prompt, schema) = match ask {
            Ask::Hit { element } => (
                HIT_PROMPT
                    .replace("[element]", element)
                    .replace("[answer]", answer),
                None,
            ),
            Ask::Ratings { metrics, reference } => (
                RATING_PROMPT
                    .replace("[reference]", reference)
                    .replace("[answer]", answer)
                    .replace("[ratings]", &metrics.join(", ")),
                Some(Self::rating_schema(metrics)),
            ),
        };
        let s = schema.as_ref().unwrap_or(&self.hit_schema);
        let req = ChatRequest {
            model: self.settings.model.clone(),
            prompt,
            images: vec![],
            temperature: self.settings.temperature,
            max_tokens: self.settings.max_tokens,
            json: true,
            schema: Some(s.request.clone()),
            seed: (self.settings.samples > 1).then_some(sample),
            repair: false,
        };
        (req, schema)
    }

    /// One judgment; None of the verdict's kinds is made up: a call that fails for good (the
    /// service down after the retries, a refused key) stops the evaluation.
    pub async fn judge(&self, ask: &Ask, answer: &str, sample: u32) -> Result<Verdict, RunError> {
        self.verdict(ask, answer, sample)
            .await
            .map_err(|e| judge_failed(&self.settings.service, e))
    }

    /// `judge`, with the call's error as it came: a batch-mode service's `Deferred` means the
    /// request waits in the queue.
    pub(super) async fn verdict(
        &self,
        ask: &Ask,
        answer: &str,
        sample: u32,
    ) -> Result<Verdict, StageError> {
        let (req, schema) = self.request(ask, answer, sample);
        let schema = schema.as_ref().unwrap_or(&self.hit_schema);
        let parse = |t: &str| -> Result<Verdict, SchemaProblem> {
            let v = schema.check(t)?;
            Ok(match ask {
                Ask::Hit { .. } => Verdict::Hit(v["hit"].as_bool().unwrap_or(false)),
                Ask::Ratings { metrics, .. } => Verdict::Ratings(
                    metrics
                        .iter()
                        .map(|m| (m.clone(), v[m].as_u64().unwrap_or(0).min(5) as u8))
                        .collect(),
                ),
            })
        };
        let seed = format!("judge:{sample}:{}", text_hash(&req.prompt));
        let got = crate::runtime::retrying(self.settings.retries, &seed, || {
            ask_validated_in(
                &self.svc,
                req.clone(),
                (&self.cache, "judge"),
                "invalid_answer",
                parse,
                |p| format!("Your previous answer was invalid: {p}. Reply with only the JSON object the schema describes."),
            )
        })
        .await;
        match got {
            Ok(a) => Ok(a.value),
            Err(e) if e.kind == ErrorKind::Data => {
                // The report counts unjudged verdicts by this code: say which fix they need.
                let code = if cut_at_max_tokens(&e) {
                    "cut_at_max_tokens"
                } else {
                    &e.reason
                };
                Ok(Verdict::Unjudged(format!("{code}: {}", e.detail)))
            }
            Err(e) => Err(e),
        }
    }

    /// Calls, those the cache already answers, and the price of the rest (dry run): the batch
    /// price for a batch-mode service.
    pub fn price(&self, asks: &[(Ask, String)]) -> DryRun {
        let mut d = DryRun::default();
        for (ask, answer) in asks {
            for sample in 0..self.settings.samples {
                let (req, _) = self.request(ask, answer, sample);
                d.calls += 1;
                if self.svc.is_cached(&req, &self.cache) {
                    d.cached += 1;
                    continue;
                }
                let tin = (req.prompt.len() / 4) as i64;
                let tout = i64::from(req.max_tokens);
                d.tokens_in += tin as u64;
                d.tokens_out += tout as u64;
                d.usd += self.prices.cost(tin, tout, self.batched());
            }
        }
        // Each judgment asked, and its one repair at most; cached answers cost nothing.
        let asked = d.calls - d.cached;
        let refused = asked > 0 && self.svc.dialect_unknown(&self.settings.model, &self.cache);
        d.requests_at_most = 2 * asked + u64::from(refused);
        d
    }
}

pub(super) fn judge_failed(service: &str, e: StageError) -> RunError {
    RunError::Config(format!("judge {service}: {e}"))
}

/// What `evaluate --dry-run` says of the judging.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DryRun {
    pub calls: u64,
    pub cached: u64,
    /// Requests the judging may send: each uncached judgment and its one repair, and the one a
    /// server may refuse for how structured output was asked, until its dialect is learnt.
    pub requests_at_most: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub usd: f64,
}

/// `evaluate` sends the judge's calls itself; an offline service's would wait for `vidcurate
/// batch import`, which files answers into a run's cache, not the judge's.
fn check_mode(
    src: &crate::config::SourceText,
    service: &str,
    cfg: &crate::config::ServiceConfig,
) -> Result<(), RunError> {
    if cfg.mode != crate::config::ServiceMode::Offline {
        return Ok(());
    }
    let at = ["services", service, "mode"].map(|k| crate::config::Seg::Key(k.into()));
    Err(src
        .error_at(
            &at,
            "the judge of `evaluate` needs mode = \"live\" or \"batch\": it sends its own calls (offline mode leaves them to `vidcurate batch export` and `import`, which serve a pipeline run)",
        )
        .into())
}
