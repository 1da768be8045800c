//! What a resume finds done: `load_prior` lists a stage's committed videos and rejects for this
//! worker (by their footers only), and `Prior` hands back a finished video's stored rows when it
//! comes again, keeping the last few shards it read decoded.
//!
//! Reads: the stage's shards and `rejects/`. Writes: moves shards of other settings aside under
//! `_superseded/<fingerprint>/`, and restores a committed slot's missing rejects shard
//! (`write::restore_rejects`). Called by the runtime when a stage task starts.

use super::read::{
    ShardContents, committed_rejects, decode_parquet, get_unless_moved, project_onto, read_shard,
    stage_files, string_column,
};
use super::retired::Retired;
use super::write::{part_number, restore_rejects, transient_rejects};
use super::{SUPERSEDED_DIR, fields_of};
use crate::error::RunError;
use crate::record::{COL_VIDEO_ID, Stamp, id_key};
use crate::store::Store;
use crate::store::commits;
use arrow::array::RecordBatch;
use arrow::datatypes::FieldRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;

/// What earlier runs already did for a stage with the current fingerprint, for this worker's
/// videos. Memory stays flat in the size of the run: only the done and rejected lists are held
/// (as 64-bit hashes of the ids), and a reused video's rows are read from its shard when the
/// video arrives; the last few shards read are kept decoded, since videos arrive roughly in the
/// order their shards were written.
pub struct Prior<R> {
    store: Arc<dyn Store>,
    /// Committed shards that settle this worker's videos (with rows, or rejects).
    shards: Vec<String>,
    /// Their commit ids (what a tombstone names with the path).
    sums: Vec<String>,
    /// Finished video → index of its shard in `shards`.
    done: HashMap<u64, u32>,
    rejected: HashMap<u64, Rejected>,
    /// What each settled video was computed from, where its shard recorded it.
    stamps: HashMap<u64, Stamp>,
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

/// Where a rejected video's reject was committed, and whether it is worth trying again.
#[derive(Clone, Copy)]
struct Rejected {
    shard: u32,
    transient: bool,
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
            let projected = project_onto(batch, fields)?;
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

impl<R: Serialize + DeserializeOwned> Prior<R> {
    /// Whether an earlier run finished this video (with rows or none).
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains_key(&id_key(id))
    }

    /// Whether an earlier run rejected this video.
    pub fn is_rejected(&self, id: &str) -> bool {
        self.rejected.contains_key(&id_key(id))
    }

    /// Whether the earlier reject was for an external error (a timeout, a 5xx, a 429, a failed
    /// fetch): the video is tried again, unlike one rejected for what it is.
    pub fn is_transient_reject(&self, id: &str) -> bool {
        self.rejected.get(&id_key(id)).is_some_and(|r| r.transient)
    }

    /// What the stored rows (or reject) of this video were computed from; None for a shard of
    /// an earlier version, which did not record it.
    pub fn stamp(&self, id: &str) -> Option<Stamp> {
        self.stamps.get(&id_key(id)).copied()
    }

    /// The committed shard that settles this video (its rows, or its reject): its path and its
    /// commit id.
    pub fn shard_of(&self, id: &str) -> Option<(&str, &str)> {
        let key = id_key(id);
        let idx = self
            .done
            .get(&key)
            .copied()
            .or_else(|| self.rejected.get(&key).map(|r| r.shard))? as usize;
        Some((self.shards.get(idx)?.as_str(), self.sums.get(idx)?.as_str()))
    }

    /// The keys of every settled video (done or rejected).
    pub fn settled_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.done.keys().chain(self.rejected.keys()).copied()
    }

    /// The keys of the settled videos not in `sent` whose settlement is in a shard readers of
    /// the table's folder see (not a held copy): what a complete pass that did not send them
    /// here holds apart (`held::hold`).
    pub fn unsent_visible(&self, sent: &HashSet<u64>) -> HashSet<u64> {
        let visible = |idx: u32| !super::is_held(&self.shards[idx as usize]);
        let done = self.done.iter().map(|(k, i)| (*k, *i));
        let rejected = self.rejected.iter().map(|(k, r)| (*k, r.shard));
        done.chain(rejected)
            .filter(|(k, idx)| !sent.contains(k) && visible(*idx))
            .map(|(k, _)| k)
            .collect()
    }

