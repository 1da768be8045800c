//! The model-call stage family: one call to a vision model per video, over its sampled frames,
//! title and transcript, with a prompt and an answer schema. `ask` (a prompt file and a schema
//! file of the pipeline's own) and `caption` (a built-in prompt and schema, the caption as its
//! column) are presets of the one stage here; the stages with more than one call per video
//! (`questions`, `items`, `blind`, `level_check`) build their requests with `Call` too.
//!
//! Reads: the video's sampled frames (up to `max_images`, evenly spread), its title, and its
//! transcript when a `transcript` stage ran before (cut at `max_transcript_chars`).
//! Calls: the preset's service with the prompt (`[title]` and `[transcript]` filled in) and the
//! frames, under the schema (constrained decoding where the service has it, and checked here in
//! any case). Caches: every answer, in the run's response cache (the runtime's). Writes: the
//! preset's row. An answer that breaks the schema gets one repair request naming the problem,
//! then the video is rejected with it. The prompt's and the schema's full texts are in the
//! fingerprint, not their files' names.

use super::model_inputs::{ask_validated, frame_inputs, text_hash};
use super::structured::{OutputSchema, SchemaProblem};
use crate::clients::llm::{ChatRequest, ImageInput, LlmService};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::stage::{CallEstimate, Processor, StageContext, StageEstimate};
use crate::stages::{BuildCx, Built, compute_settings};
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

/// One model call's settings, as every model-calling stage holds them once built.
pub struct Call {
    pub svc: Arc<LlmService>,
    pub model: String,
    /// The prompt's text, its places (`[title]`, `[transcript]`, …) not yet filled.
    pub prompt: String,
    /// None: the whole answer is the value (no JSON asked for).
    pub schema: Option<OutputSchema>,
    pub max_images: usize,
    pub max_transcript_chars: usize,
    pub max_tokens: u32,
    pub temperature: f32,
}

/// A checked answer about one video, and what it was made from.
pub struct VideoAnswer<T> {
    pub value: T,
    pub raw: String,
    pub attempts: u32,
    /// Frames shown to the model.
    pub images: u32,
    /// Characters of transcript shown (0: none, or no transcript stage).
    pub transcript_chars: u32,
}

impl Call {
    /// `per_video` calls a video, each as `call_estimate(extra_chars)`, for `run --dry-run`.
    pub fn estimate(&self, extra_chars: usize, per_video: usize) -> StageEstimate {
        StageEstimate {
            calls: vec![self.call_estimate(extra_chars); per_video],
            frames: None,
        }
    }

    /// One call of this kind, its prompt `extra_chars` longer than the template and half the
    /// transcript allowance (what a video's places add, about).
    pub fn call_estimate(&self, extra_chars: usize) -> CallEstimate {
        CallEstimate {
            service: self.svc.name.clone(),
            model: self.model.clone(),
            prompt_chars: (self.prompt.len() + self.max_transcript_chars / 2 + extra_chars) as u64,
            images: self.max_images as u32,
            max_tokens: self.max_tokens,
            structured: self.schema.is_some(),
        }
    }

    /// An answer as the JSON value the schema allows (any JSON without a schema), or what is
    /// wrong with it.
    pub fn check(&self, text: &str) -> Result<serde_json::Value, SchemaProblem> {
        match &self.schema {
            Some(s) => s.check(text),
            None => serde_json::from_str(text).map_err(|e| SchemaProblem::NotJson(e.to_string())),
        }
    }

    /// The request for `prompt` (filled in) and `images`, under the schema when there is one.
    pub fn request(&self, prompt: String, images: Vec<ImageInput>) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            prompt,
            images,
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            json: self.schema.is_some(),
            schema: self.schema.as_ref().map(|s| s.request.clone()),
            seed: None,
            repair: false,
        }
    }

    /// Asks about one video: its frames and the prompt filled in for it; an answer `parse`
    /// refuses gets one repair (`repair(problem)`), then the video is rejected as `reason`.
    pub async fn ask_video<T, E: std::fmt::Display>(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
        reason: &str,
        parse: impl Fn(&str) -> Result<T, E>,
        repair: impl Fn(&str) -> String,
    ) -> Result<VideoAnswer<T>, StageError> {
        let images = frame_inputs(rec, cx, self.max_images, "the model").await?;
        let shown = images.len() as u32;
        let (prompt, transcript_chars) = fill_prompt(&self.prompt, rec, self.max_transcript_chars);
        let a = ask_validated(
            &self.svc,
            self.request(prompt, images),
            cx,
            reason,
            parse,
            repair,
        )
        .await?;
        Ok(VideoAnswer {
            value: a.value,
            raw: a.raw,
            attempts: a.attempts,
            images: shown,
            transcript_chars,
        })
    }
}

