//! `ask` stage: one question to a vision model per video, answered under a JSON Schema file of
//! the pipeline's own (MVFNDB A.1.2 and A.2.1: a model watches the news video as its audience
//! would and scores arousal and dominance, or names the identities of the people shown). A new
//! analysis of this kind is a prompt file and a schema file, no code. The generic preset of the
//! model-call stage (`model_call.rs`, which does the calling).
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

use super::model_call::{Call, Preset, SchemaFrom, Settings, VideoAnswer};
use super::structured::{OutputSchema, SchemaProblem};
use crate::record::{Slot, VideoRecord};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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

/// The generic preset: the pipeline's prompt file and schema file, the checked object kept as
/// JSON text.
pub struct Ask;

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "ask",
    about: "one question per video to a vision model over its frames, answered under a JSON Schema file (MVFNDB's audience emotion and identities of the people shown; `analyze` plots the fields by group)",
    build: super::model_call::build::<Ask>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[("compute", crate::config::keys_of::<AskConfig>)],
};

impl Preset for Ask {
    type Config = AskConfig;
    type Row = AskAnswer;
    const SLOT: Slot = Slot::Answers;
    const INVALID: &'static str = "invalid_answer";
    const DEFAULT_PROMPT: &'static str = "";

    fn settings(c: &AskConfig) -> Settings<'_> {
        Settings {
            service: &c.service,
            model: &c.model,
            prompt: Some(&c.prompt),
            max_images: c.max_images,
            max_transcript_chars: c.max_transcript_chars,
            max_tokens: c.max_tokens,
            temperature: c.temperature,
        }
    }
    fn schema(c: &AskConfig) -> SchemaFrom {
        SchemaFrom::File(c.schema.clone())
    }
    fn read(schema: Option<&OutputSchema>, text: &str) -> Result<String, SchemaProblem> {
        match schema {
            Some(s) => s.check(text).map(|v| v.to_string()),
            None => Ok(text.to_string()),
        }
    }
    fn repair(problem: &str) -> String {
        format!(
            "Your previous answer was invalid: {problem}. Reply with only a JSON object that follows the schema."
        )
    }
    fn row(a: VideoAnswer<String>, call: &Call) -> AskAnswer {
        AskAnswer {
            answer: a.value,
            images: a.images,
            transcript_chars: a.transcript_chars,
            raw: a.raw,
            provider: call.svc.name.clone(),
            model: call.model.clone(),
            attempts: a.attempts,
        }
    }
    fn attach(_rec: &mut VideoRecord, _rows: Vec<AskAnswer>) {
        // No later stage reads an answer: analyses read the table.
    }
}
