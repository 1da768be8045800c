//! Parquet shards: a stage's rows and rejects, written in atomic parts, read back on resume.
//!
//! Every shard carries in its footer the ids of the videos it completes, the stage id and the
//! fingerprint. A video is done for a stage exactly when a shard naming it exists, whether it had
//! rows (a video with no text regions has none), or a reject. Rows of one video never straddle two
//! shards, so a crash loses whole videos, never part of one, and never duplicates one.

use crate::error::RunError;
use crate::record::{COL_FINGERPRINT, COL_VIDEO_ID, Extras, META_STAGE, META_VIDEOS, VideoRecord};
use crate::store::Store;
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
/// Videos a shard's commit rejects (JSON list of ids).
pub const META_REJECTED: &str = "vidcurate.rejected";
/// The rejects shard a commit adopts (its other reject attempts are garbage).
pub const META_REJECTS_FILE: &str = "vidcurate.rejects_file";
/// The slot's reject rows themselves (JSON): the slot is the commit, so whoever finds its
/// rejects shard missing (a crash right after the commit) writes it again from these.
pub const META_REJECT_ROWS: &str = "vidcurate.reject_rows";
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
}

impl<T> Pending<T> {
    fn new() -> Self {
        Self {
            ids: vec![],
            extra: vec![],
            rows: vec![],
            videos: vec![],
        }
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.extra.clear();
        self.rows.clear();
        self.videos.clear();
    }

    /// Drops the videos another worker has committed (and their rows).
    fn drop_videos(&mut self, done: &HashSet<String>) {
        self.videos.retain(|v| !done.contains(v));
        let mut i = 0;
        let keep: Vec<bool> = self.ids.iter().map(|v| !done.contains(v)).collect();
        self.rows.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        let mut i = 0;
        self.extra.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        self.ids.retain(|v| !done.contains(v));
    }
}

/// The reject rows a slot carries in its footer, enough to write its rejects shard again.
#[derive(Serialize, serde::Deserialize)]
struct FooterRejects {
    extras: Vec<String>,
    ids: Vec<String>,
    extra: Vec<Vec<Option<String>>>,
    rows: Vec<RejectRow>,
}

impl FooterRejects {
    /// The rejects shard these rows make (the same bytes whoever builds it).
    fn shard(&self, stage: &str, fingerprint: &str) -> Result<Vec<u8>, RunError> {
        let batch = build_batch(
            &fields_of::<RejectRow>()?,
            &self.rows,
            &self.ids,
            &self.extra,
            &Arc::new(self.extras.clone()),
            fingerprint,
        )?;
        let footer = Footer {
            videos: &self.ids,
            rejected: &[],
            rejects_file: None,
            reject_rows: None,
        };
        encode_parquet(&batch, &footer, stage, fingerprint)
    }
}

/// Where and as what a stage's shards are written.
struct ShardTarget {
    store: Arc<dyn Store>,
    stage_id: String,
    fingerprint: String,
    extras: Extras,
    /// `part-`, or `rNNNN-part-` for a rank of a ranked run: each rank has its own slots.
    slot_prefix: String,
}

impl ShardTarget {
    fn slot_path(&self, slot: u32) -> String {
        format!("{}/{}{slot:05}.parquet", self.stage_id, self.slot_prefix)
    }

    /// The rejects shard of a slot: `rejects/<stage>-slot-<prefix>NNNNN.parquet` (stage ids are
    /// snake_case, so this never meets the `<stage>-part-NNNNN` name of an earlier version).
    fn rejects_path(&self, slot: u32) -> String {
        format!(
            "{REJECTS_DIR}/{}-slot-{}{slot:05}.parquet",
            self.stage_id, self.slot_prefix
        )
    }
}

/// How big a writer's buffered rows may grow before they are written, whatever
/// `max_rows_per_shard` says: 20,000 rows with long titles and descriptions would hold tens of MiB,
/// and about three times that while they are encoded; memory must not grow with the run.
const MAX_BUFFER_BYTES: usize = 4 << 20;

/// Which slots a writer takes: its rank's name prefix, and the first number to try.
pub struct Slots<'a> {
    pub prefix: &'a str,
    pub next: u32,
}

