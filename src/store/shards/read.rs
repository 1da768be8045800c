//! Reading shards back: one shard's footer and rows (`decode_parquet`), a stage's shard files,
//! and whole tables for readers that leave the run directory alone (`read_table`,
//! `read_new_slots`, `TableView`, `table_batches`).
//!
//! Reads: `<stage>/*.parquet` and `rejects/` through the `Store`. Writes nothing. Called by
//! `prior` (resume), `write` (catching up after a lost slot), the collected source, and the
//! commands that read tables (rethreshold, analyze, split, release, annotate).

use super::retired::Retired;
use super::{
    META_COMMIT, META_FINGERPRINT, META_INPUTS, META_REJECT_ROWS, META_REJECTED, META_REJECTS_FILE,
    REJECTS_DIR, fields_of,
};
use crate::error::RunError;
use crate::record::{COL_VIDEO_ID, META_VIDEOS, Stamp};
use crate::store::Store;
use crate::store::commits::{META_DATA, META_OBJECTS, ObjectSum, check_data};
use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, FieldRef};
use parquet::arrow::arrow_reader::{ArrowReaderBuilder, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Appended to a reader's error about a shard it cannot use.
pub const DAMAGE_HINT: &str = " (`vidcurate verify RUN` lists what is damaged and what depends on it; `--repair` sets it aside, and the next run computes its videos again)";

/// A shard read back: its footer and its batches.
pub struct ShardContents {
    pub videos: Vec<String>,
    /// Videos the shard's commit rejects (new-format shards; empty in reject shards).
    pub rejected: Vec<String>,
    /// The rejects shard this commit adopted.
    pub rejects_file: Option<String>,
    /// The reject rows the commit carries (JSON), in slots written since they do.
    pub(super) reject_rows: Option<String>,
    /// What each of `videos`, then of `rejected`, was computed from (empty in older shards).
    pub stamps: Vec<Option<Stamp>>,
    pub fingerprint: Option<String>,
    /// Objects the commit depends on, with their sizes and BLAKE3 (`commits::META_OBJECTS`).
    pub objects: Vec<ObjectSum>,
    pub batches: Vec<RecordBatch>,
    /// The rows' schema (what a shard rewritten without some videos keeps).
    pub schema: arrow::datatypes::SchemaRef,
    /// The commit's own id (`vidcurate.commit`; in shards older than it, the BLAKE3 of the rows'
    /// bytes, or ""): with the path, what a tombstone names (`retired`).
    pub commit_id: String,
}

/// Why a shard's bytes do not decode: the Parquet or Arrow reader's own message, as is.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The footer parses but the bytes it covers are not the committed ones.
    #[error("damaged: {0}")]
    Damaged(String),
}

/// A shard's footer (and with `with_rows` its rows), after checking its bytes against the BLAKE3
/// its footer recorded at commit: a changed byte is an error here, never a wrong value in a table.
pub fn decode_parquet(data: Vec<u8>, with_rows: bool) -> Result<ShardContents, DecodeError> {
    decode_projected(data, with_rows.then_some(Rows::All))
}

/// Which columns of a shard's rows to decode.
#[derive(Clone, Copy)]
enum Rows<'a> {
    All,
    /// These top-level columns, those the shard has, in the shard's order.
    Only(&'a [&'a str]),
}

