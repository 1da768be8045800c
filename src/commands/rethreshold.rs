//! `vidcurate rethreshold`: parses, runs `stages::rethreshold` and prints both funnels.

use crate::error::RunError;
use crate::stages::rethreshold::{Override, render, rethreshold};

/// Re-apply the scoring stages' thresholds to stored scores, with no model call.
///
/// Prints the funnel (videos in / done / rejected / pending / out per stage) under the
/// pipeline's own `select` settings and under the new ones, and writes both selections to
/// RUN_DIR/selections/ (video_id, kept per stage, selected). `pending` videos passed a lowered
/// threshold upstream but were never scored downstream: rerun the pipeline with the new
/// thresholds to score them.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory (with manifest.json).
    pub run_dir: std::path::PathBuf,
    /// STAGE.KEY=VALUE, e.g. relevance.min_score=8, quality.min_twos=9,
    /// committee.rule=entropy, committee.min_entropy=0.9, kep.min_score=3 (an items stage:
    /// its drafted items decided again from their stored rounds) (repeatable).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<Override>,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let r = crate::runtime::tokio_runtime()?.block_on(rethreshold(&a.run_dir, &a.set))?;
    println!("funnel with the pipeline's thresholds:");
    print!("{}", render(&r.before));
    println!("funnel with the new thresholds:");
    print!("{}", render(&r.after));
    println!("selection: {}", r.selection_file.display());
    if !r.items.is_empty() {
        println!("items with the new thresholds (no video is dropped by an items stage):");
        print!("{}", crate::stages::items::table::render(&r.items));
        println!(
            "item decisions: {}",
            r.selection_file.with_extension("items.parquet").display()
        );
    }
    if r.after.iter().any(|f| f.pending > 0) {
        println!(
            "pending videos were never scored by that stage: run the pipeline with the new select settings to score them"
        );
    }
    Ok(crate::error::Exit::Done)
}
