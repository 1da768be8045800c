//! `questions` stage: candidate multiple-choice items for each level of a taxonomy
//! (HarmVideoBench §3.2 and A.1: a VLM drafts a caption, then a small set of candidate questions
//! spanning the levels; people review them after).
//!
//! Reads: the video's sampled frames (up to `max_images`) with their times, its title, its
//! caption when a `caption` stage ran before, and its transcript when a `transcript` stage did.
//! Reads the taxonomy file (`taxonomy`, default `pipelines/taxonomies/harmvideobench.toml`: the
//! paper's three levels, their definitions and Table 4's boundary tests, all in the prompt).
//! Calls: a vision model service, with structured output under a schema built from the
//! taxonomy (`items[]` of level, question, options, answer letter, evidence, rationale,
//! context note). Caches: every answer, in the run's response cache. Writes: one row per item
//! (`record::QuestionItem`), `per_level` items for each level, kept or rejected with the reason.
//!
//! Each item is checked (`items::check`: option count, one correct letter that names an option,
//! distinct options of comparable length, the answer's text not in the question, the context
//! note where the level needs one). When an item fails, or a level lacks items, one repair
//! request names every problem; an item still failing after it is stored as rejected with its
//! reason and the rest go on. Kept items' options are shuffled, seeded by the item id, and the
//! permutation is stored. The taxonomy's and the prompt's full texts are in the fingerprint.

pub mod blind;
pub mod items;
pub mod level_check;
mod slots;

use super::model_inputs::{ask_text, frame_inputs, text_hash};
use super::structured::OutputSchema;
use crate::config::taxonomy::{HARMVIDEOBENCH, Taxonomy};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{QuestionItem, Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext, StageEstimate};
use crate::stages::model_call::Call;
use crate::stages::{BuildCx, Built, compute_settings, one};
use async_trait::async_trait;
use items::ItemRules;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The drafting instruction, written for this project after HarmVideoBench A.2's description
/// of its candidate-generation prompt (grounded, evidence-based items; no unsupported normative
/// claims or moral commentary).
pub const QUESTIONS_PROMPT: &str =
    include_str!("../../../pipelines/tasks/harmvideobench/prompts/draft-levels.txt");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionsConfig {
    /// A `[services.<name>]` entry (a vision model; the paper: Qwen-2.5-VL-72B).
    pub service: String,
    pub model: String,
    /// A task file drafted per taxonomy level (relative to the pipeline file;
    /// pipelines/tasks/harmvideobench/levels.toml): its taxonomy and draft prompt, instead of
    /// `taxonomy` and `prompt`. Left out of the fingerprint, which holds the two texts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<PathBuf>,
    /// A taxonomy file (relative to the pipeline file); default: HarmVideoBench's levels.
    #[serde(default)]
    pub taxonomy: Option<PathBuf>,
    /// A prompt file instead of the built-in one (its `[…]` places as in the built-in one).
    #[serde(default)]
    pub prompt: Option<PathBuf>,
    /// Items drafted per level and video (the paper: 1).
    #[serde(default = "one")]
    pub per_level: usize,
    #[serde(default = "default_images")]
    pub max_images: usize,
    #[serde(default = "default_transcript_chars")]
    pub max_transcript_chars: usize,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub temperature: f32,
    /// See `items::ItemRules`.
    #[serde(default = "default_ratio")]
    pub max_length_ratio: f64,
}

fn default_images() -> usize {
    12
}
fn default_transcript_chars() -> usize {
    6000
}
fn default_max_tokens() -> u32 {
    4096
}
fn default_ratio() -> f64 {
    ItemRules::default().max_length_ratio
}

/// `select` of a question stage: near-duplicate questions within a video.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuestionsSelect {
    /// Similarity (0–1, `items::similarity`) from which an item is a near-duplicate of an
    /// earlier item of its video.
    pub duplicate_at: f64,
    /// Near-duplicate items a video may have and go on (default: no limit, record only).
    pub max_duplicates: Option<u32>,
}

impl Default for QuestionsSelect {
    fn default() -> Self {
        Self {
            duplicate_at: 0.8,
            max_duplicates: None,
        }
    }
}

impl QuestionsSelect {
    fn duplicate(&self, similarity: f64) -> bool {
        similarity >= self.duplicate_at
    }
}