fn decode_projected(data: Vec<u8>, rows: Option<Rows>) -> Result<ShardContents, DecodeError> {
    let data = bytes::Bytes::from(data);
    let builder = ParquetRecordBatchReaderBuilder::try_new(data.clone())?;
    let get = |k: &str| footer_value(builder.metadata(), k);
    let list = |k: &str| -> Vec<String> {
        get(k)
            .and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default()
    };
    let (videos, rejected) = (list(META_VIDEOS), list(META_REJECTED));
    let stamps = list(META_INPUTS)
        .iter()
        .map(|h| Stamp::from_hex(h))
        .collect();
    let rejects_file = get(META_REJECTS_FILE);
    let reject_rows = get(META_REJECT_ROWS);
    let fingerprint = get(META_FINGERPRINT);
    if let Some(why) = get(META_DATA).and_then(|sum| check_data(&data, &sum)) {
        return Err(DecodeError::Damaged(why));
    }
    let commit_id = get(META_COMMIT)
        .or_else(|| get(META_DATA))
        .unwrap_or_default();
    let objects = get(META_OBJECTS)
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default();
    let schema = builder.schema().clone();
    let mut batches = vec![];
    if let Some(rows) = rows {
        let builder = match rows {
            Rows::All => builder,
            Rows::Only(names) => project_columns(builder, |n| names.contains(&n)),
        };
        let reader = builder.build()?;
        for b in reader {
            batches.push(b?);
        }
    }
    Ok(ShardContents {
        videos,
        rejected,
        rejects_file,
        reject_rows,
        stamps,
        fingerprint,
        objects,
        batches,
        schema,
        commit_id,
    })
}

/// The Parquet files that settle a stage's videos: its shards (false) and the reject shards of
/// earlier versions (true), which were written whole under their final name and settle their
/// videos themselves. A slot's rejects shard (`<stage>-slot-…`) is not listed: the slot's footer
/// names its videos. Also: every file of the rejects folder, to check that a slot's rejects
/// shard was written (a crash can come between the slot and its rejects).
pub async fn stage_files(
    store: &Arc<dyn Store>,
    stage_id: &str,
) -> Result<(Vec<(String, bool)>, HashSet<String>), RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let legacy_rejects = format!("{REJECTS_DIR}/{stage_id}-part-");
    let mut paths: Vec<(String, bool)> = store
        .list(stage_id)
        .await
        .map_err(|e| io(stage_id, e))?
        .into_iter()
        .map(|p| (p, false))
        .collect();
    let rejects: HashSet<String> = store
        .list(REJECTS_DIR)
        .await
        .map_err(|e| io(REJECTS_DIR, e))?
        .into_iter()
        .collect();
    paths.extend(
        rejects
            .iter()
            .filter(|p| {
                p.strip_prefix(&legacy_rejects)
                    .and_then(|rest| rest.strip_suffix(".parquet"))
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|p| (p.clone(), true)),
    );
    paths.retain(|(p, _)| p.ends_with(".parquet"));
    paths.sort();
    Ok((paths, rejects))
}

/// The videos a shard's commit rejected. A slot that carries its reject rows rejects them
/// whether or not its rejects shard is written yet (`restore_rejects` writes it); an older slot
/// whose rejects shard is missing rejects nothing, so a rerun redoes those videos.
pub(super) fn committed_rejects(c: &ShardContents, rejects: &HashSet<String>) -> Vec<String> {
    match &c.rejects_file {
        Some(f) if !rejects.contains(f) && c.reject_rows.is_none() => vec![],
        _ => c.rejected.clone(),
    }
}

