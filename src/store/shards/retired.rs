//! Retired rows: the one way a video's committed rows leave a table without rewriting its shard.
//!
//! Shards are immutable once committed, so when a rerun finds that a video's stored rows no longer
//! hold (its inputs changed, its extra columns changed, it left the source, or its reject was a
//! transient one worth trying again), the runtime writes a tombstone naming the shard and the
//! video, and every reader of the table (`load_prior`, `read_table`, `for_each_batch`, the
//! selection scan, `read_new_slots`) skips that video's rows and reject in that shard. A tombstone
//! names a shard by its path and its commit id (its footer's `vidcurate.commit`), not only a
//! video: the rows the rerun commits for the same video, in a later shard, are
//! untouched by it, and so is a later shard that takes the same path (slots are numbered again
//! after settings change) or the shard compaction writes in place.
//!
//! Reads and writes `retired/<stage>/*.json` (one file per commit that retires anything, written
//! before that commit, so a crash in between leaves the video undone rather than doubled). The
//! files are the run's history of what left and why, which `status` and `verify` show.

use crate::error::RunError;
use crate::store::Store;
use arrow::array::{BooleanArray, RecordBatch};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The folder of the tombstones, one subfolder per stage table.
pub const RETIRED_DIR: &str = "retired";

/// Why rows were retired; the `why` of an entry.
pub mod why {
    pub const INPUTS_CHANGED: &str = "inputs_changed";
    pub const EXTRAS_CHANGED: &str = "extra_columns_changed";
    pub const SOURCE_CHANGED: &str = "source_row_changed";
    pub const REMOVED: &str = "removed_from_source";
    pub const RETRIED: &str = "transient_reject_retried";
    pub const NOW_REJECTED: &str = "now_rejected_by_source";
    pub const NOW_LISTED: &str = "now_listed_by_source";
    /// The run's selection no longer sends the video to the stage: its rows are held apart
    /// (`shards::held`).
    pub const HELD: &str = "held_not_selected";
    /// Sent to the stage again: its held rows are back in the table, uncomputed.
    pub const RESTORED: &str = "restored_selected_again";
}

/// One video's rows (or reject) of one shard, retired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetiredEntry {
    /// The committed shard (a slot, or a reject shard of an earlier version) that holds them.
    pub shard: String,
    /// That shard's commit id (its footer's `vidcurate.commit`; in shards older than it, the
    /// BLAKE3 of its rows).
    #[serde(default)]
    pub commit: String,
    pub video: String,
    pub why: String,
}

/// One tombstone file: what one commit (or the source's end) retired, and when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetiredFile {
    pub stage: String,
    pub retired_at: String,
    pub entries: Vec<RetiredEntry>,
}

/// Writes `entries` of `stage` as one tombstone file named after `name` (the slot it precedes,
/// say) and its content, so two workers never overwrite each other's.
pub async fn retire(
    store: &dyn Store,
    stage: &str,
    name: &str,
    entries: &[RetiredEntry],
) -> Result<(), RunError> {
    if entries.is_empty() {
        return Ok(());
    }
    let file = RetiredFile {
        stage: stage.to_string(),
        retired_at: crate::store::manifest::now(),
        entries: entries.to_vec(),
    };
    let json = serde_json::to_vec_pretty(&file)
        .map_err(|e| RunError::Internal(format!("tombstone: {e}")))?;
    let tag = &blake3::hash(&json).to_hex()[..12];
    let path = format!("{RETIRED_DIR}/{stage}/{name}-{tag}.json");
    store
        .put(&path, json)
        .await
        .map_err(|e| store.io_error(&path, e))
}

/// Every tombstone file of `stage` (the table's history), oldest name first.
pub async fn history(store: &dyn Store, stage: &str) -> Result<Vec<RetiredFile>, RunError> {
    let dir = format!("{RETIRED_DIR}/{stage}");
    let mut paths = store
        .list(&dir)
        .await
        .map_err(|e| store.io_error(&dir, e))?;
    paths.retain(|p| p.ends_with(".json"));
    paths.sort();
    let mut out = vec![];
    for p in paths {
        let data = store.get(&p).await.map_err(|e| store.io_error(&p, e))?;
        let file: RetiredFile = serde_json::from_slice(&data).map_err(|e| {
            RunError::Internal(format!(
                "{}/{p}: unreadable tombstone: {e}",
                store.location()
            ))
        })?;
        out.push(file);
    }
    Ok(out)
}

/// How many videos each reason retired from `stage`, over the run's history.
pub async fn counts(store: &dyn Store, stage: &str) -> Result<BTreeMap<String, u64>, RunError> {
    let mut out = BTreeMap::new();
    for f in history(store, stage).await? {
        for e in f.entries {
            *out.entry(e.why).or_default() += 1;
        }
    }
    Ok(out)
}

