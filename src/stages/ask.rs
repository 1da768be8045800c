//! `ask` stage: one question to a vision model per video, answered under a JSON Schema file of
//! the pipeline's own (MVFNDB A.1.2 and A.2.1: a model watches the news video as its audience
//! would and scores arousal and dominance, or names the identities of the people shown). A new
//! analysis of this kind is a prompt file and a schema file, no code.
//!
//! Reads: the video's sampled frames (up to `max_images`, evenly spread; MVFNDB: 16), its title,
//! and its transcript when a `transcript` stage ran before (cut at `max_transcript_chars`).
//! Calls: a vision model service with the prompt file (`[title]` and `[transcript]` filled in)
//! and the frames, under the schema (`schema`: a JSON Schema file whose top level is an object;
//! constrained decoding where the service has it, and checked here in any case). Caches: every
//! answer, in the run's response cache. Writes: one row per video with the answer (the checked
//! JSON object, as text) and the raw answer. An answer that breaks the schema gets one repair
//! request naming the problem, then the video is rejected with it. The prompt's and the
//! schema's full texts are in the fingerprint. `vidcurate analyze` plots the answer's fields by
//! group: numbers as distributions, strings and lists of strings as shares of videos.

use super::judge::{ask_validated, frame_inputs, text_hash};
use super::structured::OutputSchema;
use crate::clients::llm::{ChatRequest, LlmService};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::ProcessorTask;
use crate::runtime::stage::{Processor, StageContext, StageEstimate};
use crate::stages::{BuildCx, Built, compute_settings};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskConfig {
    /// A `[services.<name>]` entry (a vision model; MVFNDB: Gemini and open MLLMs).
    pub service: String,
    pub model: String,
    /// The question: a text file (relative to the pipeline file); `[title]` and `[transcript]`
    /// in it are filled in.
    pub prompt: PathBuf,
    /// The answer's JSON Schema file (relative to the pipeline file): an object schema.
    pub schema: PathBuf,
    /// Frames sent per video (evenly spread over the sampled ones).
    #[serde(default = "default_images")]
    pub max_images: usize,
    /// Characters of transcript given to the model at most (0: none).
    #[serde(default = "default_transcript_chars")]
    pub max_transcript_chars: usize,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub temperature: f32,
}

fn default_images() -> usize {
    16
}
fn default_transcript_chars() -> usize {
    4000
}
fn default_max_tokens() -> u32 {
    512
}

/// One video's answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AskAnswer {
    /// The answer object as checked against the schema (compact JSON).
    pub answer: String,
    /// Frames shown to the model.
    pub images: u32,
    /// Characters of transcript shown.
    pub transcript_chars: u32,
    pub raw: String,
    pub provider: String,
    pub model: String,
    pub attempts: u32,
}

pub struct AskStage {
    cfg: AskConfig,
    prompt: String,
    schema: OutputSchema,
    svc: Arc<LlmService>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "ask",
    about: "one question per video to a vision model over its frames, answered under a JSON Schema file (MVFNDB's audience emotion and identities of the people shown; `analyze` plots the fields by group)",
    build,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (AskConfig, _) = compute_settings(common, compute_at, bcx)?;
    crate::stages::no_select(common, select_at, bcx)?;
    let prompt = super::judge::prompt_text(&Some(cfg.prompt.clone()), "", compute_at, bcx)?;
    let at = |k: &str| crate::config::key_at(compute_at, k);
    if prompt.trim().is_empty() {
        return Err(bcx.src.error_at(
            &at("prompt"),
            format!("{}: the prompt file is empty", cfg.prompt.display()),
        ));
    }
    let schema_path = bcx.resolve(&cfg.schema);
    let schema = OutputSchema::load(&schema_path)
        .map_err(|e| bcx.src.error_at(&at("schema"), e.to_string()))?;
    let schema_text = std::fs::read_to_string(&schema_path).unwrap_or_default();
    // The texts, not the files' names, decide whether answers are asked again.
    compute["prompt"] = json!(text_hash(&prompt));
    compute["schema"] = json!(text_hash(&schema_text));
    if cfg.max_images == 0 {
        return Err(bcx
            .src
            .error_at(&at("max_images"), "max_images must be at least 1"));
    }
    let svc = bcx.llm_service(&cfg.service, &at("service"), common)?;
    Ok(Built {
        task: Box::new(ProcessorTask(Arc::new(AskStage {
            cfg,
            prompt,
            schema,
            svc,
        }))),
        compute,
        version: 1,
        default_in_flight: 16,
    })
}

#[async_trait]
impl Processor for AskStage {
    type Row = AskAnswer;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Answers
    }

    fn estimate(&self) -> StageEstimate {
        StageEstimate::one_call(
            &self.svc.name,
            &self.cfg.model,
            self.prompt.len() + self.cfg.max_transcript_chars / 2,
            self.cfg.max_images,
            self.cfg.max_tokens,
        )
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<AskAnswer>, StageError> {
        let images = frame_inputs(rec, cx, self.cfg.max_images, "the model").await?;
        let (prompt, transcript_chars) =
            super::caption::fill_prompt(&self.prompt, rec, self.cfg.max_transcript_chars);
        let req = ChatRequest {
            model: self.cfg.model.clone(),
            prompt,
            images: images.clone(),
            temperature: self.cfg.temperature,
            max_tokens: self.cfg.max_tokens,
            json: true,
            schema: Some(self.schema.request.clone()),
            seed: None,
            repair: false,
        };
        let a = ask_validated(
            &self.svc,
            req,
            cx,
            "invalid_answer",
            |t| self.schema.check(t).map(|v| v.to_string()),
            |problem| {
                format!("Your previous answer was invalid: {problem}. Reply with only a JSON object that follows the schema.")
            },
        )
        .await?;
        Ok(vec![AskAnswer {
            answer: a.value,
            images: images.len() as u32,
            transcript_chars,
            raw: a.raw,
            provider: self.svc.name.clone(),
            model: self.cfg.model.clone(),
            attempts: a.attempts,
        }])
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<AskAnswer>) {
        // No later stage reads an answer: analyses read the table.
    }
}