/// Buffers one stage's rows and rejects and commits them as shards.
///
/// Commit protocol (exactly once, also with two workers on one rank): a flush takes the next
/// free slot `<stage>/<prefix>NNNNN.parquet` with a create-only put. That shard is the commit: its
/// footer lists the videos it completes and the videos it rejects, and names the slot's rejects
/// shard, which the winner writes right after. A worker that loses the slot reads the slots
/// committed meanwhile, drops the videos they settled, and tries the next slot. A slot is only
/// tried after all earlier ones were read, so no video is committed twice; nothing is written
/// before winning, so a loser leaves nothing behind.
pub struct ShardWriter<R> {
    target: ShardTarget,
    fields: Vec<FieldRef>,
    rows: Pending<R>,
    rejects: Pending<RejectRow>,
    next_slot: u32,
    last_flush: Instant,
    max_rows: usize,
    /// Approximate size of the buffered rows (their JSON length): see `MAX_BUFFER_BYTES`.
    buffered_bytes: usize,
    flush_every: Duration,
    /// Videos of this stage another worker of the same rank committed while this one worked
    /// (read from their slots): dropped when this writer settles them too, however late.
    others: HashSet<String>,
    lost: u64,
    /// A cache whose new answers are published before each commit (a run on an object store).
    cache: Option<crate::store::cache::CacheHandle>,
    _row: PhantomData<R>,
}

fn part_number(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next()?;
    let num = name.strip_suffix(".parquet")?.rsplit("part-").next()?;
    num.parse().ok()
}

/// The committed slots of one prefix, as (number, path), in order.
async fn committed_slots(
    store: &Arc<dyn Store>,
    stage_id: &str,
    prefix: &str,
) -> Result<Vec<(u32, String)>, RunError> {
    let full = format!("{stage_id}/{prefix}");
    let mut slots: Vec<(u32, String)> = store
        .list(stage_id)
        .await
        .map_err(|e| RunError::io(format!("{}/{stage_id}", store.location()), e))?
        .into_iter()
        .filter(|p| p.starts_with(&full))
        .filter_map(|p| Some((part_number(&p)?, p)))
        .collect();
    slots.sort();
    Ok(slots)
}

