//! Near-duplicates (`--dedup`, `--drop-duplicates`): the clusters of the run's `dedup` stage,
//! joined into one group each or thinned to one video.

use super::Item;
use crate::error::RunError;
use crate::store::shards::read_table;
use std::collections::HashMap;
use std::sync::Arc;

/// video → its near-duplicate cluster (the smallest id in it), from the run's `dedup` stage.
pub(super) async fn near_duplicates(
    store: &Arc<dyn crate::store::Store>,
    m: &crate::store::manifest::Manifest,
    selected: &[String],
    max_distance: u32,
) -> Result<HashMap<String, String>, RunError> {
    use crate::stages::dedup;
    let st = m
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == dedup::KIND.name)
        .ok_or_else(|| {
            RunError::Config(format!(
                "--dedup needs a `{}` stage in the run (after frames): add one and rerun the pipeline",
                dedup::KIND.name
            ))
        })?;
    let rows: HashMap<String, Vec<dedup::FrameHashes>> =
        read_table(store, &st.id, &st.fingerprint, true)
            .await?
            .rows()?;
    let hashes: HashMap<String, Vec<u64>> = selected
        .iter()
        .map(|v| {
            let h = rows
                .get(v)
                .into_iter()
                .flatten()
                .flat_map(|r| r.hashes.iter().filter_map(|h| dedup::hash_bits(h)))
                .collect();
            (v.clone(), h)
        })
        .collect();
    Ok(dedup::cluster(&hashes, max_distance, 0.5))
}

/// Items whose near-duplicates share their group (through any chain of groups and clusters),
/// or with all but one video of each cluster dropped; the number of clusters of two or more.
pub(super) fn join_duplicates(
    items: Vec<Item>,
    near: &HashMap<String, String>,
    drop: bool,
) -> (Vec<Item>, usize, Vec<String>) {
    let cluster_of = |id: &str| near.get(id).cloned().unwrap_or_else(|| id.to_string());
    let mut sizes: HashMap<String, usize> = HashMap::new();
    for it in &items {
        *sizes.entry(cluster_of(&it.video_id)).or_default() += 1;
    }
    let clusters = sizes.values().filter(|n| **n > 1).count();
    let items: Vec<Item> = items
        .into_iter()
        .map(|mut it| {
            let c = cluster_of(&it.video_id);
            it.cluster = (sizes[&c] > 1).then_some(c);
            it
        })
        .collect();
    if drop {
        let (keep, dropped): (Vec<Item>, Vec<Item>) = items
            .into_iter()
            .partition(|it| cluster_of(&it.video_id) == it.video_id);
        let mut dropped: Vec<String> = dropped.into_iter().map(|i| i.video_id).collect();
        dropped.sort();
        return (keep, clusters, dropped);
    }
    // Union of group keys: a cluster joins the groups of all its videos.
    let mut parent: HashMap<String, String> = HashMap::new();
    fn root(p: &mut HashMap<String, String>, k: &str) -> String {
        let mut k = k.to_string();
        while let Some(up) = p.get(&k).filter(|u| **u != k).cloned() {
            k = up;
        }
        k
    }
    let mut first_group: HashMap<String, String> = HashMap::new();
    for it in &items {
        let c = cluster_of(&it.video_id);
        match first_group.get(&c) {
            None => {
                first_group.insert(c, it.group.clone());
            }
            Some(g) => {
                let (a, b) = (root(&mut parent, g), root(&mut parent, &it.group));
                if a != b {
                    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                    parent.insert(hi, lo);
                }
            }
        }
    }
    let items = items
        .into_iter()
        .map(|mut it| {
            it.group = root(&mut parent, &it.group);
            it
        })
        .collect();
    (items, clusters, vec![])
}
