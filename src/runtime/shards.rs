//! Parquet shards: a stage's rows and rejects, written in atomic parts, read back on resume.
//!
//! Every shard carries in its footer the ids of the videos it completes, the stage id and the
//! fingerprint. A video is done for a stage exactly when a shard naming it exists, whether it had
//! rows (a video with no text regions has none), or a reject. Rows of one video never straddle two
//! shards, so a crash loses whole videos, never part of one, and never duplicates one.

use crate::error::RunError;
use crate::record::{COL_FINGERPRINT, COL_VIDEO_ID, Extras, META_STAGE, META_VIDEOS, VideoRecord};
use crate::runtime::store::Store;
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_arrow::schema::{SchemaLike, TracingOptions};
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const META_FINGERPRINT: &str = "vidcurate.fingerprint";
pub const REJECTS_DIR: &str = "rejects";
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

/// Rows waiting for the next shard of one table, with the videos they complete.
struct Pending<T> {
    ids: Vec<String>,
    extra: Vec<Vec<Option<String>>>,
    rows: Vec<T>,
    videos: Vec<String>,
    next_part: u32,
}

impl<T: Serialize> Pending<T> {
    fn new(next_part: u32) -> Self {
        Self {
            ids: vec![],
            extra: vec![],
            rows: vec![],
            videos: vec![],
            next_part,
        }
    }

    /// Writes the buffered rows as shard `<prefix>part-NNNNN.parquet`, if any video is waiting.
    async fn write(
        &mut self,
        w: &ShardTarget,
        fields: &[FieldRef],
        prefix: &str,
    ) -> Result<(), RunError> {
        if self.videos.is_empty() {
            return Ok(());
        }
        let batch = build_batch(
            fields,
            &self.rows,
            &self.ids,
            &self.extra,
            &w.extras,
            &w.fingerprint,
        )?;
        let bytes = encode_parquet(&batch, &self.videos, &w.stage_id, &w.fingerprint)?;
        let path = format!("{prefix}part-{:05}.parquet", self.next_part);
        w.store
            .put(&path, bytes)
            .await
            .map_err(|e| RunError::io(path.clone(), e))?;
        self.next_part += 1;
        self.ids.clear();
        self.extra.clear();
        self.rows.clear();
        self.videos.clear();
        Ok(())
    }
}

/// Where and as what a stage's shards are written.
struct ShardTarget {
    store: Arc<dyn Store>,
    stage_id: String,
    fingerprint: String,
    extras: Extras,
}

/// Buffers one stage's rows and rejects and writes them as shards.
pub struct ShardWriter<R> {
    target: ShardTarget,
    fields: Vec<FieldRef>,
    reject_fields: Vec<FieldRef>,
    rows: Pending<R>,
    rejects: Pending<RejectRow>,
    last_flush: Instant,
    max_rows: usize,
    flush_every: Duration,
    _row: PhantomData<R>,
}

fn part_number(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next()?;
    let num = name.strip_suffix(".parquet")?.rsplit("part-").next()?;
    num.parse().ok()
}

async fn next_part(store: &Arc<dyn Store>, dir: &str, prefix: &str) -> Result<u32, RunError> {
    let listed = store
        .list(dir)
        .await
        .map_err(|e| RunError::io(format!("{}/{dir}", store.location()), e))?;
    Ok(listed
        .iter()
        .filter(|p| p.starts_with(prefix))
        .filter_map(|p| part_number(p))
        .max()
        .map_or(0, |n| n + 1))
}