impl<R: Serialize + DeserializeOwned + Send + 'static> ShardWriter<R> {
    /// A writer whose first slot is `next_slot`: one past the last slot the caller has read (the
    /// `Prior` it loaded), never a number merely listed, or videos committed in between could be
    /// committed again.
    pub async fn open(
        store: Arc<dyn Store>,
        stage_id: &str,
        fingerprint: &str,
        extras: Extras,
        slots: Slots<'_>,
        max_rows: usize,
        flush_every: Duration,
    ) -> Result<Self, RunError> {
        let Slots {
            prefix: slot_prefix,
            next: next_slot,
        } = slots;
        Ok(Self {
            target: ShardTarget {
                store,
                stage_id: stage_id.to_string(),
                fingerprint: fingerprint.to_string(),
                extras,
                slot_prefix: slot_prefix.to_string(),
            },
            fields: fields_of::<R>()?,
            rows: Pending::new(),
            rejects: Pending::new(),
            next_slot,
            last_flush: Instant::now(),
            max_rows,
            buffered_bytes: 0,
            flush_every,
            others: HashSet::new(),
            lost: 0,
            cache: None,
            _row: PhantomData,
        })
    }

    /// Publishes `cache`'s new answers before each commit, so a committed row's paid calls are
    /// in the store for every other worker.
    pub fn publishing(mut self, cache: crate::store::cache::CacheHandle) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Records a computed video and its rows.
    pub fn add(&mut self, rec: &VideoRecord, rows: Vec<R>) {
        for r in rows {
            self.buffered_bytes += serde_json::to_vec(&r).map_or(0, |j| j.len())
                + rec.video_id.len()
                + rec.extra.iter().flatten().map(String::len).sum::<usize>();
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

    /// Videos this writer dropped because another worker committed them first.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Writes a shard if the buffer is big or old enough.
    pub async fn maybe_flush(&mut self) -> Result<(), RunError> {
        if self.rows.rows.len() >= self.max_rows
            || self.buffered_bytes >= MAX_BUFFER_BYTES
            || (self.pending() > 0 && self.last_flush.elapsed() >= self.flush_every)
        {
            self.flush().await?;
        }
        Ok(())
    }

    /// Commits everything buffered in one slot (see the type's comment for the protocol).
    pub async fn flush(&mut self) -> Result<(), RunError> {
        self.last_flush = Instant::now();
        self.drop_settled_elsewhere();
        if let (Some(c), true) = (&self.cache, self.pending() > 0) {
            c.publish().await?;
        }
        while self.pending() > 0 {
            let t = &self.target;
            let io = |p: &str, e| RunError::io(format!("{}/{p}", t.store.location()), e);
            let slot = self.next_slot;
            // The slot's rejects shard is written after winning, from rows the slot carries.
            let rejects = if self.rejects.videos.is_empty() {
                None
            } else {
                let rows = FooterRejects {
                    extras: t.extras.to_vec(),
                    ids: self.rejects.ids.clone(),
                    extra: self.rejects.extra.clone(),
                    rows: self.rejects.rows.clone(),
                };
                let json = serde_json::to_string(&rows)
                    .map_err(|e| RunError::Internal(format!("reject rows: {e}")))?;
                let bytes = rows.shard(&t.stage_id, &t.fingerprint)?;
                Some((t.rejects_path(slot), bytes, json))
            };
            let batch = build_batch(
                &self.fields,
                &self.rows.rows,
                &self.rows.ids,
                &self.rows.extra,
                &t.extras,
                &t.fingerprint,
            )?;
            let footer = Footer {
                videos: &self.rows.videos,
                rejected: &self.rejects.videos,
                rejects_file: rejects.as_ref().map(|(p, _, _)| p.as_str()),
                reject_rows: rejects.as_ref().map(|(_, _, j)| j.as_str()),
            };
            let bytes = encode_parquet(&batch, &footer, &t.stage_id, &t.fingerprint)?;
            let path = t.slot_path(slot);
            if t.store
                .put_if_absent(&path, bytes)
                .await
                .map_err(|e| io(&path, e))?
            {
                if let Some((rpath, rbytes, _)) = rejects {
                    // A crash before this put leaves the slot naming a file that is not there:
                    // the next worker to load this stage writes it from the slot's footer.
                    t.store
                        .put_if_absent(&rpath, rbytes)
                        .await
                        .map_err(|e| io(&rpath, e))?;
                }
                self.next_slot += 1;
                self.buffered_bytes = 0;
                self.rows.clear();
                self.rejects.clear();
                return Ok(());
            }
            // Another worker on this rank took the slot first.
            self.catch_up().await?;
        }
        Ok(())
    }

    /// Reads the slots committed from `next_slot` on and drops the videos they settled.
    async fn catch_up(&mut self) -> Result<(), RunError> {
        let t = &self.target;
        let slots = committed_slots(&t.store, &t.stage_id, &t.slot_prefix).await?;
        let mut settled = HashSet::new();
        let from = self.next_slot;
        for (n, path) in slots.iter().filter(|(n, _)| *n >= from) {
            let c = read_shard(t.store.as_ref(), path, false).await?;
            // A worker of other settings (one still running after a --repin) settles nothing of ours.
            if c.fingerprint.as_deref() == Some(t.fingerprint.as_str()) {
                settled.extend(c.videos);
                settled.extend(c.rejected.iter().cloned());
            }
            self.next_slot = self.next_slot.max(n + 1);
        }
        self.others.extend(settled);
        self.drop_settled_elsewhere();
        Ok(())
    }

    fn drop_settled_elsewhere(&mut self) {
        if self.others.is_empty() {
            return;
        }
        let before = self.pending();
        self.rows.drop_videos(&self.others);
        self.rejects.drop_videos(&self.others);
        let dropped = (before - self.pending()) as u64;
        if dropped > 0 {
            tracing::info!(stage = %self.target.stage_id, videos = dropped, "Another worker of this rank committed these videos first; keeping its results.");
        }
        self.lost += dropped;
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

/// What a shard's footer says besides its rows.
struct Footer<'a> {
    /// Videos this shard completes (with rows or without).
    videos: &'a [String],
    /// Videos this commit rejects (their rows are in `rejects_file`).
    rejected: &'a [String],
    rejects_file: Option<&'a str>,
    /// `FooterRejects` as JSON.
    reject_rows: Option<&'a str>,
}

fn encode_parquet(
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
    /// Videos the shard's commit rejects (new-format shards; empty in reject shards).
    pub rejected: Vec<String>,
    /// The rejects shard this commit adopted.
    pub rejects_file: Option<String>,
    /// The reject rows the commit carries (JSON), in slots written since they do.
    reject_rows: Option<String>,
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
    let list = |k: &str| -> Vec<String> {
        get(k)
            .and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default()
    };
    let (videos, rejected) = (list(META_VIDEOS), list(META_REJECTED));
    let rejects_file = get(META_REJECTS_FILE);
    let reject_rows = get(META_REJECT_ROWS);
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
        rejected,
        rejects_file,
        reject_rows,
        fingerprint,
        batches,
    })
}

