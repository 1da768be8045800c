//! `vidcurate annotate export|import`: the human annotation round trip of RiskCue §3.3 (A.3,
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
mod export;
mod import;
pub mod items;
mod tasks;
#[cfg(test)]
mod tests;

pub use crate::benchmark::review::{Annotation, Rule, read_annotations};
use crate::error::RunError;
use agreement::*;
pub use export::export;
use export::*;
pub use import::{ImportReport, Problem, import, render};
use std::path::PathBuf;

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

/// Human annotation round trip (RiskCue's 8 fields) with Label Studio or a spreadsheet:
/// `annotate export` writes the tasks, `annotate import` reads the annotations back.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Write tasks.json (Label Studio import format, with the committee's label as a
    /// pre-annotation and the OCR text as a hint), label_config.xml (risk signal and accident
    /// spans on the video timeline, indicators, the first/then/afterwards description, the
    /// accident description, the yes/no risk label) and tasks.csv for the selected videos.
    #[command(
        after_help = "Example:\n  vidcurate annotate export data/runs/riskcue --out annot/ --media-url http://media.lab:8000\n  (create a Label Studio project with annot/label_config.xml, import annot/tasks.json)"
    )]
    Export {
        /// A run directory or object-store URL.
        run_dir: std::path::PathBuf,
        #[command(flatten)]
        opts: ExportOptions,
    },
    /// Read a Label Studio JSON export (or the filled-in tasks.csv) into
    /// RUN_DIR/annotations/annotations.parquet: one row per video and annotator plus the
    /// adjudicated row. Invalid annotations (end before start, times outside the video, a label
    /// not yes/no, a yes without a description, unknown tasks) are kept out with the task id and
    /// field; cancelled ones are counted. Importing the same export again changes nothing; a
    /// newer annotation of the same annotator replaces the older. Prints the agreement (Cohen's
    /// or Fleiss' kappa on the label, IoU of the risk-signal spans).
    ///
    /// An export of `annotate export --items` tasks is an item review instead: each review is
    /// checked field by field (two right options, an empty question, an unknown level, a
    /// rejection without a reason are kept out, naming task and field), each item decided under
    /// --rule (reviewer:NAME: the senior's review, else the reviewers' common decision), classed
    /// accepted / minor edit / rewritten / rejected, into RUN_DIR/annotations/items.parquet,
    /// with kappa per level and the retention shares.
    ///
    /// An export of `annotate export --task` projects is a review of benchmark task items:
    /// each review's reference is read as a draft and checked by the task format's parser (a
    /// negative count, a reversed or out-of-video range, an empty reference list, a wrong
    /// option are kept out, naming task, reviewer and control), each item decided under --rule,
    /// into RUN_DIR/annotations/tasks.parquet, with per task the retention, the reviewers'
    /// kappa on accept / edit / reject and their agreement on the reference: kappa on the
    /// chosen options, Krippendorff's alpha on counts (interval), on time ranges (distance
    /// 1 - IoU) and on texts and lists (distance 1 - character-trigram similarity).
    Import {
        /// A run directory or object-store URL.
        run_dir: std::path::PathBuf,
        /// The export: Label Studio JSON, or the CSV from `annotate export` filled in.
        export: std::path::PathBuf,
        /// How a video with several annotators is decided: single, majority, reviewer:NAME.
        #[arg(long, default_value = "majority")]
        rule: Rule,
        /// Whose annotations a CSV holds.
        #[arg(long)]
        annotator: Option<String>,
        /// Item reviews: an edit is minor when the question and the correct option stay at
        /// least this alike (character-trigram Jaccard, 0 to 1); below it, rewritten. Task
        /// reviews: when the reference stays this alike (the IoU of time ranges, the similarity
        /// of texts; a changed option or count is always rewritten).
        #[arg(long, default_value_t = 0.5)]
        minor_at: f64,
    },
}

pub fn run(cmd: Cmd) -> Result<crate::error::Exit, RunError> {
    let rt = super::tokio_runtime()?;
    match cmd {
        Cmd::Export { run_dir, opts } if !opts.tasks.is_empty() => {
            for (task, n) in rt.block_on(export::export_tasks(&run_dir, &opts))? {
                println!(
                    "{task}: {n} tasks: {}/tasks.json, label_config.xml",
                    opts.out.join(&task).display()
                );
            }
        }
        Cmd::Export { run_dir, opts } => {
            let n = rt.block_on(export(&run_dir, &opts))?;
            println!(
                "{n} tasks: {}/tasks.json, label_config.xml, tasks.csv",
                opts.out.display()
            );
        }
        Cmd::Import {
            run_dir,
            export,
            rule,
            annotator,
            minor_at,
        } => {
            let is_json = !export
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
            let tasks = if is_json {
                import::read_export(&export)?
            } else {
                vec![]
            };
            if !(0.0..=1.0).contains(&minor_at) {
                return Err(RunError::Config(format!(
                    "--minor-at {minor_at}: a similarity, 0 to 1"
                )));
            }
            if tasks::is_task_export(&tasks) {
                let r = rt.block_on(async {
                    let run = crate::store::run::RunView::open(&run_dir).await?;
                    tasks::import_tasks(&run.store, &run.manifest, &tasks, &rule, minor_at).await
                })?;
                print!("{}", tasks::render(&r));
            } else if import::is_item_export(&tasks) {
                let r = rt.block_on(async {
                    let run = crate::store::run::RunView::open(&run_dir).await?;
                    items::import_items(&run.store, &run.manifest, &tasks, &rule, minor_at).await
                })?;
                print!("{}", items::render(&r));
            } else {
                let r = rt.block_on(import(&run_dir, &export, &rule, annotator.as_deref()))?;
                print!("{}", render(&r));
            }
        }
    }
    Ok(crate::error::Exit::Done)
}
