//! `level_check` stage: a second model assigns each kept item a level with the taxonomy's
//! boundary tests, without knowing the drafted one (HarmVideoBench B.1's adjudication rule and
//! B.2's third quality risk, boundary confusion). A disagreement is what the senior reviewer
//! looks at first.
//!
//! Reads: the kept items of a question stage, and the taxonomy file (the same one; default
//! HarmVideoBench's). Calls: a model, text only, with structured output (`{"level": one of the
//! taxonomy's names}`). Caches: every answer. Writes: one row per kept item: the drafted level,
//! the checked level, whether they agree. An item the model refuses, or answers with no level
//! after the repair, gets an empty `checked_level`, `agree = false` and its `problem`: it goes to
//! the senior reviewer like a disagreement, and the video's other items go on. `select = { max_disagreements = N }`: a video with
//! more disagreeing items is dropped (default: none dropped, record only).

use super::items::question_lines;
use crate::config::taxonomy::Taxonomy;
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::{ErrorKind, StageError};
use crate::record::{QuestionItem, Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext, StageEstimate};
use crate::stages::model_call::Call;
use crate::stages::model_inputs::{ask_validated, stage_service, text_hash};
use crate::stages::structured::{OutputSchema, SchemaProblem};
use crate::stages::{BuildCx, Built, ThresholdError, compute_settings, three};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelCheckConfig {
    /// A `[services.<name>]` entry: best another model than the one that drafted.
    pub service: String,
    pub model: String,
    /// The question stage's taxonomy file (relative to the pipeline file).
    #[serde(default)]
    pub taxonomy: Option<PathBuf>,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "three")]
    pub items_per_video: u32,
}

fn default_max_tokens() -> u32 {
    64
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LevelCheckSelect {
    pub max_disagreements: Option<u32>,
}

impl crate::stages::Thresholds for LevelCheckSelect {
    fn check(&self) -> Result<(), ThresholdError> {
        Ok(())
    }
}

impl crate::stages::RowThresholds for LevelCheckSelect {
    type Row = LevelRow;
    const KEEP_WITHOUT_ROWS: bool = true;
    fn keep(&self, rows: &[LevelRow]) -> bool {
        let n = rows.iter().filter(|r| !r.agree).count() as u32;
        self.max_disagreements.is_none_or(|m| n <= m)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LevelRow {
    pub item_id: String,
    pub drafted_level: String,
    pub checked_level: String,
    pub agree: bool,
    /// Why no level was read (`refused: …`, `invalid_level: …`); empty when one was.
    pub problem: String,
    pub raw: String,
    pub provider: String,
    pub model: String,
    pub attempts: u32,
}

pub struct LevelCheckStage {
    cfg: LevelCheckConfig,
    select: LevelCheckSelect,
    taxonomy: Taxonomy,
    /// Text only; the prompt is the taxonomy's text (each item's prompt adds the item).
    call: Call,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "level_check",
    about: "a second model assigns each kept item a taxonomy level with the boundary tests; disagreements with the drafted level go to the senior reviewer",
    build,
    reselect: Some(crate::stages::reselect::<LevelCheckSelect>),
    summary: None,
    release: crate::stages::Release::Skip,
    keys: &[
        ("compute", crate::config::keys_of::<LevelCheckConfig>),
        ("select", crate::config::keys_of::<LevelCheckSelect>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (LevelCheckConfig, _) = compute_settings(common, compute_at, bcx)?;
    let select: LevelCheckSelect = crate::stages::select_settings(common, select_at, bcx)?;
    let (taxonomy, text) = super::taxonomy_file(&cfg.taxonomy, bcx)?;
    compute["taxonomy"] = json!(text_hash(&text));
    let levels: Vec<&str> = taxonomy.levels.iter().map(|l| l.name.as_str()).collect();
    let schema = OutputSchema::new(
        "item_level",
        json!({
            "type": "object",
            "properties": {"level": {"type": "string", "enum": levels}},
            "required": ["level"],
            "additionalProperties": false,
        }),
        Path::new("(built from the taxonomy)"),
    )
    .expect("a valid schema");
    let svc = stage_service(bcx, common, compute_at, &cfg.service)?;
    let call = Call {
        svc,
        model: cfg.model.clone(),
        prompt: taxonomy.prompt_text(),
        schema: Some(schema),
        max_images: 0,
        max_transcript_chars: 0,
        max_tokens: cfg.max_tokens,
        temperature: 0.0,
    };
    Ok(Built {
        task: crate::stages::processor_task(LevelCheckStage {
            cfg,
            select,
            taxonomy,
            call,
        }),
        compute,
        // 2: the `problem` column (a refusal no longer rejects the video).
        version: 2,
        default_in_flight: 16,
    })
}

impl LevelCheckStage {
    fn prompt(&self, item: &QuestionItem) -> String {
        let mut s = format!(
            "Assign this multiple-choice item to one level of the taxonomy below, applying the boundary tests. Reply with the JSON object {{\"level\": NAME}}.\n\n{}\n{}",
            self.taxonomy.prompt_text(),
            question_lines(item)
        );
        s += &format!("Correct answer: {}\n", item.answer);
        if !item.rationale.is_empty() {
            s += &format!("Rationale: {}\n", item.rationale);
        }
        s
    }
}

#[async_trait]
impl Processor for LevelCheckStage {
    type Row = LevelRow;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Questions]
    }
    fn provides(&self) -> Slot {
        Slot::LevelCheck
    }

    fn estimate(&self) -> StageEstimate {
        // The instruction and the item, about 600 characters.
        self.call.estimate(600, self.cfg.items_per_video as usize)
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<LevelRow>, StageError> {
        let mut rows = vec![];
        for item in rec.questions.iter().flatten().filter(|q| q.kept) {
            let req = self.call.request(self.prompt(item), vec![]);
            let read = |t: &str| -> Result<String, SchemaProblem> {
                Ok(self.call.check(t)?["level"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string())
            };
            let asked = ask_validated(&self.call.svc, req, cx, "invalid_level", read, |problem| {
                format!("Your previous answer was invalid: {problem}. Reply with only the JSON object {{\"level\": NAME}}.")
            })
            .await;
            let (checked, problem, raw, attempts) = match asked {
                Ok(a) => (a.value, String::new(), a.raw, a.attempts),
                // This item only: the others of the video are still checked.
                Err(e) if e.kind == ErrorKind::Data => (
                    String::new(),
                    format!("{}: {}", e.reason, e.detail),
                    String::new(),
                    0,
                ),
                Err(e) => return Err(e),
            };
            rows.push(LevelRow {
                item_id: item.item_id.clone(),
                drafted_level: item.level.clone(),
                agree: checked == item.level,
                checked_level: checked,
                problem,
                raw,
                provider: self.call.svc.name.clone(),
                model: self.call.model.clone(),
                attempts,
            });
        }
        Ok(rows)
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<LevelRow>) {}

    crate::stages::keep_by_select!();
}