/// Per table, how many videos each reason retired over the run's history (for `status`).
pub async fn all_counts(
    store: &dyn Store,
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, RunError> {
    let files = store
        .list(RETIRED_DIR)
        .await
        .map_err(|e| store.io_error(RETIRED_DIR, e))?;
    let tables: std::collections::BTreeSet<String> = files
        .iter()
        .filter_map(|p| {
            p.strip_prefix(&format!("{RETIRED_DIR}/"))?
                .split('/')
                .next()
        })
        .map(str::to_string)
        .collect();
    let mut out = BTreeMap::new();
    for t in tables {
        out.insert(t.clone(), counts(store, &t).await?);
    }
    Ok(out)
}

/// The retired (shard, video) pairs of one table, for its readers.
#[derive(Debug, Clone, Default)]
pub struct Retired {
    /// (shard path, its commit id) → the videos retired in it.
    by_shard: HashMap<(String, String), HashSet<String>>,
}

impl Retired {
    pub async fn load(store: &dyn Store, stage: &str) -> Result<Self, RunError> {
        let mut r = Retired::default();
        for f in history(store, stage).await? {
            for e in f.entries {
                r.by_shard
                    .entry((e.shard, e.commit))
                    .or_default()
                    .insert(e.video);
            }
        }
        Ok(r)
    }

    pub fn is_empty(&self) -> bool {
        self.by_shard.is_empty()
    }

    /// Each shard (path, commit id) with retired videos, and those videos.
    pub fn shards(&self) -> impl Iterator<Item = (&(String, String), &HashSet<String>)> {
        self.by_shard.iter()
    }

    /// The retired videos of the commit `sum` of `shard` (None: none).
    pub fn in_shard(&self, shard: &str, sum: &str) -> Option<&HashSet<String>> {
        if self.by_shard.is_empty() {
            return None;
        }
        self.by_shard
            .get(&(shard.to_string(), sum.to_string()))
            .filter(|s| !s.is_empty())
    }

    pub fn is_retired(&self, shard: &str, sum: &str, video: &str) -> bool {
        self.in_shard(shard, sum).is_some_and(|s| s.contains(video))
    }

    /// `videos` of `shard` without its retired ones.
    pub fn live(&self, shard: &str, sum: &str, videos: Vec<String>) -> Vec<String> {
        match self.in_shard(shard, sum) {
            None => videos,
            Some(gone) => videos.into_iter().filter(|v| !gone.contains(v)).collect(),
        }
    }

    /// `batches` of `shard` without the rows of its retired videos.
    pub fn filter(
        &self,
        shard: &str,
        sum: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>, RunError> {
        let Some(gone) = self.in_shard(shard, sum) else {
            return Ok(batches);
        };
        batches
            .into_iter()
            .map(|b| without_videos(&b, gone))
            .collect()
    }
}

/// `batch` without the rows whose `video_id` is in `gone` (a batch without that column is kept).
pub fn without_videos(
    batch: &RecordBatch,
    gone: &HashSet<String>,
) -> Result<RecordBatch, RunError> {
    let Some(ids) = batch
        .column_by_name(crate::record::COL_VIDEO_ID)
        .and_then(|c| c.as_any().downcast_ref::<arrow::array::StringArray>())
    else {
        return Ok(batch.clone());
    };
    let keep: BooleanArray = ids
        .iter()
        .map(|v| Some(!v.is_some_and(|v| gone.contains(v))))
        .collect();
    arrow::compute::filter_record_batch(batch, &keep)
        .map_err(|e| RunError::Internal(format!("filtering retired rows: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support;

    #[tokio::test]
    async fn tombstones_name_a_shard_and_a_video() {
        let (_tmp, store) = test_support::run_dir();
        let e = |shard: &str, video: &str| RetiredEntry {
            shard: shard.into(),
            commit: "s".into(),
            video: video.into(),
            why: why::INPUTS_CHANGED.into(),
        };
        retire(
            store.as_ref(),
            "probe",
            "part-00001",
            &[e("probe/part-00000.parquet", "a")],
        )
        .await
        .unwrap();
        retire(
            store.as_ref(),
            "probe",
            "part-00002",
            &[e("probe/part-00001.parquet", "b")],
        )
        .await
        .unwrap();
        let r = Retired::load(store.as_ref(), "probe").await.unwrap();
        assert!(r.is_retired("probe/part-00000.parquet", "s", "a"));
        assert!(
            !r.is_retired("probe/part-00001.parquet", "s", "a"),
            "only in the shard named"
        );
        assert!(
            !r.is_retired("probe/part-00000.parquet", "other", "a"),
            "not in another shard at that path"
        );
        assert!(r.is_retired("probe/part-00001.parquet", "s", "b"));
        assert_eq!(
            r.live(
                "probe/part-00000.parquet",
                "s",
                vec!["a".into(), "c".into()]
            ),
            vec!["c".to_string()]
        );
        let n = counts(store.as_ref(), "probe").await.unwrap();
        assert_eq!(n.get(why::INPUTS_CHANGED), Some(&2));
        assert!(
            Retired::load(store.as_ref(), "ocr")
                .await
                .unwrap()
                .is_empty()
        );
    }
}
