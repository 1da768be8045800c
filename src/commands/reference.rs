//! `vidcurate reference`: writes the book's generated reference pages (report::reference).

use crate::error::{Exit, RunError};
use std::path::PathBuf;

/// Write the book's reference pages that the code knows: every command's help, the pipeline
/// file's keys, the source and stage types. Run it after changing a command or a stage type;
/// the test suite fails while the checked-in pages differ from what it writes.
#[derive(clap::Args)]
pub struct Args {
    /// The book's reference folder.
    #[arg(long, default_value = "docs/src/reference")]
    pub out: PathBuf,
}

/// `cli` is the binary's whole command line, which only the binary knows.
pub fn run(a: Args, cli: &clap::Command) -> Result<Exit, RunError> {
    for page in crate::report::reference::pages(cli) {
        let path = a.out.join(page.file);
        std::fs::write(&path, page.text)
            .map_err(|e| RunError::at(path.display().to_string(), e))?;
        println!("wrote {}", path.display());
    }
    Ok(Exit::Done)
}