impl crate::stages::Thresholds for QuestionsSelect {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        if !(self.duplicate_at > 0.0 && self.duplicate_at <= 1.0) {
            return Err(crate::stages::ThresholdError::new(
                "duplicate_at",
                format!("duplicate_at must be in (0, 1], got {}", self.duplicate_at),
            ));
        }
        Ok(())
    }
}

impl crate::stages::RowThresholds for QuestionsSelect {
    type Row = QuestionItem;
    fn keep(&self, rows: &[QuestionItem]) -> bool {
        let dups = rows
            .iter()
            .filter(|r| r.kept && self.duplicate(r.nearest_similarity))
            .count() as u32;
        self.max_duplicates.is_none_or(|m| dups <= m)
    }
}

pub struct QuestionsStage {
    cfg: QuestionsConfig,
    select: QuestionsSelect,
    taxonomy: Taxonomy,
    /// The prompt (`[…]` places unfilled) and the items' schema.
    call: Call,
    rules: ItemRules,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "questions",
    about: "multiple-choice candidate items per level of a taxonomy file (default: HarmVideoBench's three levels) by a vision model, checked, repaired once, shuffled by item id",
    build,
    reselect: Some(crate::stages::reselect::<QuestionsSelect>),
    summary: Some(summary),
    release: crate::stages::Release::Skip,
    keys: &[
        ("compute", crate::config::keys_of::<QuestionsConfig>),
        ("select", crate::config::keys_of::<QuestionsSelect>),
    ],
};

/// Answer-position balance of the items kept in this invocation: the share of each correct
/// letter, and Pearson's chi-squared test against equal shares (a p-value under 0.01 means the
/// letters are not balanced: a model could guess by position).
fn summary(stage_id: &str, c: &crate::runtime::StageCounts) -> String {
    let letters: Vec<(&str, u64)> = c
        .tally
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("answer_").map(|l| (l, *v)))
        .collect();
    let n: u64 = letters.iter().map(|(_, v)| v).sum();
    if n == 0 {
        return String::new();
    }
    let shares: Vec<String> = letters
        .iter()
        .map(|(l, v)| format!("{l} {:.0} %", 100.0 * *v as f64 / n as f64))
        .collect();
    let mut line = format!(
        "{stage_id}: correct letters of {n} kept items: {}",
        shares.join(", ")
    );
    if let Some(p) = items::balance_p(&letters.iter().map(|(_, v)| *v).collect::<Vec<_>>()) {
        line += &format!(" (chi-squared against equal shares: p = {p:.3})");
    }
    if let Some(d) = c.tally.get("near_duplicates") {
        line += &format!("; {d} near-duplicate questions");
    }
    line
}

