//! Compaction: the shards that hold retired rows rewritten without them, so that after a
//! complete rerun the table's files hold what a clean run's hold, for every reader, pyarrow and
//! DuckDB included (ours honour the tombstones anyway).
//!
//! Reads a table's tombstones and the shards they name. Writes each such shard again in place
//! (its rejects shard first, then the slot, then its commit record), or deletes it when nothing in
//! it is live. The tombstones stay: they are the run's history of what left and why. Called by
//! the runner at the end of a complete single-process pass (workers of a ranked run share the
//! tables, so there readers rely on the tombstones alone).

use super::encode::{Footer, encode_parquet};
use super::read::{ShardContents, get_unless_moved};
use super::retired::{Retired, without_videos};
use super::write::FooterRejects;
use crate::error::RunError;
use crate::record::Stamp;
use crate::store::Store;
use crate::store::commits::{self, CommitRecord, ObjectSum};
use std::collections::HashSet;

/// Rewrites every shard of `stage` that holds retired rows; returns how many it rewrote.
pub async fn compact(store: &dyn Store, stage: &str) -> Result<u64, RunError> {
    let retired = Retired::load(store, stage).await?;
    let mut n = 0;
    let mut shards: Vec<(&(String, String), &HashSet<String>)> = retired.shards().collect();
    shards.sort_by(|a, b| a.0.cmp(b.0));
    for ((path, sum), gone) in shards {
        // Reject shards of earlier versions are left to the tombstones.
        if !path.starts_with(&format!("{stage}/")) {
            continue;
        }
        let Some(data) = get_unless_moved(store, path).await? else {
            continue;
        };
        let unreadable = |e| RunError::Internal(format!("{path}: unreadable shard: {e}"));
        let footer = super::read::decode_parquet(data.clone(), false).map_err(unreadable)?;
        // Another shard at that path (compacted already, or a slot numbered again): not these.
        if footer.commit_id != *sum
            || !footer
                .videos
                .iter()
                .chain(&footer.rejected)
                .any(|v| gone.contains(v))
        {
            continue;
        }
        let c = super::read::decode_parquet(data, true).map_err(unreadable)?;
        // A slot of a version whose footer does not carry its reject rows cannot rebuild its
        // rejects shard: left to the tombstones.
        let old_rejects = c.rejects_file.is_some() && c.reject_rows.is_none();
        if old_rejects || !c.videos.iter().chain(&c.rejected).any(|v| gone.contains(v)) {
            continue;
        }
        rewrite(store, stage, path, c, gone).await?;
        n += 1;
    }
    Ok(n)
}

/// Writes shard `path` again without the videos in `gone` (or deletes it when none is left).
async fn rewrite(
    store: &dyn Store,
    stage: &str,
    path: &str,
    c: ShardContents,
    gone: &HashSet<String>,
) -> Result<(), RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let live = |v: &String| !gone.contains(v);
    if !c.videos.iter().chain(&c.rejected).any(live) {
        // The record first: a record without its shard reads as a lost shard.
        let record = commits::record_path(path);
        let _ = store.delete(&record).await;
        store.delete(path).await.map_err(|e| io(path, e))?;
        if let Some(r) = &c.rejects_file {
            let _ = store.delete(r).await;
        }
        return Ok(());
    }
    let stale_rejects = c.rejects_file.clone();
    let written = write_part(store, stage, &c, gone, path, c.rejects_file.as_deref()).await?;
    // The slot no longer names it.
    if let Some(r) = stale_rejects.filter(|_| !written) {
        let _ = store.delete(&r).await;
    }
    Ok(())
}

/// Writes `c` without the videos in `gone` as a committed shard at `path` (its rejects, if any
/// are left, at `rejects_path`: first), then its commit record. Whether a rejects shard was
/// written. Compaction writes a shard again in place; holding copies part of one elsewhere.
pub(super) async fn write_part(
    store: &dyn Store,
    stage: &str,
    c: &ShardContents,
    gone: &HashSet<String>,
    path: &str,
    rejects_path: Option<&str>,
) -> Result<bool, RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let live = |v: &&String| !gone.contains(*v);
    let videos: Vec<String> = c.videos.iter().filter(live).cloned().collect();
    let rejected: Vec<String> = c.rejected.iter().filter(live).cloned().collect();
    let stamp_at = |i: usize| c.stamps.get(i).copied().flatten();
    let stamps: Vec<Option<Stamp>> = c
        .videos
        .iter()
        .chain(&c.rejected)
        .enumerate()
        .filter(|(_, v)| !gone.contains(*v))
        .map(|(i, _)| stamp_at(i))
        .collect();
    let fp = c.fingerprint.clone().unwrap_or_default();
    let rejects = live_rejects(c, gone, stage, &fp, rejects_path)?;
    let mut objects: Vec<ObjectSum> = c
        .objects
        .iter()
        .filter(|o| o.video.as_ref().is_some_and(|v| !gone.contains(v)))
        .cloned()
        .collect();
    if let Some((rpath, rbytes, _)) = &rejects {
        objects.push(ObjectSum::of(rpath, rbytes, None));
    }
    let batches = c
        .batches
        .iter()
        .map(|b| without_videos(b, gone))
        .collect::<Result<Vec<_>, _>>()?;
    let batch = arrow::compute::concat_batches(&c.schema, &batches)
        .map_err(|e| RunError::Internal(format!("{path}: {e}")))?;
    let footer = Footer {
        videos: &videos,
        stamps,
        rejected: &rejected,
        rejects_file: rejects.as_ref().map(|(p, _, _)| p.as_str()),
        reject_rows: rejects.as_ref().map(|(_, _, j)| j.as_str()),
        objects: &objects,
        commit: true,
    };
    let bytes = encode_parquet(&batch, &footer, stage, &fp)?;
    let written = rejects.is_some();
    if let Some((rpath, rbytes, _)) = rejects {
        store.put(&rpath, rbytes).await.map_err(|e| io(&rpath, e))?;
    }
    let record = CommitRecord {
        object: ObjectSum::of(path, &bytes, None),
        stage: Some(stage.to_string()),
        videos: videos.iter().chain(&rejected).cloned().collect(),
        objects,
        committed_at: crate::store::manifest::now(),
    };
    store.put(path, bytes).await.map_err(|e| io(path, e))?;
    commits::write_record(store, &record)
        .await
        .map_err(|e| io(&commits::record_path(path), e))?;
    Ok(written)
}

/// The slot's rejects shard without the videos in `gone`, to be written at `to`: (path, bytes,
/// rows as JSON), None when no reject is left.
fn live_rejects(
    c: &ShardContents,
    gone: &HashSet<String>,
    stage: &str,
    fp: &str,
    to: Option<&str>,
) -> Result<Option<(String, Vec<u8>, String)>, RunError> {
    let (Some(file), Some(json), Some(to)) = (&c.rejects_file, &c.reject_rows, to) else {
        return Ok(None);
    };
    let rows: FooterRejects = serde_json::from_str(json)
        .map_err(|e| RunError::Internal(format!("{file}: unreadable reject rows: {e}")))?;
    let rows = rows.without(gone);
    if rows.ids.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_string(&rows)
        .map_err(|e| RunError::Internal(format!("reject rows: {e}")))?;
    Ok(Some((to.to_string(), rows.shard(stage, fp)?, json)))
}