    /// The ids of the settled videos whose keys are in `keys`, with their shards and the shards'
    /// commit ids, read back from the footers of the shards that hold them: the rare path
    /// (videos that left the source), so the ids are not held for every video.
    pub async fn ids_of(
        &self,
        keys: &HashSet<u64>,
    ) -> Result<Vec<(String, String, String)>, RunError> {
        let mut shards: Vec<u32> = keys
            .iter()
            .filter_map(|k| {
                self.done
                    .get(k)
                    .copied()
                    .or_else(|| self.rejected.get(k).map(|r| r.shard))
            })
            .collect();
        shards.sort_unstable();
        shards.dedup();
        let mut out = vec![];
        for idx in shards {
            let path = &self.shards[idx as usize];
            let c = read_shard(self.store.as_ref(), path, false).await?;
            for v in c.videos.iter().chain(&c.rejected) {
                let key = id_key(v);
                let here = self
                    .done
                    .get(&key)
                    .copied()
                    .or_else(|| self.rejected.get(&key).map(|r| r.shard));
                if keys.contains(&key) && here == Some(idx) {
                    out.push((v.clone(), path.clone(), self.sums[idx as usize].clone()));
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
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

/// Sets aside shards written with other settings (so readers never mix them) and lists what the
/// rest finished, for the videos `keep` accepts (this worker's rank). Only footers are kept.
pub async fn load_prior<R: Serialize + DeserializeOwned>(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    slot_prefix: &str,
    keep: Arc<dyn Fn(&str) -> bool + Send + Sync>,
) -> Result<Prior<R>, RunError> {
    gather(store, stage_id, fingerprint, slot_prefix, keep, true).await
}

/// What a run would find settled, as `load_prior` lists it, for every video, without writing
/// anything: shards of other settings, damaged shards and missing records are passed over, not
/// set aside or repaired (`run --dry-run`).
pub async fn peek_prior(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
) -> Result<Prior<serde_json::Value>, RunError> {
    gather(
        store,
        stage_id,
        fingerprint,
        "",
        Arc::new(|_: &str| true),
        false,
    )
    .await
}

/// `load_prior`'s listing; with `repair` it also sets aside what must not be read and writes
/// what a crash left unwritten.
async fn gather<R: Serialize + DeserializeOwned>(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    slot_prefix: &str,
    keep: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    repair: bool,
) -> Result<Prior<R>, RunError> {
    let mut prior = Prior {
        store: store.clone(),
        shards: vec![],
        sums: vec![],
        done: HashMap::new(),
        rejected: HashMap::new(),
        stamps: HashMap::new(),
        next_slot: 0,
        keep: keep.clone(),
        open: Default::default(),
        _row: PhantomData,
    };
    let own_slots = format!("{stage_id}/{slot_prefix}");
    let (files, rejects) = stage_files(store, stage_id).await?;
    let retired = Retired::load(store.as_ref(), stage_id).await?;
    let mut unrecorded = match repair {
        true => forget_missing(store.as_ref(), stage_id, &files).await?,
        false => HashSet::new(),
    };
    for (path, is_reject) in files {
        let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
            continue;
        };
        // Only a slot committed right before a crash lacks its record: written here once its
        // bytes have passed the footer's check.
        let sum = unrecorded
            .remove(&path)
            .then(|| commits::ObjectSum::of(&path, &data, None));
        let contents = match repair {
            true => decode_or_set_aside(store.as_ref(), &path, data).await?,
            false => decode_parquet(data, false).ok(),
        };
        let Some(contents) = contents else {
            continue;
        };
        if let Some(object) = sum.filter(|_| contents.fingerprint.as_deref() == Some(fingerprint)) {
            write_missing_record(store.as_ref(), stage_id, &path, object, &contents).await?;
        }
        if contents.fingerprint.as_deref() != Some(fingerprint) {
            if repair {
                set_aside_superseded(store.as_ref(), stage_id, &path, contents).await?;
            }
            continue;
        }
        if let Some(n) = part_number(&path).filter(|_| path.starts_with(&own_slots)) {
            prior.next_slot = prior.next_slot.max(n + 1);
        }
        let sum = contents.commit_id.clone();
        let live = |v: &String| keep(v) && !retired.is_retired(&path, &sum, v);
        if !is_reject && repair {
            restore_rejects(store.as_ref(), &contents, stage_id, &rejects).await?;
        }
        prior.add_committed(&path, &contents, is_reject, &rejects, live);
    }
    Ok(prior)
}

impl<R> Prior<R> {
    /// Counts a committed shard's videos that `mine` accepts: those it rejects as rejected, the
    /// others as done (the shard is kept when it settled any of them), with what each was
    /// computed from. A reject shard of an earlier version rejects all its videos.
    fn add_committed(
        &mut self,
        path: &str,
        contents: &ShardContents,
        is_reject: bool,
        rejects: &HashSet<String>,
        mine: impl Fn(&String) -> bool,
    ) {
        let idx = self.shards.len() as u32;
        let mut settled_any = false;
        let stamp_of = |i: usize| contents.stamps.get(i).copied().flatten();
        let n_done = if is_reject { 0 } else { contents.videos.len() };
        for (i, v) in contents.videos.iter().enumerate().take(n_done) {
            if mine(v) {
                self.settle(id_key(v), stamp_of(i), None);
                self.done.insert(id_key(v), idx);
                settled_any = true;
            }
        }
        let (rejected, transient) = if is_reject {
            (contents.videos.clone(), HashSet::new())
        } else {
            let t = transient_rejects(contents.reject_rows.as_deref());
            (committed_rejects(contents, rejects), t)
        };
        let offset = if is_reject { 0 } else { contents.videos.len() };
        let at: HashMap<&String, usize> = contents.rejected.iter().zip(offset..).collect();
        for v in rejected.iter().filter(|v| mine(v)) {
            let stamp = at.get(v).and_then(|&i| stamp_of(i));
            let r = Rejected {
                shard: idx,
                transient: transient.contains(v),
            };
            self.settle(id_key(v), stamp, Some(r));
            settled_any = true;
        }
        if settled_any {
            self.shards.push(path.to_string());
            self.sums.push(contents.commit_id.clone());
        }
    }

    /// Records one settled video (a later shard's settlement replaces an earlier one's: a video
    /// committed again after its old rows were retired).
    fn settle(&mut self, key: u64, stamp: Option<Stamp>, reject: Option<Rejected>) {
        self.done.remove(&key);
        self.rejected.remove(&key);
        match stamp {
            Some(s) => self.stamps.insert(key, s),
            None => self.stamps.remove(&key),
        };
        if let Some(r) = reject {
            self.rejected.insert(key, r);
        }
    }
}

/// The shard's footers, or None when it is damaged (then set aside, see `set_aside_damaged`).
async fn decode_or_set_aside(
    store: &dyn Store,
    path: &str,
    data: Vec<u8>,
) -> Result<Option<ShardContents>, RunError> {
    match decode_parquet(data, false) {
        Ok(c) => Ok(Some(c)),
        Err(e) => {
            let why = match e {
                super::read::DecodeError::Damaged(why) => why,
                other => format!("unreadable: {other}"),
            };
            set_aside_damaged(store, path, &why).await?;
            Ok(None)
        }
    }
}

/// Writes the commit record a slot committed right before a crash lacks, from its checked bytes.
async fn write_missing_record(
    store: &dyn Store,
    stage_id: &str,
    path: &str,
    object: commits::ObjectSum,
    contents: &ShardContents,
) -> Result<(), RunError> {
    let rec = commits::CommitRecord {
        object,
        stage: Some(stage_id.to_string()),
        videos: contents
            .videos
            .iter()
            .chain(&contents.rejected)
            .cloned()
            .collect(),
        objects: contents.objects.clone(),
        committed_at: crate::store::manifest::now(),
    };
    commits::write_record(store, &rec)
        .await
        .map_err(|e| RunError::io(commits::record_path(path), e))?;
    Ok(())
}

/// Moves a shard written with other settings (its record, itself, its rejects shard) under
/// `_superseded/<its fingerprint>/`, so readers never mix settings.
async fn set_aside_superseded(
    store: &dyn Store,
    stage_id: &str,
    path: &str,
    contents: ShardContents,
) -> Result<(), RunError> {
    let old = contents.fingerprint.unwrap_or_else(|| "unknown".into());
    let to = format!("{SUPERSEDED_DIR}/{old}/{path}");
    tracing::info!(stage = stage_id, from = %path, to = %to, "Settings changed: setting old shard aside.");
    // The record first: a shard without its record is read as one, a record without
    // its shard as a deleted shard.
    let record = commits::record_path(path);
    set_aside(store, &record, &format!("{SUPERSEDED_DIR}/{old}/{record}")).await?;
    set_aside(store, path, &to).await?;
    if let Some(r) = contents.rejects_file {
        let to = format!("{SUPERSEDED_DIR}/{old}/{r}");
        set_aside(store, &r, &to).await?;
    }
    Ok(())
}

/// Moves a damaged shard (and its commit record) to `_damaged/` with a note, and says so in one
/// warning line: its videos are then not done, so this run computes exactly them again.
async fn set_aside_damaged(store: &dyn Store, path: &str, why: &str) -> Result<(), RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let videos = commits::read_record(store, path)
        .await
        .map(|r| format!("its {}", commits::videos(r.videos.len())))
        .unwrap_or_else(|| "its videos".into());
    let to = commits::set_aside_damaged(store, path, why)
        .await
        .map_err(|e| io(path, e))?;
    let record = commits::record_path(path);
    set_aside(
        store,
        &record,
        &format!("{}/{record}", commits::DAMAGED_DIR),
    )
    .await?;
    tracing::warn!(
        "{}/{path} is damaged ({why}): moved to {to}; this run computes {videos} again.",
        store.location()
    );
    Ok(())
}

/// Commit records of this stage whose shard is gone (deleted, lost in a copy): each is moved to
/// `_damaged/` with a note and a warning, so the shard's videos, no longer done, are computed
/// again and `verify` stops reporting it. Returns the listed shards that have no record.
async fn forget_missing(
    store: &dyn Store,
    stage_id: &str,
    files: &[(String, bool)],
) -> Result<HashSet<String>, RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let dir = format!("{}/{stage_id}", commits::COMMITS_DIR);
    let records: HashSet<String> = store
        .list(&dir)
        .await
        .map_err(|e| io(&dir, e))?
        .into_iter()
        .filter_map(|r| commits::object_of_record(&r).map(str::to_string))
        .collect();
    let listed: HashSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    for object in records.iter().filter(|o| !listed.contains(o.as_str())) {
        let Some(rec) = commits::read_record(store, object).await else {
            continue;
        };
        // Listed before the shards: one committed since then is not missing.
        if store.exists(object).await.map_err(|e| io(object, e))? {
            continue;
        }
        let record = commits::record_path(object);
        let to = commits::set_aside_damaged(store, &record, "its shard is missing")
            .await
            .map_err(|e| io(&record, e))?;
        tracing::warn!(
            "{}/{object} is missing: its commit record moved to {to}; this run computes its {} again.",
            store.location(),
            commits::videos(rec.videos.len())
        );
    }
    Ok(listed
        .into_iter()
        .filter(|p| !records.contains(*p))
        .map(str::to_string)
        .collect())
}

/// Moves a shard of superseded settings aside; one another worker moved already is fine.
async fn set_aside(store: &dyn Store, from: &str, to: &str) -> Result<(), RunError> {
    match store.rename(from, to).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(store.io_error(from, e)),
        _ => Ok(()),
    }
}