/// What earlier runs already did for a stage with the current fingerprint, for this worker's
/// videos. Memory stays flat in the size of the run: only the done and rejected lists are held
/// (as 64-bit hashes of the ids), and a reused video's rows are read from its shard when the
/// video arrives; the last few shards read are kept decoded, since videos arrive roughly in the
/// order their shards were written.
pub struct Prior<R> {
    store: Arc<dyn Store>,
    /// Committed shards with this worker's finished videos.
    shards: Vec<String>,
    /// Finished video → index of its shard in `shards`.
    done: HashMap<u64, u32>,
    rejected: HashSet<u64>,
    /// One past the highest slot of this worker's prefix that was read.
    pub next_slot: u32,
    keep: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// Rows of recently read shards not taken yet, oldest first.
    open: std::sync::Mutex<std::collections::VecDeque<OpenShard>>,
    _row: PhantomData<R>,
}

/// A shard read for its rows: its batches as Arrow (columnar, far smaller than decoded rows),
/// projected onto the row type, and where each video's rows are. Rows are decoded per video.
struct OpenShard {
    idx: u32,
    /// Memory of the decoded batches (what the open-shard budget counts).
    bytes: usize,
    batches: Vec<RecordBatch>,
    /// (video key, batch, first row, rows) of each video's rows, sorted by key; `rows` is set to
    /// 0 once taken. 24 bytes a video: a map of id strings was ~150, and with every shard of a
    /// 100k-video run open that was the resume's growth.
    rows: Vec<RowRange>,
}

#[derive(Clone, Copy)]
struct RowRange {
    key: u64,
    batch: u32,
    start: u32,
    len: u32,
}

