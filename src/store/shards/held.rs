//! Held rows: a stage's rows (and rejects) of videos the run's selection no longer sends to it (a
//! threshold raised, a title that now scores lower) are kept, so that sending them there again
//! costs nothing, but apart from the table's files, where a reader of the folder does not see
//! them: `<stage>/_held/` and `rejects/_held/` (pyarrow's and `datasets`' discovery skip paths
//! that start with `_`; the globs `<stage>/*.parquet` of DuckDB and Polars do not descend).
//!
//! Reads the shards that hold the videos; writes a held copy of their rows (its rejects shard
//! first, then the shard, then its commit record), then the tombstones that retire them from the
//! shards readers see; the end-of-pass compaction writes those again without them. A held copy
//! is a committed shard like any other, so every reader of ours, `verify` and the next run's
//! resume know it; a stage that is sent a held video again writes its rows (or reject) back
//! into a shard of the table, uncomputed, and retires the held copy (`runtime::rerun::decide`).
//! Called by the runner at the end of a complete single-process pass only: workers of a ranked
//! run share the tables, and nothing compacts them there.

use super::compact::write_part;
use super::read::{decode_parquet, get_unless_moved};
use super::retired::{self, Retired, RetiredEntry, why};
use super::{HELD_DIR, is_held};
use crate::error::RunError;
use crate::store::Store;
use std::collections::{BTreeMap, HashSet};

/// Where the held copy of `path` (a table's shard or a rejects shard) goes: beside the folder's
/// files, under `_held/`, named for what it holds (`tag`), so that no two copies take one name.
fn held_path(path: &str, tag: &str) -> String {
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    let stem = file.strip_suffix(".parquet").unwrap_or(file);
    format!("{dir}/{HELD_DIR}/{stem}-{tag}.parquet")
}

/// What a held copy of `videos` of the commit `sum` is named for.
fn tag_of(sum: &str, videos: &HashSet<&str>) -> String {
    let mut ids: Vec<&str> = videos.iter().copied().collect();
    ids.sort_unstable();
    let h = blake3::hash(format!("{sum}\n{}", ids.join("\n")).as_bytes());
    h.to_hex()[..12].to_string()
}

/// Holds the settlements `unsent` ((video, shard, commit): this stage's, of videos this pass did
/// not send to it) that are still live in shards readers see; returns how many videos it held.
/// Settlements retired meanwhile (a video that left the source) stay retired, and a video
/// already held (a copy left by a crash between the copy and its tombstone) is only retired.
pub async fn hold(
    store: &dyn Store,
    stage: &str,
    unsent: &[(String, String, String)],
    name: &str,
) -> Result<u64, RunError> {
    let retired = Retired::load(store, stage).await?;
    let mut by_shard: BTreeMap<(&str, &str), HashSet<&str>> = BTreeMap::new();
    let mut held_already: HashSet<&str> = HashSet::new();
    for (video, shard, sum) in unsent {
        if retired.is_retired(shard, sum, video) {
            continue;
        }
        if is_held(shard) {
            held_already.insert(video);
        } else {
            by_shard.entry((shard, sum)).or_default().insert(video);
        }
    }
    let mut tombstones = vec![];
    for ((shard, sum), videos) in by_shard {
        let copy: HashSet<&str> = videos.difference(&held_already).copied().collect();
        if !copy.is_empty() {
            copy_held(store, stage, shard, sum, &copy).await?;
        }
        tombstones.extend(videos.iter().map(|v| RetiredEntry {
            shard: shard.to_string(),
            commit: sum.to_string(),
            video: v.to_string(),
            why: why::HELD.into(),
        }));
    }
    retired::retire(store, stage, name, &tombstones).await?;
    Ok(tombstones.len() as u64)
}

/// The reject (reason, detail) a held shard's footer records for `id`: what a stage that is
/// sent the video again records anew, uncomputed.
pub async fn held_reject(
    store: &dyn Store,
    shard: &str,
    id: &str,
) -> Result<Option<(String, String)>, RunError> {
    let c = super::read::read_shard(store, shard, false).await?;
    Ok(super::write::reject_row_of(c.reject_rows.as_deref(), id))
}

/// Writes the rows and rejects of `videos` of shard `shard` (commit `sum`) as a held copy.
async fn copy_held(
    store: &dyn Store,
    stage: &str,
    shard: &str,
    sum: &str,
    videos: &HashSet<&str>,
) -> Result<(), RunError> {
    let Some(data) = get_unless_moved(store, shard).await? else {
        return Err(RunError::Internal(format!(
            "{shard}: gone while its rows were being held"
        )));
    };
    let c = decode_parquet(data, true)
        .map_err(|e| RunError::Internal(format!("{shard}: unreadable shard: {e}")))?;
    if c.commit_id != sum {
        return Err(RunError::Internal(format!(
            "{shard}: another commit than the one whose rows were to be held"
        )));
    }
    let others: HashSet<String> = c
        .videos
        .iter()
        .chain(&c.rejected)
        .filter(|v| !videos.contains(v.as_str()))
        .cloned()
        .collect();
    let tag = tag_of(sum, videos);
    let rejects = c.rejects_file.as_deref().map(|r| held_path(r, &tag));
    write_part(
        store,
        stage,
        &c,
        &others,
        &held_path(shard, &tag),
        rejects.as_deref(),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_copies_sit_in_an_underscore_folder_beside_the_files() {
        assert_eq!(
            held_path("probe/part-00003.parquet", "ab12cd34ef56"),
            "probe/_held/part-00003-ab12cd34ef56.parquet"
        );
        assert_eq!(
            held_path("rejects/probe-slot-r0001-part-00003.parquet", "x"),
            "rejects/_held/probe-slot-r0001-part-00003-x.parquet"
        );
        let (a, b) = (HashSet::from(["v1"]), HashSet::from(["v1", "v2"]));
        assert_ne!(tag_of("c", &a), tag_of("c", &b));
        assert_ne!(tag_of("c", &a), tag_of("d", &a));
        assert!(is_held("probe/_held/part-00003-ab.parquet"));
        assert!(!is_held("probe/part-00003.parquet"));
        assert!(!is_held("held_probe/part-00003.parquet"));
    }
}
