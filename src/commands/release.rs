//! `vidcurate release`: parses, runs `release::build::release` and prints the splits it wrote.

use crate::error::RunError;
use crate::release::build::{ReleaseOptions, release};

/// Write a split run as a dataset folder: Parquet files per split, frames, perturbations
/// and a dataset card, loadable with `datasets.load_dataset(DIR)`, pyarrow, DuckDB, Polars.
///
/// One row per selected video: ids, the source's metadata and manifest columns, every
/// one-row-per-video stage's columns (`<stage>_<column>`: scores, votes, probe), the frames
/// (files or image bytes), the OCR text, the split. `perturbations/` gives each video's frame
/// order for the variants of RiskCue §3.4. README.md is the card: YAML for `datasets`
/// (configs, features, split sizes), the funnel, the settings, licence notes, provenance.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate split data/runs/demo --stratify label\n  vidcurate release data/runs/demo --out data/releases/demo\n  vidcurate release data/runs/demo --out /tmp/demo-hf --frames bytes --split default\n  vidcurate release data/runs/q --out data/releases/q --harness lmms-eval --harness vlmevalkit"
)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …).
    pub run_dir: std::path::PathBuf,
    #[command(flatten)]
    pub opts: ReleaseOptions,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let r = crate::runtime::tokio_runtime()?.block_on(release(&a.run_dir, &a.opts))?;
    for (split, n) in &r.splits {
        println!("{split:<12} {n:>8} videos");
    }
    println!("version {}", r.version);
    println!(
        "{} files, {} columns; card: {}",
        r.files,
        r.columns.len(),
        r.out.join("README.md").display()
    );
    if r.left_out > 0 {
        println!(
            "left out: {} videos of split `{}` that the run no longer selects (removed, changed or filtered since the split was made): make the split again to rebalance (`vidcurate status` prints the command)",
            r.left_out, a.opts.split
        );
    }
    Ok(crate::error::Exit::Done)
}
