//! `items` stage: the benchmark items of one task file (`benchmark::task`) for each video. A
//! pipeline lists one `items` stage per task (`pipelines/mvfndb-benchmark.toml`: MVFNDB's ten).
//!
//! Reads: the task file and its prompts; for a derived task, the table its rule reads through
//! the record (the `ocr` stage's regions and the sampled frames' times; the `shots` stage's
//! count); for a drafted task, the video's sampled frames (up to `max_images`), title,
//! transcript and, for a tagged_reasoning task, the source column `label_column` names.
//! Calls: nothing for a derived task; for a drafted one, model A (`drafter`), model B
//! (`refiner`) and a judge (`judge`) through the pipeline's services, each answer under a
//! schema built from the task's format and checked by its parser, one repair each.
//! Caches: every answer, in the run's response cache. Writes: one row per item
//! (`record::BenchItem`), kept or rejected with the reason, with every round of a drafted one
//! and the columns a derived one came from. A video never stops here: an item that fails is a
//! rejected row and the video goes on to the next task.
//!
//! The task file's text and its prompts' texts are in the fingerprint. `select`: the loop's
//! threshold (`min_score`, default 4) and refinements (`max_rounds`, default 2), which decide the
//! calls a drafted item makes, so they are in the fingerprint too when not the defaults; a
//! video's rows keep every round's scores, so `benchmark::rounds::reselect` decides a new
//! threshold with no call (`rethreshold`).

mod as_run;
mod drafted;
pub mod table;

pub use as_run::{run_tasks, task_of_run};
pub use drafted::{DraftContext, check_draft};

use crate::benchmark::derive::{DeriveInput, DerivedItem, shot_item, text_items};
use crate::benchmark::formats::{Answer, Format, option_label};
use crate::benchmark::rounds::LoopRule;
use crate::benchmark::task::Task;
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{BenchItem, Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext, StageEstimate};
use crate::stages::model_call::Call;
use crate::stages::{BuildCx, Built, compute_settings, one};
use async_trait::async_trait;
use drafted::{Ended, Loop};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;

/// A model a drafted task calls: a `[services.<name>]` entry and a model name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    pub service: String,
    pub model: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemsConfig {
    /// The task file (relative to the pipeline file).
    pub task: PathBuf,
    /// Items per video: the targets a derived text rule takes, or the items drafted (1..10).
    #[serde(default = "one")]
    pub per_video: usize,
    /// Drafted tasks: model A (the paper: Qwen2.5-VL-72B), model B (Gemini 2.5 Flash) and the
    /// judge (GPT-o1). A derived task names none.
    #[serde(default)]
    pub drafter: Option<ModelRef>,
    #[serde(default)]
    pub refiner: Option<ModelRef>,
    #[serde(default)]
    pub judge: Option<ModelRef>,
    #[serde(default = "default_images")]
    pub max_images: usize,
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
    1024
}

impl crate::stages::Thresholds for LoopRule {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        crate::stages::ThresholdError::check_range("min_score", self.min_score, 0..=5)?;
        crate::stages::ThresholdError::check_range("max_rounds", self.max_rounds, 0..=10)
    }
}

/// The prompt each model of a drafted task answers, in the order drafter, refiner, judge.
const ROLES: [&str; 3] = ["draft", "refine", "judge"];

/// The models of a drafted task.
struct Models {
    drafter: Call,
    refiner: Call,
    judge: Call,
}