impl OpenShard {
    fn read(
        idx: u32,
        batches: &[RecordBatch],
        fields: &[FieldRef],
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Self, RunError> {
        let mut out = Self {
            idx,
            bytes: 0,
            batches: vec![],
            rows: vec![],
        };
        for (b, batch) in batches.iter().enumerate() {
            let ids = string_column(batch, COL_VIDEO_ID)?;
            let cols = fields
                .iter()
                .map(|f| batch.schema().index_of(f.name()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| RunError::Internal(e.to_string()))?;
            let projected = batch
                .project(&cols)
                .map_err(|e| RunError::Internal(e.to_string()))?;
            out.bytes += projected.get_array_memory_size();
            out.batches.push(projected);
            let n = batch.num_rows();
            let mut i = 0;
            while i < n {
                // A video's rows are written together: one range per video and batch.
                let id = ids.value(i);
                let start = i;
                while i < n && ids.value(i) == id {
                    i += 1;
                }
                if keep(id) {
                    out.rows.push(RowRange {
                        key: id_key(id),
                        batch: b as u32,
                        start: start as u32,
                        len: (i - start) as u32,
                    });
                }
            }
        }
        // Stable: a video's ranges stay in batch order.
        out.rows.sort_by_key(|r| r.key);
        out.rows.shrink_to_fit();
        out.bytes += out.rows.len() * std::mem::size_of::<RowRange>();
        Ok(out)
    }

    /// Decodes and forgets one video's rows (None: the shard holds no row of it).
    fn take<R: DeserializeOwned>(&mut self, id: &str) -> Option<Result<Vec<R>, RunError>> {
        let key = id_key(id);
        let from = self.rows.partition_point(|r| r.key < key);
        let to = from + self.rows[from..].partition_point(|r| r.key == key);
        let ranges: Vec<RowRange> = self.rows[from..to]
            .iter()
            .filter(|r| r.len > 0)
            .copied()
            .collect();
        if ranges.is_empty() {
            return None;
        }
        self.rows[from..to].iter_mut().for_each(|r| r.len = 0);
        let mut rows = vec![];
        for RowRange {
            batch, start, len, ..
        } in ranges
        {
            let part = self.batches[batch as usize].slice(start as usize, len as usize);
            match serde_arrow::from_record_batch::<Vec<R>>(&part) {
                Ok(r) => rows.extend(r),
                Err(e) => return Some(Err(RunError::Internal(format!("decoding rows: {e}")))),
            }
        }
        Some(Ok(rows))
    }
}

/// How many decoded shards a `Prior` keeps at most, and how much memory they may take together
/// (the newest is always kept). Videos come back roughly in the order their shards were written,
/// so few are needed; the count matters for shards of many videos with no rows (OCR), the bytes
/// for shards of big rows (a 20,000-row source shard).
const OPEN_SHARDS: usize = 8;
const OPEN_BYTES: usize = 4 << 20;

/// The key a `Prior` holds for a video id: 64 bits of BLAKE3 (two ids of a billion-video run
/// share a key with probability ~3 %; of a million, ~3e-8).
fn id_key(id: &str) -> u64 {
    let h = blake3::hash(id.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

impl<R: Serialize + DeserializeOwned> Prior<R> {
    /// Whether an earlier run finished this video (with rows or none).
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains_key(&id_key(id))
    }

    /// Whether an earlier run rejected this video.
    pub fn is_rejected(&self, id: &str) -> bool {
        self.rejected.contains(&id_key(id))
    }

    /// Finished plus rejected videos.
    pub fn settled(&self) -> usize {
        self.done.len() + self.rejected.len()
    }

    /// The stored rows of a finished video (each video is taken once).
    pub async fn take(&self, id: &str) -> Result<Vec<R>, RunError> {
        let Some(&idx) = self.done.get(&id_key(id)) else {
            return Ok(vec![]);
        };
        if let Some(rows) = self.take_open(idx, id) {
            return rows;
        }
        let path = &self.shards[idx as usize];
        let contents = read_shard(self.store.as_ref(), path, true).await?;
        let shard = OpenShard::read(idx, &contents.batches, &fields_of::<R>()?, &*self.keep)
            .map_err(|e| RunError::Internal(format!("{path}: {e}")))?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if !open.iter().any(|s| s.idx == idx) {
            open.push_back(shard);
            while open.len() > 1
                && (open.len() > OPEN_SHARDS
                    || open.iter().map(|s| s.bytes).sum::<usize>() > OPEN_BYTES)
            {
                open.pop_front();
            }
        }
        drop(open);
        self.take_open(idx, id).unwrap_or(Ok(vec![]))
    }

    /// The video's rows from an open shard; None when that shard is not open.
    fn take_open(&self, idx: u32, id: &str) -> Option<Result<Vec<R>, RunError>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let pos = open.iter().position(|s| s.idx == idx)?;
        // A finished video with no rows (no text on any frame) has no range: empty. A shard
        // stays open when its rows are all taken: its videos without rows may still come, and
        // dropping it would read it again for each of them (eviction bounds the memory).
        Some(open[pos].take(id).unwrap_or(Ok(vec![])))
    }
}

/// The Parquet files that settle a stage's videos: its shards (false) and the reject shards of
/// earlier versions (true), which were written whole under their final name and settle their
/// videos themselves. A slot's rejects shard (`<stage>-slot-…`) is not listed: the slot's footer
/// names its videos. Also: every file of the rejects folder, to check that a slot's rejects
/// shard was written (a crash can come between the slot and its rejects).
async fn stage_files(
    store: &Arc<dyn Store>,
    stage_id: &str,
) -> Result<(Vec<(String, bool)>, HashSet<String>), RunError> {
    let io = |p: &str, e| RunError::io(format!("{}/{p}", store.location()), e);
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
fn committed_rejects(c: &ShardContents, rejects: &HashSet<String>) -> Vec<String> {
    match &c.rejects_file {
        Some(f) if !rejects.contains(f) && c.reject_rows.is_none() => vec![],
        _ => c.rejected.clone(),
    }
}

/// Writes a committed slot's missing rejects shard from its footer (a worker killed between
/// its commit and that write). Create-only: the slot's winner may be writing it right now.
async fn restore_rejects(
    store: &dyn Store,
    c: &ShardContents,
    stage: &str,
    rejects: &HashSet<String>,
) -> Result<(), RunError> {
    let (Some(file), Some(json), Some(fp)) = (&c.rejects_file, &c.reject_rows, &c.fingerprint)
    else {
        return Ok(());
    };
    if rejects.contains(file) {
        return Ok(());
    }
    let rows: FooterRejects = serde_json::from_str(json).map_err(|e| {
        RunError::Internal(format!(
            "{}/{file}: unreadable reject rows in its slot: {e}",
            store.location()
        ))
    })?;
    let written = store
        .put_if_absent(file, rows.shard(stage, fp)?)
        .await
        .map_err(|e| RunError::io(format!("{}/{file}", store.location()), e))?;
    if written {
        tracing::info!(stage, file = %file, "Wrote a committed slot's missing rejects shard from its footer.");
    }
    Ok(())
}

/// Rows of `batches` decoded as `R` (a stage's row type), keyed by video id.
fn rows_by_video<R: Serialize + DeserializeOwned>(
    batches: &[RecordBatch],
    out: &mut HashMap<String, Vec<R>>,
    keep: &dyn Fn(&str) -> bool,
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
            if keep(ids.value(i)) {
                out.entry(ids.value(i).to_string()).or_default().push(r);
            }
        }
    }
    Ok(())
}

/// Sets aside shards written with other settings (so readers never mix them) and lists what the
/// rest finished, for the videos `keep` accepts (this worker's rank). Only footers are kept.
pub async fn load_prior<R: Serialize + DeserializeOwned>(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    slot_prefix: &str,
    keep: Arc<dyn Fn(&str) -> bool + Send + Sync>,
) -> Result<Prior<R>, RunError> {
    let mut prior = Prior {
        store: store.clone(),
        shards: vec![],
        done: HashMap::new(),
        rejected: HashSet::new(),
        next_slot: 0,
        keep: keep.clone(),
        open: Default::default(),
        _row: PhantomData,
    };
    let own_slots = format!("{stage_id}/{slot_prefix}");
    let (files, rejects) = stage_files(store, stage_id).await?;
    for (path, is_reject) in files {
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let contents = decode_parquet(data, false).map_err(|e| {
            RunError::Internal(format!(
                "{}/{path}: unreadable shard: {e}",
                store.location()
            ))
        })?;
        if contents.fingerprint.as_deref() != Some(fingerprint) {
            let old = contents.fingerprint.unwrap_or_else(|| "unknown".into());
            let to = format!("{SUPERSEDED_DIR}/{old}/{path}");
            tracing::info!(stage = stage_id, from = %path, to = %to, "Settings changed: setting old shard aside.");
            set_aside(store.as_ref(), &path, &to).await?;
            if let Some(r) = contents.rejects_file {
                let to = format!("{SUPERSEDED_DIR}/{old}/{r}");
                set_aside(store.as_ref(), &r, &to).await?;
            }
            continue;
        }
        if let Some(n) = part_number(&path).filter(|_| path.starts_with(&own_slots)) {
            prior.next_slot = prior.next_slot.max(n + 1);
        }
        let mine = |v: &String| keep(v);
        if is_reject {
            prior.rejected.extend(
                contents
                    .videos
                    .iter()
                    .filter(|v| mine(v))
                    .map(|v| id_key(v)),
            );
            continue;
        }
        restore_rejects(store.as_ref(), &contents, stage_id, &rejects).await?;
        prior.rejected.extend(
            committed_rejects(&contents, &rejects)
                .iter()
                .filter(|v| mine(v))
                .map(|v| id_key(v)),
        );
        let idx = prior.shards.len() as u32;
        let before = prior.done.len();
        for v in contents.videos.iter().filter(|v| mine(v)) {
            prior.done.insert(id_key(v), idx);
        }
        if prior.done.len() > before {
            prior.shards.push(path);
        }
    }
    Ok(prior)
}

/// One shard read and decoded (its rows too with `with_rows`); errors name the file.
async fn read_shard(
    store: &dyn Store,
    path: &str,
    with_rows: bool,
) -> Result<ShardContents, RunError> {
    let data = store
        .get(path)
        .await
        .map_err(|e| RunError::io(format!("{}/{path}", store.location()), e))?;
    decode_parquet(data, with_rows).map_err(|e| {
        RunError::Internal(format!(
            "{}/{path}: unreadable shard: {e}",
            store.location()
        ))
    })
}

/// A listed shard's bytes; None when another worker set it aside (superseded settings) between
/// the listing and the read.
async fn get_unless_moved(store: &dyn Store, path: &str) -> Result<Option<Vec<u8>>, RunError> {
    match store.get(path).await {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RunError::io(format!("{}/{path}", store.location()), e)),
    }
}

