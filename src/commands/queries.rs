//! `vidcurate queries`: expand query files into the search queries a YouTube source would send.

use crate::config::queries::QueryFile;
use crate::error::{Exit, RunError};
use std::path::PathBuf;

/// Expand a query file (queries/*.toml) and print every search query with its parameters.
///
/// One line per query: the text sent as `q`, then its search parameters; the count last.
/// Nothing is sent to YouTube.
#[derive(clap::Args)]
pub struct Args {
    /// The query file(s).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// One JSON object per query instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<Exit, RunError> {
    for f in &a.files {
        let (qf, _) = QueryFile::load(f)?;
        let qs = qf.expand();
        for q in &qs {
            if a.json {
                println!("{}", serde_json::to_string(q).expect("a query serialises"));
            } else {
                let params: Vec<String> =
                    q.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                if params.is_empty() {
                    println!("{}", q.text);
                } else {
                    println!("{}\t[{}]", q.text, params.join(" "));
                }
            }
        }
        eprintln!(
            "{}: {} queries (domain {}, {})",
            f.display(),
            qs.len(),
            qf.domain,
            qf.kind
        );
    }
    Ok(Exit::Done)
}