/// The answer's schema: `items[]`, each with a level from the taxonomy. Counts and letters are
/// checked by `items::check` rather than the schema, so a provider's subset of JSON Schema
/// (OpenAI's strict mode, Gemini's) takes it as it is.
pub fn answer_schema(t: &Taxonomy) -> OutputSchema {
    let levels: Vec<&str> = t.levels.iter().map(|l| l.name.as_str()).collect();
    let nullable = json!({"type": ["number", "null"]});
    let item = json!({
        "type": "object",
        "properties": {
            "level": {"type": "string", "enum": levels},
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}},
            "answer": {"type": "string", "description": "the correct option's letter: A for the first option"},
            "evidence": {
                "type": "object",
                "properties": {
                    "frames": {"type": "array", "items": {"type": "integer"}},
                    "start_secs": nullable,
                    "end_secs": nullable,
                    "transcript": {"type": "string"},
                },
                "required": ["frames", "start_secs", "end_secs", "transcript"],
                "additionalProperties": false,
            },
            "rationale": {"type": "string"},
            "context_note": {"type": "string"},
        },
        "required": ["level", "question", "options", "answer", "evidence", "rationale", "context_note"],
        "additionalProperties": false,
    });
    let schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": item}},
        "required": ["items"],
        "additionalProperties": false,
    });
    OutputSchema::new(
        "question_items",
        schema,
        Path::new("(built from the taxonomy)"),
    )
    .expect("a valid schema")
}

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (QuestionsConfig, _) = compute_settings(common, compute_at, bcx)?;
    let select: QuestionsSelect = crate::stages::select_settings(common, select_at, bcx)?;
    let at = |k: &str| crate::config::key_at(compute_at, k);
    let ((taxonomy, taxonomy_text), prompt) = match &cfg.task {
        Some(p) => from_task(&cfg, &bcx.resolve(p), compute_at, bcx)?,
        None => (
            taxonomy_file(&cfg.taxonomy, bcx)?,
            super::model_inputs::prompt_text(&cfg.prompt, QUESTIONS_PROMPT, compute_at, bcx)?,
        ),
    };
    if !(1..=5).contains(&cfg.per_level) {
        return Err(bcx.src.error_at(
            &at("per_level"),
            format!("per_level must be 1..5, got {}", cfg.per_level),
        ));
    }
    if !(cfg.max_length_ratio.is_finite() && cfg.max_length_ratio >= 1.0) {
        return Err(bcx.src.error_at(
            &at("max_length_ratio"),
            format!(
                "max_length_ratio must be at least 1, got {}",
                cfg.max_length_ratio
            ),
        ));
    }
    // The texts themselves decide whether items are drafted again, not the files' names.
    compute["taxonomy"] = json!(text_hash(&taxonomy_text));
    compute["prompt"] = json!(text_hash(&prompt));
    // Where the texts came from is not what they say: a task file with the same taxonomy and
    // prompt drafts the same items, under the same fingerprint.
    if let Some(o) = compute.as_object_mut() {
        o.remove("task");
    }
    super::model_inputs::images_at_least_one(cfg.max_images, compute_at, bcx)?;
    let svc = bcx.llm_service(&cfg.service, &at("service"), common)?;
    let rules = ItemRules {
        max_length_ratio: cfg.max_length_ratio,
        ..ItemRules::default()
    };
    let call = Call {
        svc,
        model: cfg.model.clone(),
        prompt,
        schema: Some(answer_schema(&taxonomy)),
        max_images: cfg.max_images,
        max_transcript_chars: cfg.max_transcript_chars,
        max_tokens: cfg.max_tokens,
        temperature: cfg.temperature,
    };
    Ok(Built {
        task: crate::stages::processor_task(QuestionsStage {
            cfg,
            select,
            taxonomy,
            call,
            rules,
        }),
        compute,
        // 2: rows gained the near-duplicate columns; 3: `reject_codes`.
        version: 3,
        default_in_flight: 8,
    })
}

/// The taxonomy file `path` names (relative to the pipeline file), else HarmVideoBench's
/// levels; with its text, what a fingerprint holds.
pub fn taxonomy_file(
    path: &Option<PathBuf>,
    bcx: &BuildCx,
) -> Result<(Taxonomy, String), ConfigError> {
    let (t, src) = match path {
        Some(p) => Taxonomy::load(&bcx.resolve(p))?,
        None => Taxonomy::parse(Path::new("(built in)"), HARMVIDEOBENCH.to_string())?,
    };
    Ok((t, src.text))
}

/// The taxonomy (with its text) and the draft prompt of a task file drafted per level.
fn from_task(
    cfg: &QuestionsConfig,
    path: &Path,
    compute_at: &[Seg],
    bcx: &BuildCx,
) -> Result<((Taxonomy, String), String), ConfigError> {
    let at = crate::config::key_at(compute_at, "task");
    if cfg.taxonomy.is_some() || cfg.prompt.is_some() {
        return Err(bcx.src.error_at(
            &at,
            "the task file names the taxonomy and the draft prompt: give `task`, or `taxonomy` and `prompt`, not both",
        ));
    }
    let task = crate::benchmark::task::Task::load(path)?;
    let Some(levels) = task.taxonomy.clone() else {
        return Err(bcx.src.error_at(
            &at,
            format!(
                "task {} is not drafted per taxonomy level (it names no `taxonomy`): an `items` stage builds it",
                task.file.name
            ),
        ));
    };
    // A drafted task always has its draft prompt (the task file's own check).
    let prompt = task.prompt("draft").unwrap_or_default().to_string();
    Ok((levels, prompt))
}