impl<R: Serialize + DeserializeOwned + Send + 'static> ShardWriter<R> {
    pub async fn open(
        store: Arc<dyn Store>,
        stage_id: &str,
        fingerprint: &str,
        extras: Extras,
        max_rows: usize,
        flush_every: Duration,
    ) -> Result<Self, RunError> {
        let rows_part = next_part(&store, stage_id, &format!("{stage_id}/part-")).await?;
        let rejects_part = next_part(
            &store,
            REJECTS_DIR,
            &format!("{REJECTS_DIR}/{stage_id}-part-"),
        )
        .await?;
        Ok(Self {
            target: ShardTarget {
                store,
                stage_id: stage_id.to_string(),
                fingerprint: fingerprint.to_string(),
                extras,
            },
            fields: fields_of::<R>()?,
            reject_fields: fields_of::<RejectRow>()?,
            rows: Pending::new(rows_part),
            rejects: Pending::new(rejects_part),
            last_flush: Instant::now(),
            max_rows,
            flush_every,
            _row: PhantomData,
        })
    }

    /// Records a computed video and its rows.
    pub fn add(&mut self, rec: &VideoRecord, rows: Vec<R>) {
        for r in rows {
            self.rows.ids.push(rec.video_id.clone());
            self.rows.extra.push(rec.extra.clone());
            self.rows.rows.push(r);
        }
        self.rows.videos.push(rec.video_id.clone());
    }

    /// Records a rejected video.
    pub fn reject(
        &mut self,
        video_id: &str,
        extra: &[Option<String>],
        error: &crate::error::StageError,
    ) {
        self.rejects.ids.push(video_id.to_string());
        self.rejects.extra.push(extra.to_vec());
        self.rejects.videos.push(video_id.to_string());
        self.rejects.rows.push(RejectRow {
            stage: self.target.stage_id.clone(),
            reason: error.reason.clone(),
            detail: error.detail.clone(),
            error_kind: error.kind.to_string(),
            rejected_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        });
    }

    pub fn pending(&self) -> usize {
        self.rows.videos.len() + self.rejects.videos.len()
    }

    /// Writes a shard if the buffer is big or old enough.
    pub async fn maybe_flush(&mut self) -> Result<(), RunError> {
        if self.rows.rows.len() >= self.max_rows
            || (self.pending() > 0 && self.last_flush.elapsed() >= self.flush_every)
        {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes everything buffered: rows first, then rejects (each shard atomic on its own; a
    /// video is in one or the other, so a crash between the two loses no consistency).
    pub async fn flush(&mut self) -> Result<(), RunError> {
        self.last_flush = Instant::now();
        let rows_prefix = format!("{}/", self.target.stage_id);
        self.rows
            .write(&self.target, &self.fields, &rows_prefix)
            .await?;
        let rejects_prefix = format!("{REJECTS_DIR}/{}-", self.target.stage_id);
        self.rejects
            .write(&self.target, &self.reject_fields, &rejects_prefix)
            .await
    }
}

/// `video_id`, the extra columns, the row's own columns, then `stage_fingerprint`.
fn build_batch<R: Serialize>(
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

fn encode_parquet(
    batch: &RecordBatch,
    videos: &[String],
    stage: &str,
    fingerprint: &str,
) -> Result<Vec<u8>, RunError> {
    let meta = vec![
        KeyValue::new(
            META_VIDEOS.to_string(),
            serde_json::to_string(videos).unwrap_or_default(),
        ),
        KeyValue::new(META_STAGE.to_string(), stage.to_string()),
        KeyValue::new(META_FINGERPRINT.to_string(), fingerprint.to_string()),
    ];
    parquet_bytes(batch, Some(meta))
}

/// One batch as Snappy-compressed Parquet, with footer metadata when given.
fn parquet_bytes(batch: &RecordBatch, meta: Option<Vec<KeyValue>>) -> Result<Vec<u8>, RunError> {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata(meta)
        .build();
    let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(props))
        .map_err(|e| RunError::Internal(format!("parquet writer: {e}")))?;
    w.write(batch)
        .map_err(|e| RunError::Internal(format!("parquet write: {e}")))?;
    w.into_inner()
        .map_err(|e| RunError::Internal(format!("parquet close: {e}")))
}

/// A table that is not a stage shard (a selection, an analysis table) as Parquet bytes, for
/// `Store::put`, which writes atomically like every shard.
pub fn encode_table(batch: &RecordBatch) -> Result<Vec<u8>, RunError> {
    parquet_bytes(batch, None)
}

/// A shard read back: its footer and its batches.
pub struct ShardContents {
    pub videos: Vec<String>,
    pub fingerprint: Option<String>,
    pub batches: Vec<RecordBatch>,
}

pub fn decode_parquet(data: Vec<u8>, with_rows: bool) -> Result<ShardContents, String> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(data))
        .map_err(|e| e.to_string())?;
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default();
    let get = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
    let videos: Vec<String> = get(META_VIDEOS)
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default();
    let fingerprint = get(META_FINGERPRINT);
    let mut batches = vec![];
    if with_rows {
        let reader = builder.build().map_err(|e| e.to_string())?;
        for b in reader {
            batches.push(b.map_err(|e| e.to_string())?);
        }
    }
    Ok(ShardContents {
        videos,
        fingerprint,
        batches,
    })
}

/// What earlier runs already did for a stage with the current fingerprint.
pub struct Prior<R> {
    pub rows: HashMap<String, Vec<R>>,
    pub rejected: HashSet<String>,
}

