//! Parquet shards: a stage's rows and rejects, written in atomic parts, read back on resume.
//!
//! Every shard carries in its footer the ids of the videos it completes, the stage id and the
//! fingerprint. A video is done for a stage exactly when a shard naming it exists, whether it had
//! rows (a video with no text regions has none), or a reject. Rows of one video never straddle two
//! shards, so a crash loses whole videos, never part of one, and never duplicates one.
//!
//! `write` commits a stage's shards (`ShardWriter`), `read` reads tables back (`read_table`,
//! `TableView`, `decode_parquet`), `prior` is what a resume finds done (`load_prior`, `Prior`).
//! This file holds the footer keys and folder names they share, and re-exports their public items.

pub mod compact;
mod encode;
pub mod held;
mod prior;
mod read;
pub mod retired;
mod write;

#[cfg(test)]
mod tests;

pub use encode::encode_table;
pub use prior::{Prior, load_prior, peek_prior};
pub use read::{
    DAMAGE_HINT, DecodeError, TableView, decode_parquet, footer_value, for_each_batch,
    get_unless_moved, project_columns, read_new_slots, read_table, read_table_columns, settled_in,
    stage_files, stored_extras, table_batches, text_column,
};
pub use write::{ShardWriter, Slots};

use crate::error::RunError;
use arrow::datatypes::FieldRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_arrow::schema::{SchemaLike, TracingOptions};

pub const META_FINGERPRINT: &str = "vidcurate.fingerprint";
/// Videos a shard's commit rejects (JSON list of ids).
pub const META_REJECTED: &str = "vidcurate.rejected";
/// The rejects shard a commit adopts (its other reject attempts are garbage).
pub const META_REJECTS_FILE: &str = "vidcurate.rejects_file";
/// The slot's reject rows themselves (JSON): the slot is the commit, so whoever finds its
/// rejects shard missing (a crash right after the commit) writes it again from these.
pub const META_REJECT_ROWS: &str = "vidcurate.reject_rows";
/// What each settled video's stage read (`record::Stamp` as hex, "" when unknown), aligned with
/// the videos then the rejected videos of the footer.
pub const META_INPUTS: &str = "vidcurate.inputs";
/// A slot's commit id, unique to each commit (also of a slot written again by compaction, or a
/// slot number taken again after settings changed): what a tombstone names with the path.
pub const META_COMMIT: &str = "vidcurate.commit";
pub const REJECTS_DIR: &str = "rejects";
/// The folder of held copies (`held`), in a table's folder and in `rejects/`.
pub const HELD_DIR: &str = "_held";

/// Whether a shard path is a held copy (`held`).
pub fn is_held(path: &str) -> bool {
    path.split('/').any(|p| p == HELD_DIR)
}
pub const SUPERSEDED_DIR: &str = "_superseded";

/// One row of the rejects table.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RejectRow {
    pub stage: String,
    pub reason: String,
    pub detail: String,
    pub error_kind: String,
    pub rejected_at: String,
}

/// The columns of `T`, as serde_arrow traces them.
pub fn fields_of<T: Serialize + DeserializeOwned>() -> Result<Vec<FieldRef>, RunError> {
    Vec::<FieldRef>::from_type::<T>(TracingOptions::default().allow_null_fields(true))
        .map_err(|e| RunError::Internal(format!("row schema: {e}")))
}

/// A writer of stage `probe` under fingerprint `fp`, taking slots `prefix` from the first (for
/// the tests here and in `stages::selection`).
#[cfg(test)]
pub(crate) async fn shard_writer<R: Serialize + DeserializeOwned + Send + 'static>(
    store: std::sync::Arc<dyn crate::store::Store>,
    fp: &str,
    prefix: &str,
    max_rows: usize,
    flush_every: std::time::Duration,
) -> ShardWriter<R> {
    let slots = Slots { prefix, next: 0 };
    ShardWriter::open(
        store,
        "probe",
        fp,
        std::sync::Arc::new(vec![]),
        slots,
        max_rows,
        flush_every,
    )
    .await
    .unwrap()
}
