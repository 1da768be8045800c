//! `caption` stage: a vision model describes each video (HarmVideoBench §3.2: a detailed caption
//! first, from which the candidate questions are drafted). A preset of the model-call stage
//! (`model_call.rs`): `ask` with a built-in prompt and schema.
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

use super::model_call::{Call, Preset, SchemaFrom, Settings, VideoAnswer};
use super::structured::{OutputSchema, SchemaProblem};
use super::yes;
use crate::record::{Slot, VideoRecord};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};

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

/// `ask` with a built-in prompt and schema, and the caption as its column.
pub struct CaptionPreset;

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "caption",
    about: "a detailed caption per video by a vision model from its sampled frames, title and transcript (HarmVideoBench's first step; structured output)",
    build: super::model_call::build::<CaptionPreset>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[("compute", crate::config::keys_of::<CaptionConfig>)],
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

impl Preset for CaptionPreset {
    type Config = CaptionConfig;
    type Row = Caption;
    const SLOT: Slot = Slot::Caption;
    const INVALID: &'static str = "invalid_caption";
    const DEFAULT_PROMPT: &'static str = CAPTION_PROMPT;

    fn settings(c: &CaptionConfig) -> Settings<'_> {
        Settings {
            service: &c.service,
            model: &c.model,
            prompt: c.prompt.as_ref(),
            max_images: c.max_images,
            max_transcript_chars: c.max_transcript_chars,
            max_tokens: c.max_tokens,
            temperature: c.temperature,
        }
    }
    fn schema(c: &CaptionConfig) -> SchemaFrom {
        if c.structured {
            SchemaFrom::Builtin(caption_schema())
        } else {
            SchemaFrom::None
        }
    }
    /// The caption in an answer, or what is wrong with it.
    fn read(schema: Option<&OutputSchema>, text: &str) -> Result<String, SchemaProblem> {
        let caption = match schema {
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
    fn repair(problem: &str) -> String {
        format!(
            "Your previous answer was invalid: {problem}. Reply with only the JSON object {{\"caption\": \"...\"}}."
        )
    }
    fn row(a: VideoAnswer<String>, call: &Call) -> Caption {
        Caption {
            caption: a.value,
            images: a.images,
            transcript_chars: a.transcript_chars,
            raw: a.raw,
            provider: call.svc.name.clone(),
            model: call.model.clone(),
            attempts: a.attempts,
        }
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
        let read = |t: &str| CaptionPreset::read(Some(&s), t);
        assert_eq!(
            read(r#"{"caption": "A man runs."}"#).unwrap(),
            "A man runs."
        );
        assert!(read(r#"{"caption": ""}"#).is_err());
        assert!(read(r#"{"text": "A man runs."}"#).is_err());
    }
}
