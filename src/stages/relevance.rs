//! `relevance` stage: how likely the video shows the domain's risk event, 1–10 (RiskCue §3.2).
//!
//! Reads: title and description (YouTube metadata, or manifest columns `title` / `description`).
//! Calls: a model service with the paper's prompt verbatim (`service = "<name>"` in
//! `[services.*]`), or, with `service = "local"`, the embedded judge: all-MiniLM-L6-v2 similarity
//! of the text to the event's positive descriptions minus its negatives, mapped to 1–10. Caches:
//! every model answer, in the run's response cache. Writes: `score`, the raw answer, provider,
//! model, attempts. A reply that is not one integer 1–10 gets one retry with a reminder, then the
//! video is rejected (`unparseable_score`, raw answer kept); refusals and safety blocks are
//! rejected with the reason. `select = { min_score = 9 }` (the paper's threshold).

use super::model_inputs::{RELEVANCE_PROMPT, ask_validated, stage_service, title_description};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::engines::minilm::{MiniLm, MiniLmError, cosine};
use crate::error::{ErrorKind, StageError};
use crate::record::{Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use crate::stages::model_call::Call;
use crate::stages::{Built, compute_settings};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelevanceConfig {
    /// A `[services.<name>]` entry, or "local" for the embedded MiniLM judge.
    pub service: String,
    /// Model name sent to the service (ignored by "local").
    #[serde(default)]
    pub model: String,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub temperature: f32,
    /// The event: a query file with an `[event]` table (relative to the pipeline file)...
    #[serde(default)]
    pub queries: Option<std::path::PathBuf>,
    /// ... or inline: fills `[risk event]` in the prompt.
    #[serde(default)]
    pub event: Option<String>,
    /// Local judge: descriptions of wanted and unwanted videos (default: the query file's).
    #[serde(default)]
    pub positive: Vec<String>,
    #[serde(default)]
    pub negative: Vec<String>,
    /// Local judge: score = 5.5 + scale × (mean similarity to positives − to negatives), clamped
    /// to 1–10.
    #[serde(default = "default_scale")]
    pub scale: f32,
    /// Characters of the description used (titles are short; descriptions ramble).
    #[serde(default = "default_desc_chars")]
    pub description_chars: usize,
    /// The question sent before the title and description; `[risk event]` is replaced by the
    /// event. Default: RiskCue §3.2's prompt, verbatim. Part of the fingerprint (as a hash).
    #[serde(default)]
    pub prompt: Option<String>,
}

fn default_max_tokens() -> u32 {
    8
}
fn default_scale() -> f32 {
    40.0
}
fn default_desc_chars() -> usize {
    400
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelevanceSelect {
    /// Keep videos scoring at least this (the paper: 9).
    pub min_score: u8,
}

impl Default for RelevanceSelect {
    fn default() -> Self {
        Self { min_score: 9 }
    }
}

impl crate::stages::Thresholds for RelevanceSelect {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        crate::stages::ThresholdError::check_range("min_score", self.min_score, 1..=10)
    }
}

impl crate::stages::RowThresholds for RelevanceSelect {
    type Row = Relevance;
    fn keep(&self, rows: &[Relevance]) -> bool {
        rows.first().is_some_and(|r| r.score >= self.min_score)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Relevance {
    /// 1–10.
    pub score: u8,
    /// The model's reply (local judge: the similarities).
    pub raw: String,
    pub provider: String,
    pub model: String,
    /// Calls it took (2 after a reminder).
    pub attempts: u32,
    /// Local judge: mean similarity to the positive and negative descriptions.
    pub pos_sim: Option<f32>,
    pub neg_sim: Option<f32>,
}

/// The domain's event: its name fills `[risk event]`; the local judge compares against its
/// descriptions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub name: String,
    pub positive: Vec<String>,
    pub negative: Vec<String>,
}

impl RelevanceConfig {
    /// The event: inline, or the `[event]` table of the query file (inline descriptions first).
    fn event(&self, at: &[Seg], bcx: &BuildCx) -> Result<Event, ConfigError> {
        let (name, table) = super::model_inputs::risk_event(
            self.event.as_deref(),
            self.queries.as_deref(),
            at,
            bcx,
        )?;
        let mut ev = Event {
            name,
            positive: self.positive.clone(),
            negative: self.negative.clone(),
        };
        if let Some(t) = table {
            if ev.positive.is_empty() {
                ev.positive = t.positive;
            }
            if ev.negative.is_empty() {
                ev.negative = t.negative;
            }
        }
        Ok(ev)
    }
}

enum Judge {
    /// The prompt with the event filled in; no schema (the reply is one integer).
    Model(Call),
    Local(Arc<OnceLock<Result<LocalJudge, MiniLmError>>>),
}

struct LocalJudge {
    model: MiniLm,
    pos: Vec<Vec<f32>>,
    neg: Vec<Vec<f32>>,
}

pub struct RelevanceStage {
    cfg: RelevanceConfig,
    event: Event,
    select: RelevanceSelect,
    judge: Judge,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "relevance",
    about: "1-10 likelihood of the risk event from title + description (RiskCue prompt; a model service, or the local MiniLM judge)",
    build,
    reselect: Some(crate::stages::reselect::<RelevanceSelect>),
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[
        ("compute", crate::config::keys_of::<RelevanceConfig>),
        ("select", crate::config::keys_of::<RelevanceSelect>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, _): (RelevanceConfig, _) = compute_settings(common, compute_at, bcx)?;
    let select: RelevanceSelect = crate::stages::select_settings(common, select_at, bcx)?;
    let event = cfg.event(compute_at, bcx)?;
    let template = cfg.prompt.as_deref().unwrap_or(RELEVANCE_PROMPT);
    let judge = if cfg.service == "local" {
        if event.positive.is_empty() || event.negative.is_empty() {
            return Err(bcx.src.error_at(
                compute_at,
                "the local judge compares against the event's `positive` and `negative` descriptions: give both (or a query file with them)",
            ));
        }
        Judge::Local(Arc::new(OnceLock::new()))
    } else {
        if cfg.model.is_empty() {
            return Err(bcx
                .src
                .error_at(compute_at, "missing `model` for the service"));
        }
        Judge::Model(Call {
            svc: stage_service(bcx, common, compute_at, &cfg.service)?,
            model: cfg.model.clone(),
            prompt: template.replace("[risk event]", &event.name),
            schema: None,
            max_images: 0,
            max_transcript_chars: 0,
            max_tokens: cfg.max_tokens,
            temperature: cfg.temperature,
        })
    };
    // What decides the score: the event text, the judge and its parameters (not the paths).
    // The prompt's full text is hashed, so an edited prompt (in the pipeline or in a new version
    // of the paper's text) redoes the stage.
    let compute = serde_json::json!({
        "service": cfg.service, "model": cfg.model, "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature, "event": event, "scale": cfg.scale,
        "description_chars": cfg.description_chars,
        "prompt_blake3": super::model_inputs::text_hash(template),
    });
    Ok(Built {
        task: crate::stages::processor_task(RelevanceStage {
            cfg,
            event,
            select,
            judge,
        }),
        compute,
        version: 1,
        default_in_flight: 32,
    })
}

/// One integer 1–10, whitespace allowed around it, nothing else.
pub fn parse_score(text: &str) -> Option<u8> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<u8>().ok().filter(|s| (1..=10).contains(s))
}

fn clip(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl RelevanceStage {
    /// What a video adds to the prompt: its title and (clipped) description.
    fn text(&self, title: &str, desc: &str) -> String {
        format!(
            "\n\nTitle: {title}\nDescription: {}",
            clip(desc, self.cfg.description_chars)
        )
    }

    async fn ask(
        &self,
        call: &Call,
        title: &str,
        desc: &str,
        cx: &StageContext,
    ) -> Result<Relevance, StageError> {
        let req = call.request(call.prompt.clone() + &self.text(title, desc), vec![]);
        let a = ask_validated(
            &call.svc,
            req,
            cx,
            "unparseable_score",
            |t| parse_score(t).ok_or_else(|| "not a single integer from 1 to 10".to_string()),
            |_| "Your previous answer was not a single integer. Reply with a single integer from 1 to 10 and nothing else.".to_string(),
        )
        .await?;
        Ok(Relevance {
            score: a.value,
            raw: a.raw,
            provider: call.svc.name.clone(),
            model: call.model.clone(),
            attempts: a.attempts,
            ..Default::default()
        })
    }
}

#[async_trait]
impl Processor for RelevanceStage {
    type Row = Relevance;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Source]
    }
    fn provides(&self) -> Slot {
        Slot::Relevance
    }

    fn estimate(&self) -> crate::runtime::stage::StageEstimate {
        let Judge::Model(call) = &self.judge else {
            return Default::default();
        };
        // A title of about 70 characters and a description clipped at `description_chars`
        // (about half of that on average).
        let chars = self.text("", "").len() + 70 + self.cfg.description_chars / 2;
        call.estimate(chars, 1)
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<Relevance>, StageError> {
        let (title, desc) = title_description(rec, cx);
        if title.trim().is_empty() && desc.trim().is_empty() {
            return Err(StageError::data(
                "no_text",
                "no title or description to judge",
            ));
        }
        match &self.judge {
            Judge::Model(call) => self.ask(call, &title, &desc, cx).await.map(|r| vec![r]),
            Judge::Local(cell) => {
                let cell = cell.clone();
                let event = self.event.clone();
                let text = format!("{title}. {}", clip(&desc, self.cfg.description_chars));
                let scale = self.cfg.scale;
                let row = cx
                    .cpu
                    .run(move || {
                        let j = cell
                            .get_or_init(|| LocalJudge::load(&event))
                            .as_ref()
                            .map_err(|e| {
                                StageError::new(ErrorKind::Config, "model_missing", e.to_string())
                            })?;
                        j.score(&text, scale)
                            .map_err(|e| StageError::internal("embedding", e.to_string()))
                    })
                    .await?;
                Ok(vec![row])
            }
        }
    }

    fn attach(rec: &mut VideoRecord, mut rows: Vec<Relevance>) {
        rec.relevance = rows.pop().map(|r| r.score);
    }

    crate::stages::keep_by_select!();
}

impl LocalJudge {
    fn load(event: &Event) -> Result<Self, MiniLmError> {
        let model = MiniLm::load(&crate::engines::minilm::default_dir())?;
        let pos = model.embed(&event.positive)?;
        let neg = model.embed(&event.negative)?;
        Ok(Self { model, pos, neg })
    }

    fn score(&self, text: &str, scale: f32) -> Result<Relevance, MiniLmError> {
        let e = self.model.embed(&[text.to_string()])?.remove(0);
        let mean =
            |set: &[Vec<f32>]| set.iter().map(|p| cosine(&e, p)).sum::<f32>() / set.len() as f32;
        let (pos, neg) = (mean(&self.pos), mean(&self.neg));
        let score = (5.5 + scale * (pos - neg)).round().clamp(1.0, 10.0) as u8;
        Ok(Relevance {
            score,
            raw: format!("pos {pos:.4} neg {neg:.4}"),
            provider: "local".into(),
            model: "all-MiniLM-L6-v2".into(),
            attempts: 1,
            pos_sim: Some(pos),
            neg_sim: Some(neg),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_score;

    #[test]
    fn a_score_is_one_integer_from_1_to_10() {
        assert_eq!(parse_score(" 9\n"), Some(9));
        assert_eq!(parse_score("10"), Some(10));
        for bad in ["0", "11", "9.", "9/10", "The answer is 7", "", "nine", "-3"] {
            assert_eq!(parse_score(bad), None, "{bad}");
        }
    }
}