impl QuestionsStage {
    /// The prompt for one video.
    fn prompt_for(&self, rec: &VideoRecord, shown: &[f64]) -> String {
        let cut = |s: &str, n: usize| -> String {
            let t: String = s.trim().chars().take(n).collect();
            if t.is_empty() { "(none)".into() } else { t }
        };
        let times: Vec<String> = shown
            .iter()
            .enumerate()
            .map(|(i, t)| format!("frame {i} at {t:.1} s"))
            .collect();
        self.call
            .prompt
            .replace("[taxonomy]", &self.taxonomy.prompt_text())
            .replace("[per_level]", &self.cfg.per_level.to_string())
            .replace("[options]", &self.taxonomy.options.to_string())
            .replace("[frames]", &times.join(", "))
            .replace(
                "[title]",
                &cut(rec.source.title.as_deref().unwrap_or(""), 300),
            )
            .replace(
                "[caption]",
                &cut(rec.caption.as_deref().unwrap_or(""), 4000),
            )
            .replace(
                "[transcript]",
                &cut(
                    rec.transcript.as_deref().unwrap_or(""),
                    self.cfg.max_transcript_chars,
                ),
            )
    }
}

/// The first `n` characters of `s`, with an ellipsis when it was longer.
fn cut_text(s: &str, n: usize) -> String {
    let t: String = s.chars().take(n).collect();
    if t.len() < s.len() {
        format!("{t}…")
    } else {
        t
    }
}

#[async_trait]
impl Processor for QuestionsStage {
    type Row = QuestionItem;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Questions
    }
    fn reads(&self) -> Vec<Slot> {
        vec![Slot::Frames, Slot::Source, Slot::Transcript, Slot::Caption]
    }

    fn estimate(&self) -> StageEstimate {
        // The taxonomy's text and the frame times fill the prompt's places (about 1,500
        // characters besides).
        let extra = self.taxonomy.prompt_text().len() + 1500;
        self.call.estimate(extra, 1)
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<QuestionItem>, StageError> {
        let rows = self.draft(rec, cx).await?;
        for i in 0..self.taxonomy.options {
            let l = items::letter(i);
            let n = rows.iter().filter(|r| r.kept && r.answer == l).count();
            cx.tally.add(&format!("answer_{l}"), n as u64);
        }
        let dups = rows.iter().filter(|r| r.kept && r.near_duplicate).count();
        cx.tally.add("near_duplicates", dups as u64);
        Ok(rows)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<QuestionItem>) {
        rec.questions = Some(rows);
    }

    crate::stages::keep_by_select!();
}

impl QuestionsStage {
    /// One video's items: drafted, checked, repaired once, shuffled.
    async fn draft(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<QuestionItem>, StageError> {
        let images = frame_inputs(rec, cx, self.cfg.max_images, "the model").await?;
        let times = super::model_inputs::frame_times(rec, self.cfg.max_images);
        let base = self.prompt_for(rec, &times);
        let mut req = self.call.request(base.clone(), images);
        let frames = times.len();
        let a = ask_text(&self.call.svc, &req, cx).await?;
        let text = a.text.unwrap_or_default();
        let first = match self.slot(&text, frames) {
            Ok((slots, notes)) => {
                let p = self.problems(&slots, &notes);
                if p.is_empty() {
                    return Ok(self.rows(rec, &slots, &slots, 1));
                }
                req.prompt = format!(
                    "{base}\n\nYour previous answer had these problems: {}. Reply again with all the items, each problem fixed.",
                    p.join(" | ")
                );
                Some(slots)
            }
            Err(e) => {
                req.prompt = format!(
                    "{base}\n\nYour previous answer was invalid: {e}. Reply with only the JSON object {{\"items\": [...]}} the schema describes."
                );
                None
            }
        };
        req.repair = true;
        let a = ask_text(&self.call.svc, &req, cx).await?;
        let text2 = a.text.unwrap_or_default();
        match (self.slot(&text2, frames), first) {
            (Ok((last, _)), Some(first)) => Ok(self.rows(rec, &first, &last, 2)),
            (Ok((last, _)), None) => Ok(self.rows(rec, &last, &last, 2)),
            (Err(_), Some(first)) => Ok(self.rows(rec, &first, &first, 2)),
            (Err(e), None) => Err(StageError::data(
                "invalid_items",
                format!("{e}; last answer {:?}", cut_text(&text2, 300)),
            )),
        }
    }
}
