//! `vidcurate evaluate`: parses, runs `evaluation::score` and prints its report.

use crate::error::RunError;
use crate::evaluation::{EvaluateOptions, variants};
use std::path::PathBuf;

/// Score a model's predictions on a release.
///
/// Splits: by default the release's test split alone, when it has one (a model scored on every
/// split is scored partly on the items meant for tuning it); `--split NAME` another split,
/// `--split all` every split. The report's first line says which split it scored, how many
/// videos or items of how many, and how many predictions for other splits it left out; a
/// release without a test split is scored whole, and says so. Every mode below, and
/// --variant, --judge, --people-out and --rotations-out, takes the split alike.
///
/// Labels (a predictions file with `video_id`, `prediction`, optional `variant`): RiskCue's
/// metrics per domain and overall, and per perturbation variant.
///
/// Questions (a predictions file with `item_id` and `prediction` or `answer`, the model's raw
/// answer; optional `rotation`): accuracy per level, the macro average over levels
/// (HarmVideoBench's headline), the micro average, random chance and the blind baseline, with
/// standard errors clustered by video. Answers are parsed from "B", "(B)", "Answer: b", "The
/// answer is B because…", "答案：B" or the option's own text; an answer that names no option, or
/// an item without one, counts as wrong and is listed, never dropped from the denominator.
///
/// Benchmark tasks (a release with `tasks/`, MVFNDB's ten; `item_id` and `prediction`): each
/// answer read by its task's format, then per task and category, and per `--by` value: single
/// choice accuracy; multiple choice exact-set accuracy and mean Jaccard; count |predicted −
/// reference|; time ranges IoU of the union of the predicted ranges with the union of the
/// reference ranges (overlaps merged, order free); ROUGE-L F-measure as the rouge-score package
/// computes it on English (lower case, ASCII letters and digits, no stemming), each CJK character
/// a token (rouge-score drops them); tagged reasoning the <result> label's accuracy and Macro-F1,
/// ROUGE-L of the <think> part. An answer the format cannot read (no option, a word or a negative
/// number for a count, a reversed range, no <result> tag) is wrong, stays in the denominator
/// (a count read as 0) and is counted by reason; so is a missing one. Judged metrics (hit rates,
/// factual consistency, theme relevance, completeness) are listed as not scored. An unknown or
/// repeated item_id exits 2 at its line. `--items-out FILE.jsonl`: every item's reading and
/// values.
///
/// The judge against people: `--judge FILE --people-out DIR` writes a Label Studio project in
/// which people make the judge's judgments on the same answers (hit / miss for each reference
/// element, 0–5 for each rating); have two or more people judge it, export it as JSON, and
/// `--judge FILE --people EXPORT.json` prints, per judged metric, the judge's agreement with
/// each person, with their majority (hit / miss) or mean (ratings) and theirs among themselves,
/// beside the judge's agreement with itself.
///
/// CircularEval: `--rotations-out FILE.jsonl` writes every item of the split once per rotation
/// r = 0..n-1 (letter i shows option (i + r) mod n; the answer left out). Have the model answer each line
/// and give the answers back with their `item_id` and `rotation`: an item then counts only if
/// every rotation is answered right.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate evaluate data/releases/riskcue preds.csv --by domain\n  vidcurate evaluate data/releases/demo preds.jsonl --positive fake --json\n  vidcurate evaluate data/releases/harmvideo answers.csv --by language\n  vidcurate evaluate data/releases/harmvideo answers.csv --split all   (every split, not test alone)\n  vidcurate evaluate data/releases/harmvideo --rotations-out rotations.jsonl\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --by label --items-out scored.jsonl\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --judge judge.toml --people-out judging/\n  (a Label Studio project: judging/label_config.xml, judging/tasks.json; people judge it, export JSON)\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --judge judge.toml --people export.json"
)]
pub struct Args {
    /// A release folder (vidcurate release --out).
    pub release: PathBuf,
    /// The predictions file (.csv, .jsonl or .parquet); not needed with --rotations-out or
    /// --variant.
    #[arg(required_unless_present_any = ["rotations_out", "variant"])]
    pub predictions: Option<PathBuf>,
    /// Benchmark tasks: a prompt variant's predictions, NAME=FILE (repeatable; the first is the
    /// baseline): the final decision's ACC and Macro-F1 per variant and model (a `model` column
    /// may hold several), as MVFNDB's Table 4, with paired differences and standard errors.
    #[arg(long, value_name = "NAME=FILE", value_parser = variants::parse_variant)]
    pub variant: Vec<(String, PathBuf)>,
    /// Write the questions' rotated variants (JSONL) to answer for CircularEval, and stop.
    #[arg(long)]
    pub rotations_out: Option<PathBuf>,
    #[command(flatten)]
    pub opts: EvaluateOptions,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let printed = crate::evaluation::score(&crate::evaluation::Request {
        release: &a.release,
        predictions: a.predictions.as_deref(),
        variants: &a.variant,
        rotations_out: a.rotations_out.as_deref(),
        opts: &a.opts,
    })?;
    match printed.json {
        Some(json) if a.opts.json => println!("{json}"),
        _ => print!("{}", printed.text),
    }
    Ok(crate::error::Exit::Done)
}
