//! `vidcurate validate`: plan each pipeline file (keys, types, stage order, paths) and say what
//! it would run, without running it.

use crate::error::{Exit, RunError};
use std::path::PathBuf;

/// Check a pipeline file without running it: keys, types, stage order, paths.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline file(s) (TOML).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    let mut bad = 0;
    for f in &a.files {
        match crate::plan::load(f) {
            Ok(p) => {
                let chain: Vec<String> = p
                    .stages
                    .iter()
                    .map(|s| format!("{} ({})", s.id, s.kind))
                    .collect();
                println!(
                    "{}: ok: source {} -> {}",
                    f.display(),
                    p.source_kind,
                    chain.join(" -> ")
                );
            }
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
            }
        }
    }
    Ok(if bad == 0 { Exit::Done } else { Exit::Invalid })
}

/// The source and stage types a pipeline file can use.
pub fn list_stages() -> Result<Exit, RunError> {
    // One column for both lists, as wide as the longest name (at least 10, as it always was).
    let names = crate::stages::SOURCE_KINDS
        .iter()
        .map(|k| k.name)
        .chain(crate::stages::STAGE_KINDS.iter().map(|k| k.name));
    let w = names.map(str::len).max().unwrap_or(0).max(10);
    println!("sources ([source] type = ...):");
    for k in crate::stages::SOURCE_KINDS {
        let (t, d) = (k.name, k.about);
        println!("  {t:<w$} {d}");
    }
    println!("stages ([[stages]] type = ...):");
    for k in crate::stages::STAGE_KINDS {
        let (t, d) = (k.name, k.about);
        println!("  {t:<w$} {d}");
    }
    Ok(Exit::Done)
}