/// The Parquet files of a stage: its shards (false) and its reject shards (true).
async fn stage_files(
    store: &Arc<dyn Store>,
    stage_id: &str,
) -> Result<Vec<(String, bool)>, RunError> {
    let io = |p: &str, e| RunError::io(format!("{}/{p}", store.location()), e);
    let rej_prefix = format!("{REJECTS_DIR}/{stage_id}-part-");
    let mut paths: Vec<(String, bool)> = store
        .list(stage_id)
        .await
        .map_err(|e| io(stage_id, e))?
        .into_iter()
        .map(|p| (p, false))
        .collect();
    paths.extend(
        store
            .list(REJECTS_DIR)
            .await
            .map_err(|e| io(REJECTS_DIR, e))?
            .into_iter()
            .filter(|p| p.starts_with(&rej_prefix))
            .map(|p| (p, true)),
    );
    paths.retain(|(p, _)| p.ends_with(".parquet"));
    Ok(paths)
}

/// Rows of `batches` decoded as `R` (a stage's row type), keyed by video id.
fn rows_by_video<R: Serialize + DeserializeOwned>(
    batches: &[RecordBatch],
    out: &mut HashMap<String, Vec<R>>,
) -> Result<(), RunError> {
    let fields = fields_of::<R>()?;
    for batch in batches {
        let ids = string_column(batch, COL_VIDEO_ID)?;
        let idx = fields
            .iter()
            .map(|f| batch.schema().index_of(f.name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RunError::Internal(e.to_string()))?;
        let projected = batch
            .project(&idx)
            .map_err(|e| RunError::Internal(e.to_string()))?;
        let rows: Vec<R> = serde_arrow::from_record_batch(&projected)
            .map_err(|e| RunError::Internal(format!("decoding rows: {e}")))?;
        for (i, r) in rows.into_iter().enumerate() {
            out.entry(ids.value(i).to_string()).or_default().push(r);
        }
    }
    Ok(())
}

/// Sets aside shards written with other settings (so readers never mix them) and loads the rest.
pub async fn load_prior<R: Serialize + DeserializeOwned>(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
) -> Result<Prior<R>, RunError> {
    let io = |p: &str, e| RunError::io(format!("{}/{p}", store.location()), e);
    let mut prior = Prior {
        rows: HashMap::new(),
        rejected: HashSet::new(),
    };
    for (path, is_reject) in stage_files(store, stage_id).await? {
        let data = store.get(&path).await.map_err(|e| io(&path, e))?;
        let contents = decode_parquet(data, !is_reject).map_err(|e| {
            RunError::Internal(format!(
                "{}/{path}: unreadable shard: {e}",
                store.location()
            ))
        })?;
        if contents.fingerprint.as_deref() != Some(fingerprint) {
            let old = contents.fingerprint.unwrap_or_else(|| "unknown".into());
            let to = format!("{SUPERSEDED_DIR}/{old}/{path}");
            tracing::info!(stage = stage_id, from = %path, to = %to, "Settings changed: setting old shard aside.");
            store.rename(&path, &to).await.map_err(|e| io(&path, e))?;
            continue;
        }
        if is_reject {
            prior.rejected.extend(contents.videos);
            continue;
        }
        for v in &contents.videos {
            prior.rows.entry(v.clone()).or_default();
        }
        rows_by_video(&contents.batches, &mut prior.rows)
            .map_err(|e| RunError::Internal(format!("{path}: {e}")))?;
    }
    Ok(prior)
}

/// A stage table read without touching the run directory (for `rethreshold` and `analyze`): the
/// done and rejected videos of `fingerprint`, and the batches of its shards.
pub struct TableView {
    pub done: HashSet<String>,
    pub rejected: HashSet<String>,
    pub batches: Vec<RecordBatch>,
}

pub async fn read_table(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    with_rows: bool,
) -> Result<TableView, RunError> {
    let io = |p: &str, e| RunError::io(format!("{}/{p}", store.location()), e);
    let mut view = TableView {
        done: HashSet::new(),
        rejected: HashSet::new(),
        batches: vec![],
    };
    for (path, is_reject) in stage_files(store, stage_id).await? {
        let data = store.get(&path).await.map_err(|e| io(&path, e))?;
        let c = decode_parquet(data, with_rows && !is_reject)
            .map_err(|e| RunError::Internal(format!("{path}: unreadable shard: {e}")))?;
        if c.fingerprint.as_deref() != Some(fingerprint) {
            continue;
        }
        if is_reject {
            view.rejected.extend(c.videos);
        } else {
            view.done.extend(c.videos);
            view.batches.extend(c.batches);
        }
    }
    Ok(view)
}

impl TableView {
    /// Rows as `R` (the stage's row type), keyed by video id.
    pub fn rows<R: Serialize + DeserializeOwned>(
        &self,
    ) -> Result<HashMap<String, Vec<R>>, RunError> {
        let mut out = HashMap::new();
        rows_by_video(&self.batches, &mut out)?;
        Ok(out)
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

fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray, RunError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .ok_or_else(|| RunError::Internal(format!("no {name} column")))
}
