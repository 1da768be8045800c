//! The columns of a stage table, from the footer of one of its shards, so that `--where` can be
//! checked against all of them before a long read that decodes only a few (`analyze` projects
//! each shard to the columns it needs, and a batch of those would hide the rest from the error).
//!
//! Reads the listing of the stage's folder and the first shard written under `fingerprint`;
//! writes and caches nothing.

use crate::error::RunError;
use crate::store::Store;
use crate::store::shards::{META_FINGERPRINT, footer_value, get_unless_moved};
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::sync::Arc;

/// The Arrow schema of stage `stage_id`'s table under `fingerprint`; None when it has no shard
/// yet (nothing to filter, so nothing to check).
pub async fn table_schema(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
) -> Result<Option<SchemaRef>, RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let mut paths = store.list(stage_id).await.map_err(|e| io(stage_id, e))?;
    paths.retain(|p| p.ends_with(".parquet"));
    paths.sort();
    for path in paths {
        // A shard set aside by another worker between the listing and here is skipped.
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(data))
            .map_err(|e| RunError::Internal(format!("{path}: unreadable shard: {e}")))?;
        let written_under = footer_value(builder.metadata(), META_FINGERPRINT);
        if written_under.as_deref() == Some(fingerprint) {
            return Ok(Some(builder.schema().clone()));
        }
    }
    Ok(None)
}