pub struct ItemsStage {
    cfg: ItemsConfig,
    task: Task,
    rule: LoopRule,
    models: Option<Models>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "items",
    about: "benchmark items of one task file (pipelines/tasks/): references derived from measured columns (text colour, grid cell, on-screen ranges, shot count) or drafted by model A, refined by model B and judged 0-5 (MVFNDB Figure 4)",
    build,
    reselect: None,
    summary: None,
    release: crate::stages::Release::Skip,
    keys: &[
        ("compute", crate::config::keys_of::<ItemsConfig>),
        (
            "compute.drafter, refiner, judge",
            crate::config::keys_of::<ModelRef>,
        ),
        ("select", crate::config::keys_of::<LoopRule>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (ItemsConfig, _) = compute_settings(common, compute_at, bcx)?;
    let rule: LoopRule = crate::stages::select_settings(common, select_at, bcx)?;
    let at = |k: &str| crate::config::key_at(compute_at, k);
    let task = Task::load(&bcx.resolve(&cfg.task))?;
    if task.taxonomy.is_some() {
        return Err(bcx.src.error_at(
            &at("task"),
            format!(
                "task {} is drafted per taxonomy level: a `questions` stage builds it (compute = {{ task = ... }})",
                task.file.name
            ),
        ));
    }
    if !(1..=10).contains(&cfg.per_video) {
        return Err(bcx.src.error_at(
            &at("per_video"),
            format!("per_video must be 1..10, got {}", cfg.per_video),
        ));
    }
    let derived = task.file.reference.from == "derived";
    let given = [
        ("drafter", &cfg.drafter),
        ("refiner", &cfg.refiner),
        ("judge", &cfg.judge),
    ];
    let models = if derived || task.file.reference.from == "people" {
        if let Some((k, _)) = given.iter().find(|(_, m)| m.is_some()) {
            return Err(bcx.src.error_at(
                &at(k),
                format!(
                    "task {} is not drafted by models: it calls none",
                    task.file.name
                ),
            ));
        }
        None
    } else {
        Some(drafted::drafted_models(
            &cfg, &task, given, common, compute_at, bcx,
        )?)
    };
    // The texts decide whether items are made again, not the files' names.
    compute["task"] = json!(task.fingerprint);
    // The loop's threshold and rounds decide which calls a drafted item makes (a clean run
    // under a higher threshold refines more): part of what is computed, unlike a filter's
    // threshold. Only when not the defaults, so runs made before keep their fingerprint.
    if models.is_some() && rule != LoopRule::default() {
        compute["loop"] = json!(rule);
    }
    Ok(Built {
        task: crate::stages::processor_task(ItemsStage {
            cfg,
            task,
            rule,
            models,
        }),
        compute,
        version: 1,
        default_in_flight: 8,
    })
}

impl ItemsStage {
    fn rule_name(&self) -> &str {
        self.task.file.reference.rule.as_deref().unwrap_or_default()
    }

    /// The question with the item's target text in place.
    fn question(&self, target: &str) -> String {
        self.task.file.question.replace("{target_text}", target)
    }

    /// A row with the task's columns filled and the answer empty.
    fn blank_row(&self, item_id: String, k: u32) -> BenchItem {
        BenchItem {
            item_id,
            task: self.task.file.name.clone(),
            format: self.task.format.name().to_string(),
            k,
            question: self.question(""),
            for_review: self.task.file.reference.for_review,
            origin: self.task.file.reference.from.clone(),
            task_fingerprint: self.task.fingerprint.clone(),
            ..Default::default()
        }
    }

    fn derived_rows(&self, rec: &VideoRecord) -> Vec<BenchItem> {
        let items: Vec<DerivedItem> = if self.rule_name() == "shot_count" {
            rec.shots
                .map(|n| vec![shot_item(&rec.video_id, &self.task.file.name, n)])
                .unwrap_or_default()
        } else {
            let regions = rec.ocr.as_deref().unwrap_or_default();
            let times: Vec<f64> = rec
                .frames
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|f| f.timestamp_secs)
                .collect();
            let pool = colour_pool(regions);
            let cx = DeriveInput {
                video_id: &rec.video_id,
                task: &self.task.file.name,
                options: &self.task.file.options,
                shown: self.task.file.shown,
                pool: &pool,
                frame_times: &times,
                duration_secs: rec.probe.as_ref().map(|p| p.video_duration_secs),
                per_video: self.cfg.per_video,
            };
            let (items, skipped) = text_items(self.rule_name(), regions, &cx);
            for s in skipped {
                tracing::debug!(video_id = %rec.video_id, "{s}");
            }
            items
        };
        items
            .into_iter()
            .enumerate()
            .map(|(k, d)| {
                let mut row = self.blank_row(d.item_id, k as u32);
                row.question = self.question(&d.target_text);
                row.target_text = d.target_text;
                (row.key_frame, row.key_time_secs) = (d.key_frame, d.key_time_secs);
                row.options = d.options;
                fill_answer(&mut row, &d.answer);
                row.for_review = d.for_review;
                row.kept = true;
                row.from_columns = d.from_columns;
                row
            })
            .collect()
    }
}

/// Colours of the video's text regions, most frequent first: CCP's distractors are colours that
/// occur (in the video itself, so that a streaming run needs no pass over the others).
fn colour_pool(regions: &[crate::record::TextRegion]) -> Vec<(String, u64)> {
    let mut m = std::collections::BTreeMap::<String, u64>::new();
    for r in regions {
        *m.entry(r.text_color.clone()).or_default() += 1;
    }
    m.into_iter().collect()
}

/// Puts a typed answer into its format's columns.
fn fill_answer(row: &mut BenchItem, a: &Answer) {
    let n = row.options.len();
    match a {
        Answer::Choice(i) => {
            row.answer = option_label(*i, n);
            row.answer_choices = vec![*i as u32];
        }
        Answer::Choices(v) => {
            row.answer = v
                .iter()
                .map(|i| option_label(*i, n))
                .collect::<Vec<_>>()
                .join(",");
            row.answer_choices = v.iter().map(|i| *i as u32).collect();
        }
        Answer::Count(c) => {
            row.answer = c.to_string();
            row.answer_count = Some(*c);
        }
        Answer::Ranges(r) => {
            row.answer = serde_json::to_string(r).unwrap_or_default();
            row.answer_starts = r.iter().map(|x| x[0]).collect();
            row.answer_ends = r.iter().map(|x| x[1]).collect();
        }
        Answer::Text(t) => {
            row.answer_text = t.clone();
        }
        Answer::Tagged { think, result } => {
            row.answer = result.clone();
            row.answer_label = result.clone();
            row.answer_text = think.clone();
        }
    }
}

/// The reference of a kept drafted item from its round's JSON text (also a person's review,
/// `annotate import`, written as a draft).
pub fn fill_reference(
    row: &mut BenchItem,
    task: &Task,
    text: &str,
    options: &[String],
    duration: Option<f64>,
) {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    row.rationale = v["rationale"].as_str().unwrap_or_default().to_string();
    if let Some(a) = v.get("answer") {
        let acx = crate::benchmark::formats::AnswerContext {
            options,
            duration_secs: duration,
            labels: &task.file.labels,
        };
        if let Ok(a) = task.format.parse(a, &acx) {
            fill_answer(row, &a);
        }
    }
    for f in &task.file.reference.fields {
        let items: Vec<String> = match &v[f.as_str()] {
            serde_json::Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect(),
            serde_json::Value::String(s) => {
                if task.format == Format::OpenText && row.answer_text.is_empty() {
                    row.answer_text = s.clone();
                }
                vec![s.clone()]
            }
            _ => vec![],
        };
        row.reference_fields.push(f.clone());
        row.reference_items.push(items);
    }
}

#[async_trait]
impl Processor for ItemsStage {
    type Row = BenchItem;

