//! `vidcurate questions RUN`: parses, runs `report::questions::table` and prints it.

use crate::error::{RunError, io};
use crate::report::questions::{csv, render, table};
use std::path::PathBuf;

/// The question table of a run: per level, items drafted, kept and rejected, the rules the
/// rejected ones broke, the kept ones' correct letters (with a chi-squared test of their
/// balance over the whole run), near-duplicates, blind-answerable items and level
/// disagreements. Reads the stored rows only: no model is called.
///
/// Examples:
///   vidcurate questions data/runs/harmvideo-questions
///   vidcurate questions RUN --set blind.flag_at=1     (the table under another blind threshold)
///   vidcurate questions RUN --csv levels.csv
#[derive(clap::Args)]
pub struct Args {
    /// A run directory or object-store URL.
    pub run: PathBuf,
    /// The questions stage's id, when the run has more than one.
    #[arg(long)]
    pub stage: Option<String>,
    /// A blind stage's select value to decide the flags under (`STAGE.KEY=VALUE`, repeatable).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<crate::stages::selection::Override>,
    /// Also write the level lines as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let t = crate::runtime::tokio_runtime()?.block_on(table(&a.run, a.stage.as_deref(), &a.set))?;
    print!("{}", render(&t));
    if let Some(p) = &a.csv {
        std::fs::write(p, csv(&t)).map_err(io(p))?;
    }
    Ok(crate::error::Exit::Done)
}
