//! `vidcurate takedown RELEASE ID… [--reason TEXT]`: removes videos from a release folder on
//! request (an uploader's, a licence's), everywhere, and records the removal. The work is
//! `release::availability::takedown`; this file reads the flags and prints.
//!
//! Reads and rewrites: every Parquet file of the release with a `video_id` column (data,
//! perturbations, questions, tasks, `manifest.parquet`), TSV and JSONL exports, `frames/<id>/`,
//! `README.md` (split sizes in the YAML, a "Removals" section), `takedowns.jsonl`,
//! `croissant.json`'s checksums. Calls nothing.

use crate::error::{Exit, RunError};
use crate::release::availability;
use std::path::PathBuf;

/// Remove videos from a release folder: their rows in every Parquet file (data, perturbations,
/// questions, task items, the manifest), their lines in the harness exports, their frames
/// folder; the card's split sizes are recounted, the removal (id, date, reason) is added to
/// the card's "Removals" section and to takedowns.jsonl, and croissant.json's checksums are
/// refreshed so the folder verifies again. Harness exports (`release --harness`) are written
/// again from the items left, so no lmms-eval task is left without documents.
///
/// Safe to repeat and to interrupt: nothing is written until every new file is computed, each
/// file is replaced whole (written beside it, then renamed), and running the same takedown
/// again finishes one that was cut short without recording it twice. File names stay as they
/// were, so the `datasets` configs keep loading.
///
/// Exit codes: 0 removed (or already removed); 2 bad input: an ID the release does not hold
/// (named; nothing is changed), a folder that is not a release.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate takedown data/releases/demo yt_dQw4w9WgXcQ --reason \"uploader's request, 2026-12-01\"\n  vidcurate takedown data/releases/demo a b c   # several at once\n\nAfter a takedown, publish the folder again (the Hub keeps the old files in its history: ask it to remove them too)."
)]
pub struct Args {
    /// The release folder (`vidcurate release --out`).
    pub release: PathBuf,
    /// The video ids to remove (the `video_id` column).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Why, for the card and takedowns.jsonl (say whose request it was, not their contact).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    crate::release::check_folder(&a.release)?;
    // A takedown is owed whatever else happened to the folder, so a failed check does not stop
    // it; but the refreshed checksums will cover that change too, so say so first.
    if let Err(e) = crate::release::integrity::verify(&a.release) {
        tracing::warn!(
            %e,
            "The release folder is not as released; the takedown goes on and croissant.json will list the files as they are."
        );
    }
    let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let r = availability::takedown(&a.release, &a.ids, a.reason.as_deref(), &date)?;
    for id in &r.recorded {
        println!("removed  {id}");
    }
    for id in &r.already {
        println!("already  {id} (recorded by an earlier takedown; files checked again)");
    }
    println!(
        "{} rows removed; {} files rewritten ({}), {} frames folders deleted; {} and croissant.json's checksums updated",
        r.rows_removed,
        r.rewritten.len(),
        r.rewritten.join(", "),
        r.frame_folders_removed,
        availability::TAKEDOWNS_FILE
    );
    for h in &r.harness_written {
        println!("rewrote  {} from the items left", h.folder());
    }
    for h in &r.harness_removed {
        println!("removed  {}: no item is left to export", h.folder());
    }
    Ok(Exit::Done)
}