    fn requires(&self) -> &'static [Slot] {
        match (self.models.is_some(), self.rule_name()) {
            (true, _) => &[Slot::Frames],
            (false, "shot_count") => &[Slot::Shots],
            (false, _) => &[Slot::Frames, Slot::Ocr],
        }
    }
    fn provides(&self) -> Slot {
        Slot::Items
    }
    fn reads(&self) -> Vec<Slot> {
        crate::record::Slot::ALL.to_vec()
    }
    fn reads_extras(&self) -> bool {
        true
    }

    /// The worst case of every round: the draft, then `max_rounds + 1` judgments and as many
    /// refinements, per item.
    fn estimate(&self) -> StageEstimate {
        let Some(m) = &self.models else {
            return StageEstimate::default();
        };
        let n = self.cfg.per_video as u32;
        let rounds = self.rule.max_rounds + 1;
        // Each prompt also carries the options and the evidence line, about 500 characters.
        let mut calls = vec![];
        for _ in 0..n {
            calls.push(m.drafter.call_estimate(500));
            for _ in 0..rounds {
                calls.push(m.refiner.call_estimate(500));
                calls.push(m.judge.call_estimate(500));
            }
        }
        StageEstimate {
            calls,
            frames: None,
        }
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<BenchItem>, StageError> {
        let rows = match &self.models {
            None => self.derived_rows(rec),
            Some(m) => self.drafted_rows(rec, cx, m).await?,
        };
        for r in &rows {
            cx.tally.add(
                if r.kept {
                    "items_kept"
                } else {
                    "items_rejected"
                },
                1,
            );
        }
        Ok(rows)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<BenchItem>) {
        rec.items.get_or_insert_with(Vec::new).extend(rows);
    }
}

impl ItemsStage {
    async fn drafted_rows(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
        m: &Models,
    ) -> Result<Vec<BenchItem>, StageError> {
        let images =
            super::model_inputs::frame_inputs(rec, cx, self.cfg.max_images, "the drafting model")
                .await?;
        let (title, _) = super::model_inputs::title_description(rec, cx);
        let transcript: String = rec
            .transcript
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(self.cfg.max_transcript_chars)
            .collect();
        let label = self.video_label(rec, cx);
        let options = &self.task.file.options;
        let duration = rec.probe.as_ref().map(|p| p.video_duration_secs);
        let none = |s: &str| {
            if s.trim().is_empty() {
                "(none)".to_string()
            } else {
                s.trim().to_string()
            }
        };
        let evidence = format!("title: {}; speech: {}", none(&title), none(&transcript));
        let fill = |p: &str| {
            p.replace("[title]", &none(&title))
                .replace("[transcript]", &none(&transcript))
                .replace("[definition]", self.task.file.definition.trim())
                .replace("[options]", &drafted::options_text(options))
                .replace("[label]", label.as_deref().unwrap_or("(unknown)"))
                .replace("[evidence]", &evidence)
        };
        let dcx = DraftContext {
            options,
            duration_secs: duration,
            label: label.as_deref(),
        };
        let lp = Loop {
            task: &self.task,
            drafter: &m.drafter,
            refiner: &m.refiner,
            judge: &m.judge,
            rule: self.rule,
            images,
        };
        let mut rows = vec![];
        for k in 0..self.cfg.per_video {
            let id = format!("{}:{}:{k}", rec.video_id, self.task.file.name);
            // Each item of a video asks anew: its place is in the prompt, so the cache tells them apart.
            let place = move |p: &str| format!("{}\n\n(Item {} of this video.)", fill(p), k + 1);
            let place: &(dyn Fn(&str) -> String + Sync) = if self.cfg.per_video > 1 {
                &place
            } else {
                &fill
            };
            let ended = lp.run(place, &dcx, cx).await?;
            let row = self.drafted_row(id, k, m, ended, duration);
            rows.push(row);
        }
        Ok(rows)
    }

    /// The video's right label for the task (its `label_column`), when it has one.
    fn video_label(&self, rec: &VideoRecord, cx: &StageContext) -> Option<String> {
        let column = self.task.file.reference.label_column.as_ref()?;
        super::model_inputs::extra_column(rec, &cx.extras, column)
    }

    /// The row of drafted item `k` from how its loop ended: the kept round's reference, or the
    /// rejection.
    fn drafted_row(
        &self,
        id: String,
        k: usize,
        m: &Models,
        ended: Ended,
        duration: Option<f64>,
    ) -> BenchItem {
        let options = &self.task.file.options;
        let mut row = self.blank_row(id, k as u32);
        row.options = options.clone();
        row.judge_model = m.judge.model.clone();
        crate::benchmark::rounds::fill_row(&mut row, &ended.rounds);
        match (ended.kept, ended.rejected) {
            (Some(round), _) => {
                let text = &ended.rounds[round as usize].text;
                fill_reference(&mut row, &self.task, text, options, duration);
                row.kept = true;
                row.final_round = Some(round);
            }
            (None, Some((code, why))) => {
                row.reject_codes = vec![code];
                row.reject_reason = why;
            }
            (None, None) => {}
        }
        row
    }
}