/// `batch`'s columns of a row type (`fields`, from `fields_of`), in the type's order.
pub(super) fn project_onto(
    batch: &RecordBatch,
    fields: &[FieldRef],
) -> Result<RecordBatch, RunError> {
    let idx = fields
        .iter()
        .map(|f| batch.schema().index_of(f.name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Internal(e.to_string()))?;
    batch
        .project(&idx)
        .map_err(|e| RunError::Internal(e.to_string()))
}

/// The (shard, its commit id, video) settlements of `ids` in table `stage` that are not
/// retired yet: what the source retires from every table when videos leave it (rare; reads
/// every shard's footer).
pub async fn settled_in(
    store: &dyn Store,
    stage: &str,
    ids: &HashSet<String>,
) -> Result<Vec<(String, String, String)>, RunError> {
    let listed = store
        .list(stage)
        .await
        .map_err(|e| store.io_error(stage, e))?;
    let legacy = format!("{REJECTS_DIR}/{stage}-part-");
    let rejects = store
        .list(REJECTS_DIR)
        .await
        .map_err(|e| store.io_error(REJECTS_DIR, e))?;
    let mut files: Vec<String> = listed
        .into_iter()
        .chain(rejects.into_iter().filter(|p| p.starts_with(&legacy)))
        .filter(|p| p.ends_with(".parquet"))
        .collect();
    files.sort();
    let retired = Retired::load(store, stage).await?;
    let mut out = vec![];
    for path in files {
        let Some(data) = get_unless_moved(store, &path).await? else {
            continue;
        };
        let c = decode_parquet(data, false).map_err(|e| unreadable(&path, e))?;
        for v in c.videos.iter().chain(&c.rejected) {
            if ids.contains(v) && !retired.is_retired(&path, &c.commit_id, v) {
                out.push((path.clone(), c.commit_id.clone(), v.clone()));
            }
        }
    }
    Ok(out)
}

/// The values of the extra columns `names` stored with video `id`'s first row in `shard` (None
/// for a column the shard lacks): what a changed source row is compared against, to name what
/// changed.
pub async fn stored_extras(
    store: &dyn Store,
    shard: &str,
    id: &str,
    names: &[String],
) -> Result<Vec<Option<String>>, RunError> {
    let c = read_shard(store, shard, true).await?;
    for b in &c.batches {
        let Some(ids) = text_column(b, COL_VIDEO_ID) else {
            continue;
        };
        if let Some(row) = (0..b.num_rows()).find(|&i| ids.value(i) == id) {
            return Ok(names
                .iter()
                .map(|n| {
                    let col = text_column(b, n)?;
                    (!arrow::array::Array::is_null(&col, row)).then(|| col.value(row).to_string())
                })
                .collect());
        }
    }
    Ok(vec![None; names.len()])
}

/// The error about a shard whose bytes do not decode; `shown` is the path as the message names it.
fn unreadable(shown: &str, e: DecodeError) -> RunError {
    RunError::Internal(format!("{shown}: unreadable shard: {e}{DAMAGE_HINT}"))
}

/// One shard read and decoded (its rows too with `with_rows`); errors name the file.
pub(super) async fn read_shard(
    store: &dyn Store,
    path: &str,
    with_rows: bool,
) -> Result<ShardContents, RunError> {
    let data = store.get(path).await.map_err(|e| store.io_error(path, e))?;
    decode_parquet(data, with_rows)
        .map_err(|e| unreadable(&format!("{}/{path}", store.location()), e))
}

/// A listed shard's bytes; None when another worker set it aside (superseded settings) between
/// the listing and the read.
pub async fn get_unless_moved(store: &dyn Store, path: &str) -> Result<Option<Vec<u8>>, RunError> {
    match store.get(path).await {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store.io_error(path, e)),
    }
}

