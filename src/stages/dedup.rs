//! `dedup`: perceptual hashes of each video's sampled frames, so that re-uploads and crops of the
//! same footage can be found across videos (`vidcurate split --dedup` keeps each cluster in one
//! split, or one video of it).
//!
//! Reads: the `frames` slot (the JPEGs through the run's store). Writes: one row per video: the
//! frame indices and a 64-bit gradient hash (image_hasher's `Gradient`, 8×8: the sign of the
//! brightness change between neighbouring cells of a 9×8 grey thumbnail) of each frame, base64.
//! Calls: nothing. Caches: nothing beyond its shards. Clustering is across videos, so it is not
//! done here but by `split` (`cluster` below), from the stored rows.

use crate::config::{ConfigError, Seg};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupConfig {}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FrameHashes {
    pub frame_indices: Vec<u32>,
    /// One per frame, `ImageHash::to_base64` of the 64-bit gradient hash.
    pub hashes: Vec<String>,
}

pub struct DedupStage;

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "dedup",
    about: "perceptual hashes of the sampled frames, to find re-uploads and crops across videos (split --dedup)",
    build: super::build_plain::<DedupConfig>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::Skip,
    keys: &[("compute", crate::config::keys_of::<DedupConfig>)],
};

impl super::PlainStage for DedupConfig {
    const IN_FLIGHT: usize = 4;
    fn task(self, _at: &[Seg], _bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        Ok(super::processor_task(DedupStage))
    }
}

fn hasher() -> image_hasher::Hasher {
    image_hasher::HasherConfig::new()
        .hash_size(8, 8)
        .hash_alg(image_hasher::HashAlg::Gradient)
        .to_hasher()
}

#[async_trait]
impl Processor for DedupStage {
    type Row = FrameHashes;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Dedup
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<FrameHashes>, StageError> {
        let mut jpegs = vec![];
        for f in rec.frames.as_deref().unwrap_or_default() {
            let data = crate::runtime::stage::frame_jpeg(cx.store.as_ref(), f).await?;
            jpegs.push((f.frame_index, data));
        }
        cx.cpu
            .run(move || {
                let h = hasher();
                let mut out = FrameHashes::default();
                for (i, data) in jpegs {
                    let img = image::load_from_memory(&data).map_err(|e| {
                        StageError::data("unreadable_frame", format!("frame {i}: {e}"))
                    })?;
                    out.frame_indices.push(i);
                    out.hashes.push(h.hash_image(&img).to_base64());
                }
                Ok(vec![out])
            })
            .await
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<FrameHashes>) {}
}

/// Near-duplicate clusters: video → the smallest video id of its cluster. Two videos are joined
/// when at least `min_share` of the frames of the one with fewer frames have a frame in the other
/// within `max_distance` bits (of 64). Candidates are pairs sharing one 16-bit band of a frame
/// hash exactly (4 bands, so any two hashes within 3 bits are always compared).
pub fn cluster(
    videos: &HashMap<String, Vec<u64>>,
    max_distance: u32,
    min_share: f64,
) -> HashMap<String, String> {
    let ids: Vec<&String> = {
        let mut v: Vec<&String> = videos.keys().collect();
        v.sort();
        v
    };
    let mut parent: Vec<usize> = (0..ids.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut bands: HashMap<(u8, u16), Vec<usize>> = HashMap::new();
    for (n, id) in ids.iter().enumerate() {
        for h in &videos[*id] {
            for b in 0..4u8 {
                let key = (b, (h >> (16 * b as u64)) as u16);
                let list = bands.entry(key).or_default();
                if list.last() != Some(&n) {
                    list.push(n);
                }
            }
        }
    }
    let mut pairs: Vec<(usize, usize)> = bands
        .values()
        .flat_map(|list| {
            list.iter()
                .enumerate()
                .flat_map(move |(i, a)| list[i + 1..].iter().map(move |b| (*a, *b)))
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    for (a, b) in pairs {
        let (ha, hb) = (&videos[ids[a]], &videos[ids[b]]);
        let (few, many) = if ha.len() <= hb.len() {
            (ha, hb)
        } else {
            (hb, ha)
        };
        if few.is_empty() {
            continue;
        }
        let matched = few
            .iter()
            .filter(|x| many.iter().any(|y| (*x ^ *y).count_ones() <= max_distance))
            .count();
        if matched as f64 >= min_share * few.len() as f64 {
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            if ra != rb {
                parent[ra.max(rb)] = ra.min(rb);
            }
        }
    }
    (0..ids.len())
        .map(|n| (ids[n].clone(), ids[root(&mut parent, n)].clone()))
        .collect()
}

/// The 64-bit value of a stored hash.
pub fn hash_bits(b64: &str) -> Option<u64> {
    let h = image_hasher::ImageHash::<Box<[u8]>>::from_base64(b64).ok()?;
    let bytes = h.as_bytes();
    (bytes.len() == 8).then(|| u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_hashes_join_and_far_ones_do_not() {
        let v: HashMap<String, Vec<u64>> = [
            ("a", vec![0xFFFF_0000_FFFF_0000, 0x1234_5678_9ABC_DEF0]),
            // 2 bits off on each frame: a crop or a re-encode.
            ("b", vec![0xFFFF_0000_FFFF_0003, 0x1234_5678_9ABC_DEF3]),
            ("c", vec![0x0F0F_0F0F_0F0F_0F0F, 0xAAAA_5555_AAAA_5555]),
            ("d", vec![]),
        ]
        .into_iter()
        .map(|(id, hashes)| (id.to_string(), hashes))
        .collect();
        let c = cluster(&v, 10, 0.5);
        assert_eq!(c["a"], "a");
        assert_eq!(c["b"], "a");
        assert_eq!(c["c"], "c");
        assert_eq!(c["d"], "d");
    }
}
