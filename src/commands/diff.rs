//! `vidcurate diff OLD NEW`: parses, compares two release folders with
//! `release::versions::between` and prints the change table a release records in CHANGES.md and
//! its `changes` config.

use crate::error::{Exit, RunError};
use crate::release::versions::{Snapshot, between, bump, render};
use std::path::PathBuf;

/// What changed from one release to another: videos added, removed, taken down, moved between
/// splits or relabelled, and items added, removed or redrafted (any value of the item's row
/// but its split differs), one line each after a summary, with the version the change calls
/// for (only additions: minor; anything else: major).
///
/// Exit codes: 0 printed (whether or not anything changed); 2 a folder that is not a release.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate diff data/releases/demo-v1 data/releases/demo-v2\n  vidcurate diff old/ new/ | grep relabelled"
)]
pub struct Args {
    /// The earlier release folder.
    pub old: PathBuf,
    /// The later release folder.
    pub new: PathBuf,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let (old, new) = (Snapshot::read(&a.old)?, Snapshot::read(&a.new)?);
    let changes = between(&old, &new);
    let name =
        |s: &Snapshot, p: &PathBuf| s.version.clone().unwrap_or_else(|| p.display().to_string());
    print!(
        "{}",
        render(&name(&old, &a.old), &name(&new, &a.new), &changes)
    );
    if let Some(v) = &old.version {
        println!(
            "a release with these changes after {v} is {}",
            bump(v, &changes)
        );
    }
    Ok(Exit::Done)
}
