//! `vidcurate split`: parses, runs `release::split::split` and prints the counts.

use crate::error::RunError;
use crate::release::split::{SplitOptions, split};

/// Split the videos the pipeline selected into train/validation/test, at video level.
///
/// Deterministic for a seed; stratified so every split has each stratum's share (e.g. of
/// fake and real); grouped so the videos of one channel (or event, or near-duplicate
/// cluster) never sit in two splits. Reads the run's tables under the pipeline's own
/// thresholds (no model call); writes RUN_DIR/splits/NAME.parquet (video_id, split, stratum,
/// group) and NAME.json (counts per split and stratum, the largest deviation), and prints
/// the counts.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate split data/runs/riskcue-protest --stratify label --group channel_id\n  vidcurate split data/runs/x --ratios 80/20 --names train,test --stratify domain,label --seed 7\n  vidcurate split data/runs/fakesv --from-column split            (the dataset's own splits)\n  vidcurate split data/runs/fakesv --stratify label,category --balanced-test 60   (MVFNDB's category-test-split)"
)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …).
    pub run_dir: std::path::PathBuf,
    #[command(flatten)]
    pub opts: SplitOptions,
}

pub fn run(mut a: Args) -> Result<crate::error::Exit, RunError> {
    a.opts.command = Some(command_line());
    let r = crate::runtime::tokio_runtime()?.block_on(split(&a.run_dir, &a.opts))?;
    print!("{}", r.render());
    println!("split: {}", r.file);
    Ok(crate::error::Exit::Done)
}

/// This invocation as a user would type it again (`vidcurate`, then the arguments, quoted for a
/// POSIX shell where they need it).
fn command_line() -> String {
    let quote = |a: String| {
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-./=,:@%+/".contains(&b));
        if plain {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    std::iter::once("vidcurate".to_string())
        .chain(std::env::args().skip(1).map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}
