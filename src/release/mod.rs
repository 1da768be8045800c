//! What a written release folder is held to after `vidcurate release` made it: `integrity`
//! checks its files against the SHA-256 checksums `croissant.json` lists, and refreshes them
//! after a command that edits a release on purpose (a takedown); `harness` writes the release
//! as the evaluation harnesses' tasks and datasets; `split_files` says which split a released
//! file holds.

pub mod availability;
pub mod build;
pub mod harness;
pub mod integrity;
pub mod rehydrate;
pub mod split;
pub mod split_files;

use crate::error::RunError;
use std::path::Path;

/// The error of an I/O operation on `path`, naming it.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |e| RunError::io(path.display().to_string(), e)
}

/// A Parquet file's schema and rows (the schema too, so a file with no rows keeps its columns).
pub fn read_parquet(
    path: &Path,
) -> Result<(arrow::datatypes::SchemaRef, Vec<arrow::array::RecordBatch>), RunError> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let data = bytes::Bytes::from(std::fs::read(path).map_err(io(path))?);
    let bad = |e: &dyn std::fmt::Display| {
        RunError::Config(format!(
            "{}: not a readable Parquet file: {e}",
            path.display()
        ))
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(data).map_err(|e| bad(&e))?;
    let schema = builder.schema().clone();
    let batches = builder
        .build()
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    Ok((schema, batches))
}
