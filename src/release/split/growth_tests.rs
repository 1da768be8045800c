//! The property of a dataset that grows (issue 69), over 60 random growth sequences of three
//! versions each: videos added in channels already placed and in new ones, removed,
//! relabelled, items redrafted. Made again, a split never moves a video between splits; each
//! split's count per stratum stays within the bound the book states (the largest channel, plus
//! one for each video removed or relabelled since the split was made fresh) of its target; and
//! `versions::between` equals a diff of the two versions worked out here.

use super::*;
use crate::release::versions::{Item as ReleasedItem, Snapshot, Video, between};
use std::collections::{BTreeMap, BTreeSet};

/// xorshift64*: a seeded stream, enough for test data.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// One version's videos: id → (channel, label), and each video's item drafts (item → draft no.).
#[derive(Clone, Default)]
struct World {
    videos: BTreeMap<String, (String, String)>,
    drafts: BTreeMap<String, u32>,
    next: usize,
    channels: usize,
}

impl World {
    fn add(&mut self, rng: &mut Rng, n: usize) {
        for _ in 0..n {
            // Half of the new videos come from a channel already in the dataset.
            let ch = if self.channels > 0 && rng.below(2) == 0 {
                rng.below(self.channels as u64) as usize
            } else {
                self.channels += 1;
                self.channels - 1
            };
            let id = format!("v{:05}", self.next);
            self.next += 1;
            let label = if rng.below(3) == 0 { "fake" } else { "real" };
            self.videos
                .insert(id.clone(), (format!("ch{ch}"), label.into()));
            self.drafts.insert(format!("{id}-q"), 0);
        }
    }

    /// Removes, relabels and redrafts a few: how many were removed or relabelled.
    fn churn(&mut self, rng: &mut Rng) -> usize {
        let ids: Vec<String> = self.videos.keys().cloned().collect();
        let mut moved = 0;
        for id in ids {
            match rng.below(40) {
                0 => {
                    self.videos.remove(&id);
                    self.drafts.remove(&format!("{id}-q"));
                    moved += 1;
                }
                1 => {
                    let v = self.videos.get_mut(&id).unwrap();
                    v.1 = if v.1 == "fake" {
                        "real".into()
                    } else {
                        "fake".into()
                    };
                    moved += 1;
                }
                2 => *self.drafts.get_mut(&format!("{id}-q")).unwrap() += 1,
                _ => {}
            }
        }
        moved
    }

    fn items(&self) -> Vec<Item> {
        (self.videos.iter())
            .map(|(id, (ch, label))| Item {
                video_id: id.clone(),
                stratum: label.clone(),
                group: ch.clone(),
                cluster: None,
            })
            .collect()
    }

    /// The release of this version under `placed` (video → split).
    fn snapshot(&self, placed: &BTreeMap<String, usize>) -> Snapshot {
        let names = ["train", "validation", "test"];
        let mut s = Snapshot::default();
        for (id, (_, label)) in &self.videos {
            let split = names[placed[id]].to_string();
            let video = Video {
                split: split.clone(),
                label: Some(label.clone()),
            };
            s.videos.insert(id.clone(), video);
            let item = format!("{id}-q");
            let content = format!("draft {}", self.drafts[&item]);
            let it = ReleasedItem {
                video_id: id.clone(),
                split,
                content,
            };
            s.items.insert(format!("questions/{item}"), it);
        }
        s
    }
}

/// The changes from `a` to `b`, worked out without `versions`: (video, change).
fn diff(a: &Snapshot, b: &Snapshot) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (id, v) in &a.videos {
        match b.videos.get(id) {
            None => out.insert((id.clone(), "removed".into())),
            Some(w) if w.split != v.split => out.insert((id.clone(), "moved".into())),
            Some(w) if w.label != v.label => out.insert((id.clone(), "relabelled".into())),
            Some(_) => false,
        };
    }
    out.extend(
        b.videos
            .keys()
            .filter(|id| !a.videos.contains_key(*id))
            .map(|id| (id.clone(), "added".into())),
    );
    for (k, it) in &a.items {
        match b.items.get(k) {
            Some(n) if n.content != it.content => {
                out.insert((it.video_id.clone(), "item_redrafted".into()))
            }
            None => out.insert((it.video_id.clone(), "item_removed".into())),
            Some(_) => false,
        };
    }
    for (k, it) in b.items.iter().filter(|(k, _)| !a.items.contains_key(*k)) {
        let _ = k;
        out.insert((it.video_id.clone(), "item_added".into()));
    }
    out
}

/// The largest distance of a split's count of a stratum from its target.
fn drift(items: &[Item], placed: &[usize], ratios: &[f64]) -> f64 {
    let mut worst = 0f64;
    for stratum in ["fake", "real"] {
        let total = items.iter().filter(|i| i.stratum == stratum).count() as f64;
        for (s, r) in ratios.iter().enumerate() {
            let have = (items.iter().zip(placed))
                .filter(|(i, p)| i.stratum == stratum && **p == s)
                .count() as f64;
            worst = worst.max((have - r * total).abs());
        }
    }
    worst
}

#[test]
fn sixty_growth_sequences_keep_every_video_in_its_split_near_the_targets() {
    let ratios = [0.7, 0.1, 0.2];
    for seq in 0..60u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seq + 1));
        let mut world = World::default();
        let n = 60 + rng.below(140) as usize;
        world.add(&mut rng, n);
        let mut placed: BTreeMap<String, usize> = BTreeMap::new();
        let mut before: Option<Snapshot> = None;
        let mut churned = 0;
        for version in 0..3 {
            if version > 0 {
                churned += world.churn(&mut rng);
                let n = 5 + rng.below(40) as usize;
                world.add(&mut rng, n);
            }
            let items = world.items();
            let pinned: HashMap<String, usize> = placed.clone().into_iter().collect();
            let now = assign_keeping(&items, &ratios, 13, &pinned);
            for (it, s) in items.iter().zip(&now) {
                if let Some(was) = placed.get(&it.video_id) {
                    assert_eq!(was, s, "seq {seq} v{version}: {} moved", it.video_id);
                }
            }
            let mut largest: BTreeMap<&str, usize> = BTreeMap::new();
            for it in &items {
                *largest.entry(it.group.as_str()).or_default() += 1;
            }
            let bound = *largest.values().max().unwrap() as f64 + churned as f64;
            let d = drift(&items, &now, &ratios);
            assert!(
                d <= bound,
                "seq {seq} v{version}: {d} off a target, bound {bound}"
            );
            placed = items
                .iter()
                .zip(&now)
                .map(|(i, s)| (i.video_id.clone(), *s))
                .collect();
            let snap = world.snapshot(&placed);
            if let Some(old) = &before {
                let got: BTreeSet<(String, String)> = (between(old, &snap).into_iter())
                    .map(|c| (c.video_id, c.change.to_string()))
                    .collect();
                assert_eq!(got, diff(old, &snap), "seq {seq} v{version}");
            }
            before = Some(snap);
        }
    }
}
