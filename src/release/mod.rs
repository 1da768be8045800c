//! What a written release folder is held to after `vidcurate release` made it: `integrity`
//! checks its files against the SHA-256 checksums `croissant.json` lists, and refreshes them
//! after a command that edits a release on purpose (a takedown); `harness` writes the release
//! as the evaluation harnesses' tasks and datasets; `split_files` says which split a released
//! file holds. `first_values` reads one column of a run's stage table, for the manifest and
//! the split's strata; `check_folder` is the commands' check that a folder is a release.

pub mod availability;
pub mod build;
pub mod harness;
pub mod integrity;
pub mod rehydrate;
pub mod split;
pub mod split_files;
pub mod versions;

use crate::error::RunError;
use crate::store::manifest::ManifestStage;
use crate::store::shards::{read_table_columns, text_column};
use arrow::array::Array;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Err unless `release` looks like a release folder (has a `data/` folder), before a command
/// reads or edits it.
pub fn check_folder(release: &Path) -> Result<(), RunError> {
    if release.join("data").is_dir() {
        return Ok(());
    }
    Err(RunError::Config(format!(
        "{}: not a release folder (expected data/*.parquet from `vidcurate release --out`)",
        release.display()
    )))
}

/// Each video's first non-null value of `column` (as text) in stage `st`'s table; None when no
/// shard has both `video_id` and `column` as text. Only those two columns are decoded (a source
/// table holds titles and descriptions a caller never looks at).
pub(crate) async fn first_values(
    store: &Arc<dyn crate::store::Store>,
    st: &ManifestStage,
    column: &str,
) -> Result<Option<HashMap<String, String>>, RunError> {
    let view = read_table_columns(store, &st.id, &st.fingerprint, &["video_id", column]).await?;
    let mut out = None;
    for b in &view.batches {
        let (Some(ids), Some(col)) = (text_column(b, "video_id"), text_column(b, column)) else {
            continue;
        };
        let values = out.get_or_insert_with(HashMap::new);
        for i in 0..b.num_rows() {
            if !col.is_null(i) {
                values
                    .entry(ids.value(i).to_string())
                    .or_insert_with(|| col.value(i).to_string());
            }
        }
    }
    Ok(out)
}

/// A Parquet file's schema and rows (the schema too, so a file with no rows keeps its columns).
pub fn read_parquet(
    path: &Path,
) -> Result<(arrow::datatypes::SchemaRef, Vec<arrow::array::RecordBatch>), RunError> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let data = bytes::Bytes::from(std::fs::read(path).map_err(crate::error::io(path))?);
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
