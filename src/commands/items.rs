//! `vidcurate items RUN`: the benchmark item table of a run, one line per `items` stage (task):
//! its format and origin, the videos and items, kept, rejected (by reason), for people to
//! review, and how many judgments the drafted ones took.
//!
//! Reads the committed rows of every `items` stage (current fingerprints) through the run
//! reader. Drafted items are decided again from their stored rounds under the pipeline's own
//! `select` or `--set` values (`benchmark::rounds::reselect`), so the table follows a new
//! threshold with no call; an item whose loop stopped before the rounds a stricter threshold
//! needs is counted apart (a run refines it). Writes nothing unless `--csv` names a file.

use crate::error::{Exit, RunError, io};
use crate::stages::items::table::{csv, render, table};
use crate::store::run::RunView;
use std::path::PathBuf;

/// The item table of a run: one line per task, in pipeline order.
///
/// Examples:
///   vidcurate items data/runs/mvfndb-benchmark
///   vidcurate items RUN --set kep.min_score=3     (the drafted items under another threshold)
///   vidcurate items RUN --csv items.csv
#[derive(clap::Args)]
pub struct Args {
    /// A run directory or object-store URL.
    pub run: PathBuf,
    /// An items stage's select value to decide its drafted items under (`STAGE.KEY=VALUE`:
    /// min_score, max_rounds; repeatable).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<crate::stages::selection::Override>,
    /// Also write the lines as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let (t, _) = crate::runtime::tokio_runtime()?.block_on(async {
        let run = RunView::open(&a.run).await?;
        table(&run, &a.set).await
    })?;
    if t.is_empty() {
        return Err(RunError::Config(format!(
            "{}: the run has no items stage",
            a.run.display()
        )));
    }
    print!("{}", render(&t));
    if let Some(p) = &a.csv {
        std::fs::write(p, csv(&t)).map_err(io(p))?;
    }
    Ok(Exit::Done)
}