/// A stage table read without touching the run directory (for `rethreshold` and `analyze`): the
/// done and rejected videos of `fingerprint`, and the batches of its shards.
#[derive(Default)]
pub struct TableView {
    pub done: HashSet<String>,
    pub rejected: HashSet<String>,
    pub batches: Vec<RecordBatch>,
    /// The rows decoded once into their type (`rows_shared`): a table decided under two sets
    /// of thresholds is decoded once, not twice.
    decoded: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

pub async fn read_table(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    with_rows: bool,
) -> Result<TableView, RunError> {
    read_view(store, stage_id, fingerprint, with_rows.then_some(Rows::All)).await
}

async fn read_view(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    rows: Option<Rows<'_>>,
) -> Result<TableView, RunError> {
    let mut view = TableView::default();
    let (files, rejects) = stage_files(store, stage_id).await?;
    let retired = Retired::load(store.as_ref(), stage_id).await?;
    for (path, is_reject) in files {
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let c = decode_projected(data, rows.filter(|_| !is_reject))
            .map_err(|e| unreadable(&path, e))?;
        if c.fingerprint.as_deref() != Some(fingerprint) {
            continue;
        }
        let sum = c.commit_id.clone();
        if is_reject {
            view.rejected.extend(retired.live(&path, &sum, c.videos));
        } else {
            view.rejected
                .extend(retired.live(&path, &sum, committed_rejects(&c, &rejects)));
            view.batches.extend(retired.filter(&path, &sum, c.batches)?);
            view.done.extend(retired.live(&path, &sum, c.videos));
        }
    }
    Ok(view)
}

/// `read_table` with only the named columns of the rows decoded (those the table has): what a
/// command that aggregates a few columns of a large table reads, at a fraction of the time and
/// memory of every column.
pub async fn read_table_columns(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    columns: &[&str],
) -> Result<TableView, RunError> {
    read_view(store, stage_id, fingerprint, Some(Rows::Only(columns))).await
}

/// `read_table_columns` a shard at a time: `each` gets the batches of every shard of
/// `fingerprint`, in the table's order, and a shard is dropped once `each` has seen it, so the
/// working set is a few shards (a few MiB each) whatever the table's size. The next shards are
/// fetched and decoded on the blocking pool while `each` works on this one: decoding is most of
/// the time, and it keeps the machine's cores busy. For a command that aggregates a table too
/// large to hold (`analyze` over millions of OCR regions).
pub async fn for_each_batch(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    columns: &[&str],
    mut each: impl FnMut(RecordBatch) -> Result<(), RunError>,
) -> Result<(), RunError> {
    use futures::StreamExt;
    let (files, _) = stage_files(store, stage_id).await?;
    let retired = Retired::load(store.as_ref(), stage_id).await?;
    let names: Arc<Vec<String>> = Arc::new(columns.iter().map(|c| c.to_string()).collect());
    let ahead = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let mut shards = futures::stream::iter(files.into_iter().filter(|(_, reject)| !reject))
        .map(|(path, _)| {
            let names = names.clone();
            async move {
                let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
                    return Ok(None);
                };
                let decoded = tokio::task::spawn_blocking(move || {
                    let cols: Vec<&str> = names.iter().map(String::as_str).collect();
                    decode_projected(data, Some(Rows::Only(&cols)))
                })
                .await
                .map_err(|e| RunError::Internal(format!("{path}: decoding: {e}")))?;
                decoded
                    .map(|c| Some((path.clone(), c)))
                    .map_err(|e| unreadable(&path, e))
            }
        })
        .buffered(ahead);
    while let Some(c) = shards.next().await {
        let Some((path, c)) = c? else { continue };
        if c.fingerprint.as_deref() != Some(fingerprint) {
            continue;
        }
        for b in retired.filter(&path, &c.commit_id, c.batches)? {
            each(b)?;
        }
    }
    Ok(())
}

/// The committed shards of a stage table that are not in `seen` yet (and adds them there), with
/// their rows, for a reader following a table another worker is still writing.
pub async fn read_new_slots(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    seen: &mut HashSet<String>,
) -> Result<TableView, RunError> {
    let mut view = TableView::default();
    let mut paths: Vec<String> = store
        .list(stage_id)
        .await
        .map_err(|e| store.io_error(stage_id, e))?
        .into_iter()
        .filter(|p| p.ends_with(".parquet") && !seen.contains(p))
        .collect();
    paths.sort();
    let retired = Retired::load(store.as_ref(), stage_id).await?;
    for path in paths {
        seen.insert(path.clone());
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let c = decode_parquet(data, true)
            .map_err(|e| unreadable(&format!("{}/{path}", store.location()), e))?;
        if c.fingerprint.as_deref() == Some(fingerprint) {
            view.batches
                .extend(retired.filter(&path, &c.commit_id, c.batches)?);
            view.done
                .extend(retired.live(&path, &c.commit_id, c.videos));
        }
    }
    Ok(view)
}