/// What a stage asking through `Call::ask_video` reads: the frames it shows, the title and the
/// transcript `fill_prompt` puts in its prompt.
pub const CALL_READS: &[Slot] = &[Slot::Frames, Slot::Source, Slot::Transcript];

/// `template` for one video: `[title]` and `[transcript]` filled in (the transcript cut at
/// `max_chars`), and the characters of transcript shown.
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

/// The call settings a preset's configuration names (each preset keeps its own serde type, so
/// its defaults and its fingerprint stay its own).
pub struct Settings<'a> {
    pub service: &'a str,
    pub model: &'a str,
    pub prompt: Option<&'a PathBuf>,
    pub max_images: usize,
    pub max_transcript_chars: usize,
    pub max_tokens: u32,
    pub temperature: f32,
}

/// Where a preset's answer schema comes from.
pub enum SchemaFrom {
    /// A JSON Schema file (relative to the pipeline file), under this key.
    File(PathBuf),
    Builtin(OutputSchema),
    /// No schema: the whole answer is the value.
    None,
}

/// What makes one stage of the family: its settings, schema, row and slot.
pub trait Preset: Send + Sync + 'static {
    type Config: DeserializeOwned + Serialize + Send + Sync;
    type Row: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;
    const SLOT: Slot;
    /// The reject code of an answer still invalid after its repair.
    const INVALID: &'static str;
    /// The prompt when the configuration names no file (empty: a file is required).
    const DEFAULT_PROMPT: &'static str;
    fn settings(cfg: &Self::Config) -> Settings<'_>;
    fn schema(cfg: &Self::Config) -> SchemaFrom;
    /// The value of a valid answer, or what is wrong with it.
    fn read(schema: Option<&OutputSchema>, text: &str) -> Result<String, SchemaProblem>;
    /// The sentence a repair request appends, naming the problem.
    fn repair(problem: &str) -> String;
    fn row(a: VideoAnswer<String>, call: &Call) -> Self::Row;
    fn attach(rec: &mut VideoRecord, rows: Vec<Self::Row>);
}

/// The one stage of the family, made by its preset.
pub struct CallStage<P: Preset> {
    call: Call,
    preset: PhantomData<P>,
}

/// The `build` of every preset: settings checked at their keys, the prompt's and schema's texts
/// in the fingerprint, the service resolved.
pub fn build<P: Preset>(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (P::Config, _) = compute_settings(common, compute_at, bcx)?;
    crate::stages::no_select(common, select_at, bcx)?;
    let s = P::settings(&cfg);
    let at = |k: &str| crate::config::key_at(compute_at, k);
    let prompt =
        super::model_inputs::prompt_text(&s.prompt.cloned(), P::DEFAULT_PROMPT, compute_at, bcx)?;
    if prompt.trim().is_empty() {
        let file = s
            .prompt
            .map_or("(built in)".into(), |p| p.display().to_string());
        return Err(bcx
            .src
            .error_at(&at("prompt"), format!("{file}: the prompt file is empty")));
    }
    // The texts, not the files' names, decide whether answers are asked again.
    compute["prompt"] = json!(text_hash(&prompt));
    let schema = match P::schema(&cfg) {
        SchemaFrom::File(p) => {
            let path = bcx.resolve(&p);
            let schema = OutputSchema::load(&path)
                .map_err(|e| bcx.src.error_at(&at("schema"), e.to_string()))?;
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            compute["schema"] = json!(text_hash(&text));
            Some(schema)
        }
        SchemaFrom::Builtin(s) => Some(s),
        SchemaFrom::None => None,
    };
    super::model_inputs::images_at_least_one(s.max_images, compute_at, bcx)?;
    let svc = bcx.llm_service(s.service, &at("service"), common)?;
    let call = Call {
        svc,
        model: s.model.to_string(),
        prompt,
        schema,
        max_images: s.max_images,
        max_transcript_chars: s.max_transcript_chars,
        max_tokens: s.max_tokens,
        temperature: s.temperature,
    };
    Ok(Built {
        task: crate::stages::processor_task(CallStage::<P> {
            call,
            preset: PhantomData,
        }),
        compute,
        version: 1,
        default_in_flight: 16,
    })
}

#[async_trait]
impl<P: Preset> Processor for CallStage<P> {
    type Row = P::Row;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        P::SLOT
    }
    fn reads(&self) -> Vec<Slot> {
        CALL_READS.to_vec()
    }

    fn estimate(&self) -> StageEstimate {
        self.call.estimate(0, 1)
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<P::Row>, StageError> {
        let schema = self.call.schema.as_ref();
        let a = self
            .call
            .ask_video(rec, cx, P::INVALID, |t| P::read(schema, t), P::repair)
            .await?;
        Ok(vec![P::row(a, &self.call)])
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<P::Row>) {
        P::attach(rec, rows)
    }
}
