//! Overlap between a release and other releases or id lists, and between a release's own
//! splits (leakage): the same video by id, the same footage by the perceptual hashes of its
//! frames (a re-upload, a crop, a re-encode at another size), and near-duplicate questions.
//!
//! - `ids.rs`: YouTube ids out of bare ids and every URL form; other ids compare as written.
//! - `phash.rs`: the 64-bit DCT hash of a frame (flat frames have none).
//! - `index.rs`: multi-index hashing, so frames are matched without comparing all pairs.
//! - `load.rs`: a release folder or an id list, read (and a release's frames hashed).
//!
//! Two videos share footage when at least `min_share` of the frames of the one with fewer
//! (hashed) frames have a frame in the other within `max_distance` bits (comparing the whole
//! frames and their centre crops, `phash::VIEWS`, so a crop of either side is near), and at least
//! `min_frames` do: frame order and count do not matter, so a re-upload sampled at other times
//! or trimmed still matches. Two items are near-duplicates when the character-trigram Jaccard
//! index of their normalised question and options (`benchmark::text::similarity`) reaches
//! `min_similarity`; candidates come from prefix filtering (rarest trigrams first), which
//! finds every pair above the threshold while comparing few.

pub mod ids;
pub mod index;
pub mod load;
pub mod phash;

use load::{Collection, Item, Video};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// When two things count as the same.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// Bits (of 64) two frame hashes may differ by.
    pub max_distance: u32,
    /// Share of the shorter video's frames that must have a partner.
    pub min_share: f64,
    /// Frames that must have a partner, at least (or all of a shorter video's).
    pub min_frames: usize,
    /// Trigram Jaccard index two items' texts must reach.
    pub min_similarity: f64,
}

/// The kinds of match, in the order a report lists them.
pub const KINDS: [&str; 3] = ["id", "frames", "question"];
/// What `against` says of a match between a release's own splits.
pub const OWN_SPLITS: &str = "(own splits)";

/// One match: what of ours, what of theirs, and the evidence.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Overlap {
    /// id, frames or question.
    pub kind: String,
    /// The other release or list as given, or `(own splits)` for leakage.
    pub against: String,
    pub ours_split: Option<String>,
    pub ours_video: String,
    pub ours_item: Option<String>,
    pub theirs_split: Option<String>,
    pub theirs_video: String,
    pub theirs_item: Option<String>,
    /// frames: the median distance (bits of 64) of the matched frames to their nearest partner.
    pub distance: Option<u32>,
    /// question: the trigram Jaccard index of the two texts.
    pub similarity: Option<f64>,
    /// frames: how many of the shorter video's frames have a partner, of how many.
    pub frames_matched: Option<u32>,
    pub frames_compared: Option<u32>,
}

impl Overlap {
    fn new(kind: &str, against: &str, a: &Video, b: &Video) -> Self {
        Overlap {
            kind: kind.into(),
            against: against.into(),
            ours_split: a.split.clone(),
            ours_video: a.id.clone(),
            theirs_split: b.split.clone(),
            theirs_video: b.id.clone(),
            ..Default::default()
        }
    }
}

/// Everything `ours` shares with `theirs`.
pub fn against(ours: &Collection, theirs: &Collection, t: &Thresholds) -> Vec<Overlap> {
    compare(ours, theirs, false, &theirs.name, t)
}

/// Everything one split of `ours` shares with another.
pub fn leakage(ours: &Collection, t: &Thresholds) -> Vec<Overlap> {
    compare(ours, ours, true, OWN_SPLITS, t)
}

fn compare(a: &Collection, b: &Collection, own: bool, name: &str, t: &Thresholds) -> Vec<Overlap> {
    // Within one release only pairs across splits count, each once.
    let keep = |i: usize, j: usize, sa: &Option<String>, sb: &Option<String>| {
        !own || (i < j && sa.is_some() && sb.is_some() && sa != sb)
    };
    let mut out = vec![];
    let mut by_key: HashMap<&str, Vec<usize>> = HashMap::new();
    for (j, v) in b.videos.iter().enumerate() {
        by_key.entry(v.key.as_str()).or_default().push(j);
    }
    for (i, v) in a.videos.iter().enumerate() {
        for &j in by_key.get(v.key.as_str()).into_iter().flatten() {
            if keep(i, j, &v.split, &b.videos[j].split) {
                out.push(Overlap::new("id", name, v, &b.videos[j]));
            }
        }
    }
    for (i, j, e) in frame_matches(&a.videos, &b.videos, t, &keep) {
        let mut o = Overlap::new("frames", name, &a.videos[i], &b.videos[j]);
        o.distance = Some(e.distance);
        o.frames_matched = Some(e.matched);
        o.frames_compared = Some(e.compared);
        out.push(o);
    }
    for (i, j, sim) in item_matches(&a.items, &b.items, t.min_similarity, &keep) {
        let (x, y) = (&a.items[i], &b.items[j]);
        out.push(Overlap {
            kind: "question".into(),
            against: name.into(),
            ours_split: x.split.clone(),
            ours_video: x.video_id.clone(),
            ours_item: Some(x.item_id.clone()),
            theirs_split: y.split.clone(),
            theirs_video: y.video_id.clone(),
            theirs_item: Some(y.item_id.clone()),
            similarity: Some((sim * 1000.0).round() / 1000.0),
            ..Default::default()
        });
    }
    let rank = |k: &str| KINDS.iter().position(|x| *x == k);
    out.sort_by(|x, y| {
        (
            rank(&x.kind),
            &x.ours_video,
            &x.ours_item,
            &x.theirs_video,
            &x.theirs_item,
        )
            .cmp(&(
                rank(&y.kind),
                &y.ours_video,
                &y.ours_item,
                &y.theirs_video,
                &y.theirs_item,
            ))
    });
    out
}