impl TableView {
    /// Rows as `R` (the stage's row type), keyed by video id.
    pub fn rows<R: Serialize + DeserializeOwned>(
        &self,
    ) -> Result<HashMap<String, Vec<R>>, RunError> {
        let fields = fields_of::<R>()?;
        let mut out: HashMap<String, Vec<R>> = HashMap::new();
        for batch in &self.batches {
            let ids = string_column(batch, COL_VIDEO_ID)?;
            let rows: Vec<R> = serde_arrow::from_record_batch(&project_onto(batch, &fields)?)
                .map_err(|e| RunError::Internal(format!("decoding rows: {e}")))?;
            for (i, r) in rows.into_iter().enumerate() {
                out.entry(ids.value(i).to_string()).or_default().push(r);
            }
        }
        Ok(out)
    }

    /// `rows`, decoded on the first call and shared by every later one (of the same type).
    pub fn rows_shared<R: Serialize + DeserializeOwned + Send + Sync + 'static>(
        &self,
    ) -> Result<Arc<HashMap<String, Vec<R>>>, RunError> {
        if let Some(rows) = self.decoded.get().and_then(|d| d.clone().downcast().ok()) {
            return Ok(rows);
        }
        let rows = Arc::new(self.rows::<R>()?);
        let _ = self.decoded.set(rows.clone());
        Ok(rows)
    }

    /// One string column (an extra column such as a label), first value per video.
    pub fn column(&self, name: &str) -> Result<HashMap<String, String>, RunError> {
        let mut out = HashMap::new();
        for batch in &self.batches {
            let ids = string_column(batch, COL_VIDEO_ID)?;
            let Some(col) = batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            else {
                return Err(RunError::Config(format!(
                    "no string column `{name}` in the table"
                )));
            };
            for i in 0..batch.num_rows() {
                if !arrow::array::Array::is_null(&col, i) {
                    out.entry(ids.value(i).to_string())
                        .or_insert_with(|| col.value(i).to_string());
                }
            }
        }
        Ok(out)
    }
}

/// Any column as text (numbers and large strings cast to Utf8); None when there is no such
/// column or it cannot be cast. For tools reading tables by column name (split, release, …).
pub fn text_column(batch: &RecordBatch, name: &str) -> Option<StringArray> {
    let col = batch.column_by_name(name)?;
    let cast = arrow::compute::cast(col, &DataType::Utf8).ok()?;
    cast.as_any().downcast_ref::<StringArray>().cloned()
}

/// The batches of a whole Parquet file held in memory (a table written with `encode_table`).
pub fn table_batches(path: &str, data: Vec<u8>) -> Result<Vec<RecordBatch>, RunError> {
    let data = bytes::Bytes::from(data);
    let builder = ParquetRecordBatchReaderBuilder::try_new(data.clone())
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))?;
    let sum = footer_value(builder.metadata(), META_DATA);
    if let Some(why) = sum.and_then(|s| check_data(&data, &s)) {
        return Err(RunError::Internal(format!("{path}: damaged: {why}")));
    }
    builder
        .build()
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))
}

/// `builder` reading only the top-level columns `keep` picks, in the file's order (a column
/// `keep` wants that the file lacks is not an error: it is just not read).
pub fn project_columns<T>(
    builder: ArrowReaderBuilder<T>,
    keep: impl Fn(&str) -> bool,
) -> ArrowReaderBuilder<T> {
    let fields = builder.schema().fields().iter().enumerate();
    let roots = fields.filter(|(_, f)| keep(f.name())).map(|(i, _)| i);
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), roots);
    builder.with_projection(mask)
}

/// One key of a Parquet file's footer metadata.
pub fn footer_value(meta: &ParquetMetaData, key: &str) -> Option<String> {
    let kv = meta.file_metadata().key_value_metadata()?;
    kv.iter().find(|e| e.key == key)?.value.clone()
}

pub(super) fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray, RunError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .ok_or_else(|| RunError::Internal(format!("no {name} column")))
}
