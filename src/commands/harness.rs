//! `vidcurate harness RELEASE --for lmms-eval|vlmevalkit`: writes (or writes again) the
//! evaluation-harness exports of a release folder that exists already, as `release --harness`
//! does when it makes one. The work is `release::harness::export`; this file reads the flags
//! and prints.
//!
//! Reads the release's `questions/`, `tasks/` and `data/` Parquet, its frames and
//! `croissant.json`; writes `harness/…` and refreshes `croissant.json`'s checksums. Calls
//! nothing.

use crate::error::{Exit, RunError};
use crate::release::harness::{Harness, export};
use std::path::PathBuf;

/// Export a release folder for an evaluation harness: lmms-eval's task folder
/// (harness/lmms_eval/: a task per question level plus all items and CircularEval, a task per
/// benchmark task scored by its answer format, their groups and utils.py) or VLMEvalKit's
/// custom multiple-choice TSVs (harness/vlmevalkit/: the questions and each single-choice
/// task, a TSV per split, each with its CircularEval copy). lmms-eval scores the test split
/// (each split's files under its own name; train only for few-shot examples), as `vidcurate
/// evaluate` does by default, and its scores equal `evaluate`'s on the same answers; judged
/// metrics (hit rates, factual consistency, …) stay with `evaluate --judge`.
///
/// The folder is checked against croissant.json's checksums first: a file changed after
/// release is named and nothing is written. An export already there is replaced.
///
/// Exit codes: 0 written; 2 a folder that is not a release, a changed file, nothing to
/// export, or (VLMEvalKit) a release without frames.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate harness data/releases/q --for lmms-eval --for vlmevalkit\n  cd data/releases/q && lmms_eval --include_path harness/lmms_eval --tasks q --model ...\n\nThe same exports at release time: vidcurate release RUN --out DIR --harness lmms-eval"
)]
pub struct Args {
    /// The release folder (`vidcurate release --out`).
    pub release: PathBuf,
    /// The harness to export for (repeat for both).
    #[arg(long = "for", value_enum, value_name = "HARNESS", required = true)]
    pub harness: Vec<Harness>,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    crate::release::check_folder(&a.release)?;
    let written = export(&a.release, &a.harness)?;
    for p in &written {
        let shown = p.strip_prefix(&a.release).unwrap_or(p);
        println!("wrote  {}", shown.display());
    }
    let covered = if a.release.join("croissant.json").is_file() {
        "; croissant.json's checksums cover them"
    } else {
        ""
    };
    println!("{} files{covered}", written.len());
    Ok(Exit::Done)
}
