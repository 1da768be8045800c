//! `vidcurate cache stats`: parses, runs `report::cache::stats` and prints its tables.

use crate::error::{Exit, RunError};
use std::path::PathBuf;

/// The run's response cache.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Entries, hits, misses, tokens and estimated cost per service and model, then per stage.
    ///
    /// Cost uses `usd_per_mtok_input` / `usd_per_mtok_output` of the run's `[services.*]`. The
    /// second table splits each line by the stage that paid for the answers (and made the
    /// lookups); `-` is what a cache written before stages were recorded holds.
    Stats { run_dir: PathBuf },
}

pub fn run(cmd: Cmd) -> Result<Exit, RunError> {
    match cmd {
        Cmd::Stats { run_dir } => print!("{}", crate::report::cache::stats(&run_dir)?),
    }
    Ok(Exit::Done)
}
