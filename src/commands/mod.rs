//! One module per subcommand: its arguments (clap), what it does, and how it prints. Each
//! `run` returns how it ended (`Exit`) or a typed error; `main.rs` only dispatches and maps
//! both to exit codes, in one table.
pub mod analyze;
pub mod annotate;
pub mod batch;
pub mod cache;
pub mod evaluate;
pub mod gc;
pub mod harness;
pub mod items;
pub mod ocr;
pub mod overlap;
pub mod queries;
pub mod questions;
pub mod rehydrate;
pub mod release;
pub mod rethreshold;
pub mod run;
pub mod split;
pub mod status;
pub mod takedown;
pub mod tasks;
pub mod validate;
pub mod verify;

use crate::error::RunError;

/// The one tokio runtime a command's async work runs on.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::at("starting the runtime", e))
}

/// The fingerprint a run's source table was written under (the current one when the manifest
/// predates it): what a command reads that table with.
pub(crate) fn source_fingerprint(m: &crate::store::manifest::Manifest) -> String {
    use crate::runtime::chain::{SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
    m.stages
        .iter()
        .find(|s| s.id == SOURCE_STAGE_ID)
        .map(|s| s.fingerprint.clone())
        .unwrap_or_else(|| SOURCE_FINGERPRINT.to_string())
}
