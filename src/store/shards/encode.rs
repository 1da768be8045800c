//! Encoding shards: a batch of rows with `video_id`, the extra columns and the fingerprint
//! (`build_batch`), and Parquet bytes with the footer that makes a shard a commit
//! (`encode_parquet`): its videos, what each was computed from, its rejects and objects, and
//! the BLAKE3 of its rows' bytes.
//!
//! Reads and writes nothing (bytes in memory). Called by `write` (slots, rejects shards),
//! `compact` (a shard written again without its retired videos) and the commands that write
//! tables of their own (`encode_table`).

use super::{
    META_COMMIT, META_FINGERPRINT, META_INPUTS, META_REJECT_ROWS, META_REJECTED, META_REJECTS_FILE,
};
use crate::error::RunError;
use crate::record::{COL_FINGERPRINT, COL_VIDEO_ID, Extras, META_STAGE, META_VIDEOS, Stamp};
use crate::store::commits::{META_OBJECTS, ObjectSum};
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde::Serialize;
use std::sync::Arc;

/// `video_id`, the extra columns, the row's own columns, then `stage_fingerprint`.
pub(super) fn build_batch<R: Serialize>(
    fields: &[FieldRef],
    rows: &[R],
    ids: &[String],
    extra: &[Vec<Option<String>>],
    extras: &Extras,
    fingerprint: &str,
) -> Result<RecordBatch, RunError> {
    let inner = serde_arrow::to_record_batch(fields, &rows)
        .map_err(|e| RunError::Internal(format!("encoding rows: {e}")))?;
    let mut schema_fields: Vec<FieldRef> =
        vec![Arc::new(Field::new(COL_VIDEO_ID, DataType::Utf8, false))];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(ids.iter()))];
    for (i, name) in extras.iter().enumerate() {
        schema_fields.push(Arc::new(Field::new(name, DataType::Utf8, true)));
        columns.push(Arc::new(StringArray::from_iter(
            extra.iter().map(|e| e.get(i).cloned().flatten()),
        )));
    }
    for (f, c) in inner.schema().fields().iter().zip(inner.columns()) {
        schema_fields.push(f.clone());
        columns.push(c.clone());
    }
    schema_fields.push(Arc::new(Field::new(COL_FINGERPRINT, DataType::Utf8, false)));
    columns.push(Arc::new(StringArray::from_iter_values(
        std::iter::repeat_n(fingerprint, ids.len()),
    )));
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)
        .map_err(|e| RunError::Internal(format!("building batch: {e}")))
}

/// What a shard's footer says besides its rows.
pub(super) struct Footer<'a> {
    /// Videos this shard completes (with rows or without).
    pub(super) videos: &'a [String],
    /// What each video of `videos`, then of `rejected`, was computed from.
    pub(super) stamps: Vec<Option<Stamp>>,
    /// Videos this commit rejects (their rows are in `rejects_file`).
    pub(super) rejected: &'a [String],
    pub(super) rejects_file: Option<&'a str>,
    /// `FooterRejects` as JSON.
    pub(super) reject_rows: Option<&'a str>,
    /// The objects the commit depends on.
    pub(super) objects: &'a [ObjectSum],
    /// A new commit id (slots, and slots written again; not rejects shards, whose bytes must be
    /// the same whoever writes them).
    pub(super) commit: bool,
}

/// A new commit id: unique per commit, not derived from its content (two commits of the same
/// rows, at the same path after settings went back, are still two).
fn new_commit_id() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = format!("{now}:{}:{n}", std::process::id());
    blake3::hash(seed.as_bytes()).to_hex()[..16].to_string()
}

pub(super) fn encode_parquet(
    batch: &RecordBatch,
    footer: &Footer<'_>,
    stage: &str,
    fingerprint: &str,
) -> Result<Vec<u8>, RunError> {
    let mut meta = vec![
        KeyValue::new(
            META_VIDEOS.to_string(),
            serde_json::to_string(footer.videos).unwrap_or_default(),
        ),
        KeyValue::new(META_STAGE.to_string(), stage.to_string()),
        KeyValue::new(META_FINGERPRINT.to_string(), fingerprint.to_string()),
    ];
    if footer.commit {
        meta.push(KeyValue::new(META_COMMIT.to_string(), new_commit_id()));
    }
    if footer.stamps.iter().any(Option::is_some) {
        let hex: Vec<String> = footer
            .stamps
            .iter()
            .map(|s| s.map(Stamp::to_hex).unwrap_or_default())
            .collect();
        meta.push(KeyValue::new(
            META_INPUTS.to_string(),
            serde_json::to_string(&hex).unwrap_or_default(),
        ));
    }
    if !footer.rejected.is_empty() {
        meta.push(KeyValue::new(
            META_REJECTED.to_string(),
            serde_json::to_string(footer.rejected).unwrap_or_default(),
        ));
    }
    if let Some(f) = footer.rejects_file {
        meta.push(KeyValue::new(META_REJECTS_FILE.to_string(), f.to_string()));
    }
    if let Some(r) = footer.reject_rows {
        meta.push(KeyValue::new(META_REJECT_ROWS.to_string(), r.to_string()));
    }
    if !footer.objects.is_empty() {
        meta.push(KeyValue::new(
            META_OBJECTS.to_string(),
            serde_json::to_string(footer.objects).unwrap_or_default(),
        ));
    }
    parquet_bytes(batch, Some(meta))
}

/// One batch as Snappy-compressed Parquet, with footer metadata when given.
fn parquet_bytes(batch: &RecordBatch, meta: Option<Vec<KeyValue>>) -> Result<Vec<u8>, RunError> {
    let _step = crate::profile::span("parquet");
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata(meta)
        .build();
    let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props))
        .map_err(|e| RunError::Internal(format!("parquet writer: {e}")))?;
    w.write(batch)
        .map_err(|e| RunError::Internal(format!("parquet write: {e}")))?;
    // The rows are all written before the footer: the footer records their BLAKE3, so every
    // reader can tell a changed byte from a value.
    w.flush()
        .map_err(|e| RunError::Internal(format!("parquet write: {e}")))?;
    // Out of the writer's buffer into the Vec, so `inner` holds every byte before the footer.
    w.sync()
        .map_err(|e| RunError::Internal(format!("parquet write: {e}")))?;
    let sum = crate::store::commits::data_sum(w.inner());
    w.append_key_value_metadata(KeyValue::new(
        crate::store::commits::META_DATA.to_string(),
        sum,
    ));
    w.into_inner()
        .map_err(|e| RunError::Internal(format!("parquet close: {e}")))
}

/// A table that is not a stage shard (a selection, an analysis table) as Parquet bytes, for
/// `Store::put`, which writes atomically like every shard.
pub fn encode_table(batch: &RecordBatch) -> Result<Vec<u8>, RunError> {
    parquet_bytes(batch, None)
}