pub struct FrameEvidence {
    pub distance: u32,
    pub matched: u32,
    pub compared: u32,
}

type Keep<'a> = dyn Fn(usize, usize, &Option<String>, &Option<String>) -> bool + 'a;

/// Pairs of videos (a's, b's) that share footage, by the rule in the module's header.
fn frame_matches(
    a: &[Video],
    b: &[Video],
    t: &Thresholds,
    keep: &Keep,
) -> Vec<(usize, usize, FrameEvidence)> {
    let mut owner: Vec<(u32, u32)> = vec![];
    let mut hashes = vec![];
    for (j, v) in b.iter().enumerate() {
        for (k, views) in v.hashes.iter().enumerate() {
            for h in views {
                owner.push((j as u32, k as u32));
                hashes.push(*h);
            }
        }
    }
    let index = index::HashIndex::new(hashes);
    let mut search = index.searcher(t.max_distance);
    let mut out = vec![];
    for (i, v) in a.iter().enumerate() {
        // Their video → (our frames' best distance to it, its frames that matched one of ours).
        let mut per: BTreeMap<u32, (Vec<u32>, BTreeSet<u32>)> = BTreeMap::new();
        for views in &v.hashes {
            let mut best: HashMap<u32, u32> = HashMap::new();
            // Any view of ours near any view of theirs: a crop of either side matches.
            for (e, d) in views.iter().flat_map(|h| search.within(*h)) {
                let (j, k) = owner[e as usize];
                if !keep(i, j as usize, &v.split, &b[j as usize].split) {
                    continue;
                }
                let x = best.entry(j).or_insert(d);
                *x = (*x).min(d);
                per.entry(j).or_default().1.insert(k);
            }
            for (j, d) in best {
                per.entry(j).or_default().0.push(d);
            }
        }
        for (j, (mut dists, theirs)) in per {
            let (na, nb) = (v.hashes.len(), b[j as usize].hashes.len());
            let compared = na.min(nb);
            let matched = if na <= nb { dists.len() } else { theirs.len() };
            let need = ((t.min_share * compared as f64) - 1e-9)
                .ceil()
                .max(t.min_frames.min(compared) as f64) as usize;
            if compared == 0 || matched < need.max(1) {
                continue;
            }
            dists.sort_unstable();
            out.push((
                i,
                j as usize,
                FrameEvidence {
                    distance: dists[dists.len() / 2],
                    matched: matched as u32,
                    compared: compared as u32,
                },
            ));
        }
    }
    out
}

/// The character trigrams `text::similarity` compares, as ids.
fn grams(text: &str, ids: &mut HashMap<Vec<char>, u32>) -> Vec<u32> {
    let mut out: Vec<u32> = crate::benchmark::text::trigrams(text)
        .into_iter()
        .map(|g| {
            let n = ids.len() as u32;
            *ids.entry(g).or_insert(n)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Pairs of items (a's, b's) whose texts are at least `min` alike. Prefix filtering: with the
/// trigrams of every text ordered rarest first, two texts with Jaccard ≥ min share at least
/// ⌈min·n⌉ of each one's n trigrams, so they share one among the first n − ⌈min·n⌉ + 1 of each.
fn item_matches(a: &[Item], b: &[Item], min: f64, keep: &Keep) -> Vec<(usize, usize, f64)> {
    let mut ids = HashMap::new();
    let ga: Vec<Vec<u32>> = a.iter().map(|x| grams(&x.text, &mut ids)).collect();
    let gb: Vec<Vec<u32>> = b.iter().map(|x| grams(&x.text, &mut ids)).collect();
    let mut freq = vec![0u32; ids.len()];
    for g in ga.iter().chain(&gb).flatten() {
        freq[*g as usize] += 1;
    }
    let prefix = |g: &[u32]| -> Vec<u32> {
        let mut g = g.to_vec();
        g.sort_by_key(|x| (freq[*x as usize], *x));
        let n = g.len();
        let need = ((min * n as f64) - 1e-9).ceil().max(0.0) as usize;
        g.truncate((n + 1).saturating_sub(need.max(1)).clamp(1, n.max(1)));
        g
    };
    let mut postings: HashMap<u32, Vec<u32>> = HashMap::new();
    for (j, g) in gb.iter().enumerate() {
        for x in prefix(g) {
            postings.entry(x).or_default().push(j as u32);
        }
    }
    let mut out = vec![];
    for (i, g) in ga.iter().enumerate() {
        if g.is_empty() {
            continue;
        }
        let mut cands: Vec<u32> = prefix(g)
            .iter()
            .flat_map(|x| postings.get(x).into_iter().flatten().copied())
            .collect();
        cands.sort_unstable();
        cands.dedup();
        for j in cands {
            let (x, y) = (&a[i], &b[j as usize]);
            if !keep(i, j as usize, &x.split, &y.split) {
                continue;
            }
            let sim = crate::benchmark::text::similarity(&x.text, &y.text);
            if sim >= min {
                out.push((i, j as usize, sim));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