/// Moves a shard of superseded settings aside; one another worker moved already is fine.
async fn set_aside(store: &dyn Store, from: &str, to: &str) -> Result<(), RunError> {
    match store.rename(from, to).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(RunError::io(format!("{}/{from}", store.location()), e))
        }
        _ => Ok(()),
    }
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
    let mut view = TableView {
        done: HashSet::new(),
        rejected: HashSet::new(),
        batches: vec![],
    };
    let (files, rejects) = stage_files(store, stage_id).await?;
    for (path, is_reject) in files {
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let c = decode_parquet(data, with_rows && !is_reject)
            .map_err(|e| RunError::Internal(format!("{path}: unreadable shard: {e}")))?;
        if c.fingerprint.as_deref() != Some(fingerprint) {
            continue;
        }
        if is_reject {
            view.rejected.extend(c.videos);
        } else {
            view.rejected.extend(committed_rejects(&c, &rejects));
            view.done.extend(c.videos);
            view.batches.extend(c.batches);
        }
    }
    Ok(view)
}

/// The committed shards of a stage table that are not in `seen` yet (and adds them there), with
/// their rows, for a reader following a table another worker is still writing.
pub async fn read_new_slots(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    seen: &mut HashSet<String>,
) -> Result<TableView, RunError> {
    let mut view = TableView {
        done: HashSet::new(),
        rejected: HashSet::new(),
        batches: vec![],
    };
    let mut paths: Vec<String> = store
        .list(stage_id)
        .await
        .map_err(|e| RunError::io(format!("{}/{stage_id}", store.location()), e))?
        .into_iter()
        .filter(|p| p.ends_with(".parquet") && !seen.contains(p))
        .collect();
    paths.sort();
    for path in paths {
        seen.insert(path.clone());
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        let c = decode_parquet(data, true).map_err(|e| {
            RunError::Internal(format!(
                "{}/{path}: unreadable shard: {e}",
                store.location()
            ))
        })?;
        if c.fingerprint.as_deref() == Some(fingerprint) {
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
        rows_by_video(&self.batches, &mut out, &|_| true)?;
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

/// Any column as text (numbers and large strings cast to Utf8); None when there is no such
/// column or it cannot be cast. For tools reading tables by column name (split, release, …).
pub fn text_column(batch: &RecordBatch, name: &str) -> Option<StringArray> {
    let col = batch.column_by_name(name)?;
    let cast = arrow::compute::cast(col, &DataType::Utf8).ok()?;
    cast.as_any().downcast_ref::<StringArray>().cloned()
}

/// The batches of a whole Parquet file held in memory (a table written with `encode_table`).
pub fn table_batches(path: &str, data: Vec<u8>) -> Result<Vec<RecordBatch>, RunError> {
    ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(data))
        .and_then(|b| b.build())
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))
}

fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray, RunError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .ok_or_else(|| RunError::Internal(format!("no {name} column")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StageError;
    use crate::record::SourceInfo;

    #[derive(Debug, Clone, Serialize, serde::Deserialize)]
    struct Row {
        worker: u32,
        n: u32,
    }

    fn rec(id: &str) -> VideoRecord {
        VideoRecord::new(id.into(), SourceInfo::default(), vec![])
    }

    /// Several workers of one rank settle overlapping videos (each its own way: rows, or a reject)
    /// and commit in small slots at the same time: every video ends up settled exactly once, and
    /// no reject attempt a commit did not adopt is left behind.
    async fn twins_commit_each_video_once(store: Arc<dyn Store>) {
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..4u32 {
            let store = store.clone();
            tasks.spawn(async move {
                let mut w = ShardWriter::<Row>::open(
                    store,
                    "probe",
                    "fp",
                    Arc::new(vec![]),
                    Slots {
                        prefix: "r0001-part-",
                        next: 0,
                    },
                    1000,
                    Duration::from_secs(3600),
                )
                .await
                .unwrap();
                // Workers walk the same 60 videos from different starting points.
                for k in 0..60u32 {
                    let id = format!("v{:02}", (k + worker * 15) % 60);
                    if (k + worker) % 5 == 0 {
                        w.reject(&id, &[], &StageError::data("bad", "detail"));
                    } else {
                        w.add(&rec(&id), vec![Row { worker, n: 0 }, Row { worker, n: 1 }]);
                    }
                    if k % 3 == 2 {
                        w.flush().await.unwrap();
                        tokio::task::yield_now().await;
                    }
                }
                w.flush().await.unwrap();
                w.lost()
            });
        }
        let lost: u64 = tasks.join_all().await.into_iter().sum();
        assert!(lost > 0, "the workers should have raced");
        let view = read_table(&store, "probe", "fp", true).await.unwrap();
        assert!(view.done.is_disjoint(&view.rejected));
        assert_eq!(view.done.len() + view.rejected.len(), 60);
        let rows: HashMap<String, Vec<Row>> = view.rows().unwrap();
        for (id, rs) in &rows {
            // Both rows of a video come from the one worker that committed it.
            assert_eq!(rs.len(), 2, "{id}: {rs:?}");
            assert_eq!(rs[0].worker, rs[1].worker);
        }
        assert_eq!(rows.len(), view.done.len());
        // Reject shards left: only those a commit adopted, and each rejected video once.
        let mut adopted = HashSet::new();
        for p in store.list("probe").await.unwrap() {
            let c = decode_parquet(store.get(&p).await.unwrap(), false).unwrap();
            adopted.extend(c.rejects_file);
        }
        let on_disk: HashSet<String> = store.list(REJECTS_DIR).await.unwrap().into_iter().collect();
        assert_eq!(on_disk, adopted);
        let mut rejected = vec![];
        for p in &on_disk {
            rejected.extend(
                decode_parquet(store.get(p).await.unwrap(), false)
                    .unwrap()
                    .videos,
            );
        }
        rejected.sort();
        let mut want: Vec<_> = view.rejected.iter().cloned().collect();
        want.sort();
        assert_eq!(rejected, want);
        // Resume sees the same: nothing to redo, nothing twice.
        let prior = load_prior::<Row>(
            &store,
            "probe",
            "fp",
            "r0001-part-",
            Arc::new(|_: &str| true),
        )
        .await
        .unwrap();
        assert_eq!(prior.settled(), 60);
        // Rows come back from their shard when asked for, once.
        for (id, rs) in &rows {
            assert!(prior.is_done(id));
            assert_eq!(prior.take(id).await.unwrap().len(), rs.len());
        }
    }

    /// A crash between a slot and its rejects shard: the slot still rejects its videos (a twin
    /// starting then must not redo them), and the next load writes the shard from the footer.
    #[tokio::test]
    async fn a_slot_whose_rejects_shard_is_missing_gets_it_back_from_its_footer() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::open_run(&dir.path().display().to_string(), crate::store::Access::Own)
                .unwrap();
        let slots = Slots {
            prefix: "part-",
            next: 0,
        };
        let mut w = ShardWriter::<Row>::open(
            store.clone(),
            "probe",
            "fp",
            Arc::new(vec![]),
            slots,
            10,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        w.add(&rec("good"), vec![Row { worker: 0, n: 0 }]);
        w.reject("bad", &[], &StageError::data("bad", "detail"));
        w.flush().await.unwrap();
        let keep: Arc<dyn Fn(&str) -> bool + Send + Sync> = Arc::new(|_: &str| true);
        let prior = load_prior::<Row>(&store, "probe", "fp", "part-", keep.clone())
            .await
            .unwrap();
        assert!(prior.is_done("good") && prior.is_rejected("bad"));
        assert_eq!(prior.next_slot, 1);
        let rejects = store.list(REJECTS_DIR).await.unwrap();
        assert_eq!(
            rejects,
            vec!["rejects/probe-slot-part-00000.parquet".to_string()]
        );
        let written = store.get(&rejects[0]).await.unwrap();
        store.delete(&rejects[0]).await.unwrap();
        // A reader sees the commit's rejects before anyone restores the file.
        let view = read_table(&store, "probe", "fp", false).await.unwrap();
        assert_eq!(view.rejected, HashSet::from(["bad".to_string()]));
        let prior = load_prior::<Row>(&store, "probe", "fp", "part-", keep)
            .await
            .unwrap();
        assert!(prior.is_done("good") && prior.is_rejected("bad"));
        let restored = store.get(&rejects[0]).await.unwrap();
        let (a, b) = (
            decode_parquet(written, true).unwrap(),
            decode_parquet(restored, true).unwrap(),
        );
        assert_eq!(a.videos, vec!["bad".to_string()]);
        assert_eq!((a.videos, a.batches), (b.videos, b.batches));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn twins_commit_each_video_once_on_a_local_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::open_run(&dir.path().display().to_string(), crate::store::Access::Own);
        twins_commit_each_video_once(store.unwrap()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn twins_commit_each_video_once_in_memory() {
        let store = crate::store::open_run("memory://bucket/run", crate::store::Access::Own);
        twins_commit_each_video_once(store.unwrap()).await;
    }
}
