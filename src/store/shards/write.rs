//! Writing a stage's shards: `ShardWriter` buffers rows and rejects and commits them, one slot
//! `<stage>/<prefix>NNNNN.parquet` at a time, with the slot's rejects shard under `rejects/`.
//!
//! Reads: the slots other workers committed (to catch up after losing a slot). Writes: slots and
//! rejects shards (create-only puts), and a committed slot's missing rejects shard from its
//! footer (`restore_rejects`, called by `load_prior`). Calls: the response cache's `publish`
//! before each commit on an object-store run.

use super::encode::{Footer, build_batch, encode_parquet};
use super::read::{ShardContents, read_shard};
use super::retired::{self, RetiredEntry};
use super::{REJECTS_DIR, RejectRow, fields_of};
use crate::error::RunError;
use crate::record::{Extras, Stamp, VideoRecord};
use crate::store::Store;
use crate::store::commits::{self, CommitRecord, ObjectSum};
use arrow::datatypes::FieldRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows waiting for the next shard of one table, with the videos they complete.
struct Pending<T> {
    ids: Vec<String>,
    extra: Vec<Vec<Option<String>>>,
    rows: Vec<T>,
    videos: Vec<String>,
    /// What each of `videos` was computed from (aligned with it).
    stamps: Vec<Option<Stamp>>,
    /// Objects the rows refer to (frames' JPEGs), each tagged with its video.
    objects: Vec<ObjectSum>,
}

impl<T> Pending<T> {
    fn new() -> Self {
        Self {
            ids: vec![],
            extra: vec![],
            rows: vec![],
            videos: vec![],
            stamps: vec![],
            objects: vec![],
        }
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.extra.clear();
        self.rows.clear();
        self.videos.clear();
        self.stamps.clear();
        self.objects.clear();
    }

