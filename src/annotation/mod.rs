//! The human annotation round trip of RiskCue §3.3 (A.3,
//! A.9; SPEC §6) through Label Studio, or a spreadsheet.
//!
//! Export reads: the run's manifest, its tables under the pipeline's own thresholds (the
//! selected videos), the source, probe (fps, duration), committee (tally), quality and OCR
//! tables for pre-annotations. Export writes, into `--out`: `tasks.json` (Label Studio's import
//! format), `label_config.xml` (the 8 fields) and `tasks.csv`.
//! Import reads: a Label Studio JSON export (or the CSV filled in) and the run's probe table.
//! Import writes, through the run's store: `annotations/annotations.parquet` (one row per video
//! and annotator, plus the adjudicated row) and `annotations/report.json` (what was kept out and
//! why, and the agreement). Calls nothing; caches nothing.
//!
//! With `--items`, the question items instead (HarmVideoBench A.2; `items.rs`): export writes
//! one review task per kept item, and import, seeing an export of item tasks, stores
//! `annotations/items.parquet` and `annotations/items_report.json`.

mod agreement;
mod columns;
mod export;
mod import;
pub mod items;
mod tasks;
#[cfg(test)]
mod tests;

pub use crate::benchmark::review::{Annotation, Rule, read_annotations};
use crate::error::{RunError, io};
use agreement::*;
pub use export::export;
use export::*;
pub use import::{ImportReport, import, render};
use std::path::{Path, PathBuf};

/// What `annotate export` is asked for.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportOptions {
    /// The folder to write tasks.json, label_config.xml and tasks.csv into.
    #[arg(long)]
    pub out: PathBuf,
    /// Where Label Studio loads the videos from: PREFIX/<file name> for a local source's file,
    /// PREFIX/<path in the run> for downloaded media (serve that folder over HTTP).
    #[arg(long)]
    pub media_url: String,
    /// Only the videos of this split (`vidcurate split --name`), else every selected video.
    #[arg(long)]
    pub split: Option<String>,
    /// Only the videos whose source row passes this SQL condition (as `analyze --where`),
    /// e.g. "domain = 'flood' and label in ('yes', 'unsure')"; text in single quotes.
    #[arg(long = "where", value_name = "EXPR")]
    pub filter: Option<String>,
    /// Export the run's question items for review instead (one task per kept item: accept,
    /// edit the question, options or answer, move it to another level, or reject with a reason).
    #[arg(long)]
    pub items: bool,
    /// Export the benchmark items of this task for review instead (repeat it, or `all`): one
    /// Label Studio project per task in OUT/<task>/, its controls those of the task's answer
    /// format (the options to choose, a number, ranges on the video's timeline, the text, one
    /// entry per reference element), the item's reference as the pre-annotation.
    #[arg(long = "task", value_name = "NAME", conflicts_with = "items")]
    pub tasks: Vec<String>,
}

/// The label config for the 8 fields: spans on the video's timeline, texts, the yes/no label.
pub const LABEL_CONFIG: &str = r##"<View>
  <Header value="$title"/>
  <Video name="video" value="$video" frameRate="$fps" sync="timeline"/>
  <Header value="Mark the risk signal and the accident on the timeline"/>
  <TimelineLabels name="spans" toName="video">
    <Label value="risk_signal" background="#f0a030"/>
    <Label value="accident" background="#d03030"/>
  </TimelineLabels>
  <Header value="On-screen text the pipeline read (a hint)"/>
  <Text name="ocr" value="$ocr_hint"/>
  <Header value="Risk visual indicators"/>
  <TextArea name="risk_visual_indicators" toName="video" rows="2" maxSubmissions="1" editable="true"/>
  <Header value="Risk signal description: first, then, afterwards"/>
  <TextArea name="risk_signal_first" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="First, ..."/>
  <TextArea name="risk_signal_then" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="Then, ..."/>
  <TextArea name="risk_signal_afterwards" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="Afterwards, ..."/>
  <Header value="Accident description"/>
  <TextArea name="accident_description" toName="video" rows="2" maxSubmissions="1" editable="true"/>
  <Header value="Risk label"/>
  <Choices name="risk_label" toName="video" choice="single" required="true">
    <Choice value="yes"/>
    <Choice value="no"/>
  </Choices>
</View>
"##;

/// Writes a Label Studio project into `out`: its tasks.json, label_config.xml and, for the
/// 8 fields, tasks.csv.
fn write_export(
    out: &Path,
    tasks: &[serde_json::Value],
    config: &str,
    csv: Option<Vec<u8>>,
) -> Result<(), RunError> {
    let write = |name: &str, data: Vec<u8>| {
        let p = out.join(name);
        crate::store::write_file(&p, &data).map_err(io(&p))
    };
    write(
        "tasks.json",
        serde_json::to_vec_pretty(tasks).unwrap_or_default(),
    )?;
    write("label_config.xml", config.as_bytes().to_vec())?;
    csv.map_or(Ok(()), |csv| write("tasks.csv", csv))
}

/// The strings of a Label Studio result's list (its `text`, its `choices`), anything else left out.
fn strings(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A Label Studio textarea result on the video: control `name` holding `texts`.
fn textarea<T: serde::Serialize>(name: &str, texts: &[T]) -> serde_json::Value {
    serde_json::json!({"from_name": name, "to_name": "video", "type": "textarea", "value": {"text": texts}})
}

/// `annotate export --task`: one Label Studio project per task, with its number of tasks.
pub use export::export_tasks;

/// Reads an `annotate import` export, tells which review it holds (benchmark task items,
/// question items, or the 8 fields) from its tasks, stores it and renders what was kept.
pub async fn import_any(
    run_dir: &Path,
    export: &Path,
    rule: &Rule,
    annotator: Option<&str>,
    minor_at: f64,
) -> Result<String, RunError> {
    let is_json = !export
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let tasks = if is_json {
        import::read_export(export)?
    } else {
        vec![]
    };
    if !(0.0..=1.0).contains(&minor_at) {
        return Err(RunError::Config(format!(
            "--minor-at {minor_at}: a similarity, 0 to 1"
        )));
    }
    if tasks::is_task_export(&tasks) {
        let run = crate::store::run::RunView::open(run_dir).await?;
        let r = tasks::import_tasks(&run.store, &run.manifest, &tasks, rule, minor_at).await?;
        Ok(tasks::render(&r))
    } else if import::is_item_export(&tasks) {
        let run = crate::store::run::RunView::open(run_dir).await?;
        let r = items::import_items(&run.store, &run.manifest, &tasks, rule, minor_at).await?;
        Ok(items::render(&r))
    } else {
        Ok(render(&import(run_dir, export, rule, annotator).await?))
    }
}
