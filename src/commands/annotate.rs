//! `vidcurate annotate export|import`: parses, runs the `annotation` round trip and prints what it wrote.

use crate::annotation::{ExportOptions, Rule};
use crate::error::RunError;

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
    let rt = crate::runtime::tokio_runtime()?;
    match cmd {
        Cmd::Export { run_dir, opts } if !opts.tasks.is_empty() => {
            for (task, n) in rt.block_on(crate::annotation::export_tasks(&run_dir, &opts))? {
                println!(
                    "{task}: {n} tasks: {}/tasks.json, label_config.xml",
                    opts.out.join(&task).display()
                );
            }
        }
        Cmd::Export { run_dir, opts } => {
            let n = rt.block_on(crate::annotation::export(&run_dir, &opts))?;
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
            let text = rt.block_on(crate::annotation::import_any(
                &run_dir,
                &export,
                &rule,
                annotator.as_deref(),
                minor_at,
            ))?;
            print!("{text}");
        }
    }
    Ok(crate::error::Exit::Done)
}