    /// Drops the videos another worker has committed (and their rows).
    fn drop_videos(&mut self, done: &HashSet<String>) {
        let kept: Vec<bool> = self.videos.iter().map(|v| !done.contains(v)).collect();
        let mut i = 0;
        self.stamps.retain(|_| {
            i += 1;
            kept[i - 1]
        });
        self.videos.retain(|v| !done.contains(v));
        self.objects
            .retain(|o| o.video.as_ref().is_none_or(|v| !done.contains(v)));
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
pub(super) struct FooterRejects {
    extras: Vec<String>,
    pub(super) ids: Vec<String>,
    extra: Vec<Vec<Option<String>>>,
    rows: Vec<RejectRow>,
}

impl FooterRejects {
    /// These rows without the videos in `gone`.
    pub(super) fn without(mut self, gone: &HashSet<String>) -> Self {
        let keep: Vec<bool> = self.ids.iter().map(|v| !gone.contains(v)).collect();
        let mut at = keep.iter();
        self.extra.retain(|_| *at.next().unwrap_or(&true));
        let mut at = keep.iter();
        self.rows.retain(|_| *at.next().unwrap_or(&true));
        self.ids.retain(|v| !gone.contains(v));
        self
    }
}

/// The reject row (reason, detail) a slot's footer carries for `id`.
pub(super) fn reject_row_of(reject_rows: Option<&str>, id: &str) -> Option<(String, String)> {
    let rows = serde_json::from_str::<FooterRejects>(reject_rows?).ok()?;
    let at = rows.ids.iter().position(|v| v == id)?;
    let r = rows.rows.get(at)?;
    Some((r.reason.clone(), r.detail.clone()))
}

/// The videos a slot rejected for a reason worth trying again (an external error: a timeout, a
/// 5xx, a 429, a failed fetch), from the reject rows its footer carries.
pub(super) fn transient_rejects(reject_rows: Option<&str>) -> HashSet<String> {
    let Some(rows) = reject_rows.and_then(|j| serde_json::from_str::<FooterRejects>(j).ok()) else {
        return HashSet::new();
    };
    rows.ids
        .into_iter()
        .zip(rows.rows)
        .filter(|(_, r)| r.error_kind == crate::error::ErrorKind::External.to_string())
        .map(|(id, _)| id)
        .collect()
}

impl FooterRejects {
    /// The rejects shard these rows make (the same bytes whoever builds it).
    pub(super) fn shard(&self, stage: &str, fingerprint: &str) -> Result<Vec<u8>, RunError> {
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
            stamps: vec![],
            rejected: &[],
            rejects_file: None,
            reject_rows: None,
            objects: &[],
            commit: false,
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
    /// Stored rows this writer's next commit replaces: tombstoned right before it.
    retiring: Vec<RetiredEntry>,
    _row: PhantomData<R>,
}

pub(super) fn part_number(path: &str) -> Option<u32> {
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
        .map_err(|e| store.io_error(stage_id, e))?
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
            retiring: vec![],
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
        self.rows.stamps.push(rec.lineage.stamp);
    }

    /// Retires a video's stored rows (or reject) in a committed shard: the tombstone is written
    /// before the next commit, so the rows that replace them never sit beside them.
    pub fn retire(&mut self, entry: RetiredEntry) {
        self.retiring.push(entry);
    }

    /// Records the objects a computed video's rows refer to (its frames' JPEGs), so its commit
    /// records their sizes and BLAKE3.
    pub fn add_objects(&mut self, objects: Vec<ObjectSum>) {
        self.rows.objects.extend(objects);
    }

    /// Records a rejected video.
    pub fn reject(
        &mut self,
        video_id: &str,
        extra: &[Option<String>],
        error: &crate::error::StageError,
        stamp: Option<Stamp>,
    ) {
        self.rejects.ids.push(video_id.to_string());
        self.rejects.extra.push(extra.to_vec());
        self.rejects.videos.push(video_id.to_string());
        self.rejects.stamps.push(stamp);
        self.rejects.rows.push(RejectRow {
            stage: self.target.stage_id.clone(),
            reason: error.reason.clone(),
            detail: error.detail.clone(),
            error_kind: error.kind.to_string(),
            rejected_at: crate::store::manifest::now(),
        });
    }

    pub fn pending(&self) -> usize {
        self.rows.videos.len() + self.rejects.videos.len()
    }

    /// Writes the tombstones of the rows the buffered videos replace (or that left the table).
    async fn write_tombstones(&mut self) -> Result<(), RunError> {
        if self.retiring.is_empty() {
            return Ok(());
        }
        let t = &self.target;
        let name = format!("{}{:05}", t.slot_prefix, self.next_slot);
        retired::retire(t.store.as_ref(), &t.stage_id, &name, &self.retiring).await?;
        self.retiring.clear();
        Ok(())
    }

    /// Videos this writer dropped because another worker committed them first.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Writes a shard if the buffer is big or old enough.
    pub async fn maybe_flush(&mut self) -> Result<(), RunError> {
        if self.rows.rows.len() >= self.max_rows
            || self.buffered_bytes >= MAX_BUFFER_BYTES
            || ((self.pending() > 0 || !self.retiring.is_empty())
                && self.last_flush.elapsed() >= self.flush_every)
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
        self.write_tombstones().await?;
        while self.pending() > 0 {
            let t = &self.target;
            let io = |p: &str, e| t.store.io_error(p, e);
            let slot = self.next_slot;
            // The slot's rejects shard is written after winning, from rows the slot carries.
            let rejects = self.slot_rejects(slot)?;
            let (path, bytes, record) = self.encode_slot(slot, rejects.as_ref())?;
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
                // After the commit: a crash before this leaves a slot without a record, which
                // its footer still checks and the next resume records (`load_prior`).
                commits::write_record(t.store.as_ref(), &record)
                    .await
                    .map_err(|e| io(&commits::record_path(&path), e))?;
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

    /// The rejects shard of `slot` (its path, bytes, and its rows as the slot's footer carries
    /// them), None when nothing buffered is rejected.
    fn slot_rejects(&self, slot: u32) -> Result<Option<(String, Vec<u8>, String)>, RunError> {
        if self.rejects.videos.is_empty() {
            return Ok(None);
        }
        let t = &self.target;
        let rows = FooterRejects {
            extras: t.extras.to_vec(),
            ids: self.rejects.ids.clone(),
            extra: self.rejects.extra.clone(),
            rows: self.rejects.rows.clone(),
        };
        let json = serde_json::to_string(&rows)
            .map_err(|e| RunError::Internal(format!("reject rows: {e}")))?;
        let bytes = rows.shard(&t.stage_id, &t.fingerprint)?;
        Ok(Some((t.rejects_path(slot), bytes, json)))
    }

    /// The buffered rows as `slot`'s shard: its path, its bytes and the commit record to write
    /// once it is committed.
    fn encode_slot(
        &self,
        slot: u32,
        rejects: Option<&(String, Vec<u8>, String)>,
    ) -> Result<(String, Vec<u8>, CommitRecord), RunError> {
        let t = &self.target;
        let batch = build_batch(
            &self.fields,
            &self.rows.rows,
            &self.rows.ids,
            &self.rows.extra,
            &t.extras,
            &t.fingerprint,
        )?;
        let mut objects = self.rows.objects.clone();
        if let Some((rpath, rbytes, _)) = rejects {
            objects.push(ObjectSum::of(rpath, rbytes, None));
        }
        let footer = Footer {
            videos: &self.rows.videos,
            stamps: self
                .rows
                .stamps
                .iter()
                .chain(&self.rejects.stamps)
                .copied()
                .collect(),
            rejected: &self.rejects.videos,
            rejects_file: rejects.map(|(p, _, _)| p.as_str()),
            reject_rows: rejects.map(|(_, _, j)| j.as_str()),
            objects: &objects,
            commit: true,
        };
        let bytes = encode_parquet(&batch, &footer, &t.stage_id, &t.fingerprint)?;
        let path = t.slot_path(slot);
        let record = CommitRecord {
            object: ObjectSum::of(&path, &bytes, None),
            stage: Some(t.stage_id.clone()),
            videos: self
                .rows
                .videos
                .iter()
                .chain(&self.rejects.videos)
                .cloned()
                .collect(),
            objects,
            committed_at: crate::store::manifest::now(),
        };
        Ok((path, bytes, record))
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

/// Writes a committed slot's missing rejects shard from its footer (a worker killed between
/// its commit and that write). Create-only: the slot's winner may be writing it right now.
pub(super) async fn restore_rejects(
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
        .map_err(|e| store.io_error(file, e))?;
    if written {
        tracing::info!(stage, file = %file, "Wrote a committed slot's missing rejects shard from its footer.");
    }
    Ok(())
}
