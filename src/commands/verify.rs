//! `vidcurate verify RUN [--repair]`: parses, runs `store::verify` and prints what it found;
//! `vidcurate verify RELEASE`: the release's files against the sums its `croissant.json` lists.

use crate::error::{Exit, RunError};
use crate::store::verify::{inspect, repair_run};
use std::path::PathBuf;

/// Checks a run directory's committed objects against their recorded sizes and BLAKE3, or a
/// release folder's files against the SHA-256 its croissant.json lists.
///
/// Exit codes: 0 every object is as committed; 1 something is damaged or missing (each one is
/// listed with what depends on it); with --repair, 0 once everything damaged was set aside
/// under _damaged/ (the next `vidcurate run` computes those videos again).
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate verify data/runs/demo\n  vidcurate verify data/releases/demo\n  vidcurate verify s3://bucket/runs/demo --repair && vidcurate run pipelines/demo.toml --out s3://bucket/runs/demo"
)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …), or a release folder
    /// (one with a croissant.json: its files are checked against their listed SHA-256).
    pub run: PathBuf,
    /// Move each damaged shard (and each shard whose frames are damaged or missing) to
    /// _damaged/ with a note, so the next run computes its videos again. Nothing is deleted.
    #[arg(long)]
    pub repair: bool,
    /// How many objects to read at once (object stores are faster with many in flight).
    #[arg(long, default_value_t = 16)]
    pub jobs: usize,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    if crate::release::integrity::is_release(&a.run) {
        return release(&a);
    }
    crate::runtime::tokio_runtime()?.block_on(async {
        let i = inspect(&a.run, a.jobs).await?;
        print!("{}", i.text);
        if i.report.problems.is_empty() {
            return Ok(Exit::Done);
        }
        if !a.repair {
            println!(
                "run `vidcurate verify {} --repair` to set them aside; the next run then computes their videos again",
                a.run.display()
            );
            return Err(RunError::Internal(format!(
                "{}: {} damaged or missing objects",
                i.location,
                i.report.problems.len()
            )));
        }
        print!("{}", repair_run(&a.run, &i.location, &i.report).await?);
        Ok(Exit::Done)
    })
}

fn release(a: &Args) -> Result<Exit, RunError> {
    if a.repair {
        return Err(RunError::Config(format!(
            "{}: a release is not repaired: release the run again (or `vidcurate takedown` for a video removed on purpose)",
            a.run.display()
        )));
    }
    let (checked, found) =
        crate::release::integrity::check(&a.run).map_err(|e| RunError::Config(e.to_string()))?;
    for e in &found {
        println!("{e}");
    }
    if found.is_empty() {
        println!(
            "{}: {checked} files as released (sha256 as croissant.json lists them)",
            a.run.display()
        );
        return Ok(Exit::Done);
    }
    Err(RunError::Internal(format!(
        "{}: {} of {checked} files changed or missing since release",
        a.run.display(),
        found.len()
    )))
}
