//! `vidcurate analyze`: parses, runs `report::analyze::analyze` and prints what it wrote.

use crate::error::RunError;
use crate::report::analyze::analyze;
use crate::store::filter;
use std::path::PathBuf;

/// Reproduce the papers' analyses of on-screen text from a run's Parquet, grouped by a column.
///
/// Writes, for each group of COLUMN (e.g. label = fake/real), the hue distribution of
/// creator-added text pixels (pixel- and region-weighted), saturation, value, position on a
/// grid, area, aspect ratio, text over 8 time segments and shots per video, each as Parquet and
/// CSV, and `stats` (KS / chi-square with n, p and effect size) comparing the first two groups.
#[derive(clap::Args)]
pub struct Args {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Column to group by (any source column carried through, e.g. `label`).
    #[arg(long)]
    pub by: String,
    /// Output folder [default: RUN_DIR/analysis/<by>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only rows passing this SQL condition, as in a WHERE clause, e.g.
    /// `domain = 'demo-news' and score >= 0.8` or `language in ('en', 'fr')`: and, or, not,
    /// = != <> < <= > >=, in, between, like, ilike, is [not] null, + - * / %; text in single
    /// quotes.
    #[arg(long = "where", value_name = "EXPR")]
    pub filter: Option<String>,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    // A filter that does not parse is invalid input, like any other bad argument.
    let filter = a.filter.as_deref().map(filter::Filter::parse).transpose()?;
    let r = analyze(&a.run_dir, &a.by, a.out.as_deref(), filter.as_ref())?;
    println!("groups: {}", r.groups.join(", "));
    for (name, rows) in &r.tables {
        println!("{name}: {} rows", rows.len());
    }
    for s in &r.stats {
        println!("{}", s.cells().join("  "));
    }
    println!("tables: {}", r.out_dir.display());
    Ok(crate::error::Exit::Done)
}
