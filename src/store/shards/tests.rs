//! Unit tests of the shard protocol: workers of one rank racing for slots commit every video
//! exactly once, and a slot whose rejects shard was lost gets it back from its footer.
//!
//! Reads and writes shards in a temp folder and an in-memory object store.

use super::*;
use crate::error::StageError;
use crate::store::Store;
use crate::store::test_support::{record as rec, run_dir};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct Row {
    worker: u32,
    n: u32,
}

/// What a resume of stage `probe` (fingerprint `fp`, slots `prefix`) finds, keeping every video.
async fn prior(store: &Arc<dyn Store>, prefix: &str) -> Prior<Row> {
    load_prior(store, "probe", "fp", prefix, Arc::new(|_: &str| true))
        .await
        .unwrap()
}

/// Four workers of one rank walk the same 60 videos from different starting points, settling
/// each (rows, or a reject) and committing every third video; returns the videos they lost.
async fn race_twins(store: &Arc<dyn Store>) -> u64 {
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..4u32 {
        let store = store.clone();
        tasks.spawn(async move {
            let mut w =
                shard_writer(store, "fp", "r0001-part-", 1000, Duration::from_secs(3600)).await;
            // Workers walk the same 60 videos from different starting points.
            for k in 0..60u32 {
                let id = format!("v{:02}", (k + worker * 15) % 60);
                if (k + worker) % 5 == 0 {
                    w.reject(&id, &[], &StageError::data("bad", "detail"), None);
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
    tasks.join_all().await.into_iter().sum()
}

/// The reject shards left are only those a commit adopted, and hold each rejected video once.
async fn assert_only_adopted_rejects_left(store: &Arc<dyn Store>, rejected_ids: &HashSet<String>) {
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
    let mut want: Vec<_> = rejected_ids.iter().cloned().collect();
    want.sort();
    assert_eq!(rejected, want);
}

/// Several workers of one rank settle overlapping videos (each its own way: rows, or a reject)
/// and commit in small slots at the same time: every video ends up settled exactly once, and
/// no reject attempt a commit did not adopt is left behind.
async fn twins_commit_each_video_once(store: Arc<dyn Store>) {
    let lost = race_twins(&store).await;
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
    assert_only_adopted_rejects_left(&store, &view.rejected).await;
    // Resume sees the same: nothing to redo, nothing twice.
    let prior = prior(&store, "r0001-part-").await;
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
    let (_dir, store) = run_dir();
    let mut w = shard_writer(store.clone(), "fp", "part-", 10, Duration::from_secs(60)).await;
    w.add(&rec("good"), vec![Row { worker: 0, n: 0 }]);
    w.reject("bad", &[], &StageError::data("bad", "detail"), None);
    w.flush().await.unwrap();
    let first = prior(&store, "part-").await;
    assert!(first.is_done("good") && first.is_rejected("bad"));
    assert_eq!(first.next_slot, 1);
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
    let again = prior(&store, "part-").await;
    assert!(again.is_done("good") && again.is_rejected("bad"));
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
    let (_dir, store) = run_dir();
    twins_commit_each_video_once(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twins_commit_each_video_once_in_memory() {
    let store = crate::store::open_run("memory://bucket/run", crate::store::Access::Own);
    twins_commit_each_video_once(store.unwrap()).await;
}
