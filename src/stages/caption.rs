//! `caption` stage: a vision model describes each video (HarmVideoBench §3.2: a detailed caption
//! first, from which the candidate questions are drafted).
//!
//! Reads: the video's sampled frames (up to `max_images`, evenly spread; the paper: 12), its
//! title, and its transcript when a `transcript` stage ran before (cut at `max_transcript_chars`).
//! Calls: a vision model service with the prompt (built in, or the file `prompt` names) and the
//! frames as JPEG images, asking for structured output (`{"caption": string}`) unless
//! `structured = false`. Caches: every answer, in the run's response cache. Writes: one row per
//! video with the caption, what it was made from and the raw answer. An answer that breaks the
//! schema, or an empty caption, gets one repair request naming the problem, then the video is
//! rejected with it. The prompt's full text is part of the fingerprint: an edited prompt file
//! redoes the stage (and the stages after it), nothing else.

use super::judge::{ask_validated, frame_inputs, text_hash};
use super::structured::{OutputSchema, SchemaProblem};
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
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The default instruction, written for this project after HarmVideoBench §3.2 and B.1: describe
/// what is observable first, then what the clip itself conveys, and never guess beyond the clip.
pub const CAPTION_PROMPT: &str = include_str!("caption_prompt.txt");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptionConfig {
    /// A `[services.<name>]` entry (a vision model; the paper: Qwen-2.5-VL-72B).
    pub service: String,
    pub model: String,
    /// A prompt file (relative to the pipeline file) instead of the built-in prompt. The text
    /// `[transcript]` in it is replaced by the transcript block, `[title]` by the title.
    #[serde(default)]
    pub prompt: Option<PathBuf>,
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
    /// Ask for `{"caption": "..."}` under a JSON Schema (constrained decoding where the
    /// service has it); false: the whole answer is the caption.
    #[serde(default = "yes")]
    pub structured: bool,
}

fn default_images() -> usize {
    12
}
fn default_transcript_chars() -> usize {
    6000
}
fn default_max_tokens() -> u32 {
    1024
}
fn yes() -> bool {
    true
}

/// One video's caption.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Caption {
    pub caption: String,
    /// Frames shown to the model.
    pub images: u32,
    /// Characters of transcript shown (0: none, or no transcript stage).
    pub transcript_chars: u32,
    pub raw: String,
    pub provider: String,
    pub model: String,
    pub attempts: u32,
}

pub struct CaptionStage {
    cfg: CaptionConfig,
    prompt: String,
    schema: Option<OutputSchema>,
    svc: Arc<LlmService>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "caption",
    about: "a detailed caption per video by a vision model from its sampled frames, title and transcript (HarmVideoBench's first step; structured output)",
    build,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
};

/// The schema of a structured caption answer.
fn caption_schema() -> OutputSchema {
    let schema = json!({
        "type": "object",
        "properties": {"caption": {"type": "string", "minLength": 1}},
        "required": ["caption"],
        "additionalProperties": false,
    });
    OutputSchema::new("caption", schema, Path::new("(built in)")).expect("a valid schema")
}

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (CaptionConfig, _) = compute_settings(common, compute_at, bcx)?;
    crate::stages::no_select(common, select_at, bcx)?;
    let prompt = super::judge::prompt_text(&cfg.prompt, CAPTION_PROMPT, compute_at, bcx)?;
    // The text itself, not the file's name, decides whether captions are redone.
    compute["prompt"] = json!(text_hash(&prompt));
    let svc = bcx.llm_service(
        &cfg.service,
        &crate::config::key_at(compute_at, "service"),
        common,
    )?;
    let schema = cfg.structured.then(caption_schema);
    Ok(Built {
        task: Box::new(ProcessorTask(Arc::new(CaptionStage {
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

/// `template` for one video: `[title]` and `[transcript]` filled in (the transcript cut at
/// `max_chars`), and the characters of transcript shown. Shared by the stages that show a
/// vision model a video's frames with its title and speech.
pub fn fill_prompt(template: &str, rec: &VideoRecord, max_chars: usize) -> (String, u32) {
    let title = rec.source.title.as_deref().unwrap_or("").trim();
    let spoken = rec.transcript.as_deref().unwrap_or("").trim();
    let shown: String = spoken.chars().take(max_chars).collect();
    let block = if shown.is_empty() {
        "(no transcript)".to_string()
    } else if shown.len() < spoken.len() {
        format!("{shown} […]")
    } else {
        shown.clone()
    };
    let prompt = template
        .replace("[title]", if title.is_empty() { "(none)" } else { title })
        .replace("[transcript]", &block);
    (prompt, shown.chars().count() as u32)
}

impl CaptionStage {
    /// The caption in an answer, or what is wrong with it.
    fn read(&self, text: &str) -> Result<String, SchemaProblem> {
        let caption = match &self.schema {
            Some(s) => s.check(text)?["caption"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            None => text.to_string(),
        };
        let caption = caption.trim().to_string();
        if caption.is_empty() {
            return Err(SchemaProblem::Breaks("the caption is empty".into()));
        }
        Ok(caption)
    }
}

#[async_trait]
impl Processor for CaptionStage {
    type Row = Caption;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Caption
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
    ) -> Result<Vec<Caption>, StageError> {
        let images = frame_inputs(rec, cx, self.cfg.max_images, "the model").await?;
        let (prompt, transcript_chars) =
            fill_prompt(&self.prompt, rec, self.cfg.max_transcript_chars);
        let req = ChatRequest {
            model: self.cfg.model.clone(),
            prompt,
            images: images.clone(),
            temperature: self.cfg.temperature,
            max_tokens: self.cfg.max_tokens,
            json: self.schema.is_some(),
            schema: self.schema.as_ref().map(|s| s.request.clone()),
            seed: None,
            repair: false,
        };
        let a = ask_validated(&self.svc, req, cx, "invalid_caption", |t| self.read(t), |problem| {
            format!("Your previous answer was invalid: {problem}. Reply with only the JSON object {{\"caption\": \"...\"}}.")
        })
        .await?;
        Ok(vec![Caption {
            caption: a.value,
            images: images.len() as u32,
            transcript_chars,
            raw: a.raw,
            provider: self.svc.name.clone(),
            model: self.cfg.model.clone(),
            attempts: a.attempts,
        }])
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<Caption>) {
        rec.caption = rows.into_iter().next().map(|c| c.caption);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_prompt_has_both_places_to_fill() {
        assert!(CAPTION_PROMPT.contains("[transcript]"));
        assert!(CAPTION_PROMPT.contains("[title]"));
    }

    #[test]
    fn a_structured_caption_is_read_and_an_empty_one_refused() {
        let s = caption_schema();
        let read = |t: &str| -> Result<String, SchemaProblem> {
            let v = s.check(t)?;
            Ok(v["caption"].as_str().unwrap().to_string())
        };
        assert_eq!(
            read(r#"{"caption": "A man runs."}"#).unwrap(),
            "A man runs."
        );
        assert!(read(r#"{"caption": ""}"#).is_err());
        assert!(read(r#"{"text": "A man runs."}"#).is_err());
    }
}
