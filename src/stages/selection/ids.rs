//! The run's source videos as one sorted Arrow string column, and a hash index from an id to its
//! position in it: the key of every per-video bit the funnel keeps (`decide`), and the
//! `video_id` column of rethreshold's selection files as is.
//!
//! Reads nothing and writes nothing: built from the source table's footer lists (`scan::IdList`)
//! by `decide`, read by the scans of the other stages (on the blocking pool, so it is shared
//! read-only) and by `funnel_of`. No String per video: the ids are one buffer, and the index is
//! one u64 per slot, so 10 million videos take about 200 MiB of ids and 128 MiB of index.

use super::scan::IdList;
use crate::error::RunError;
use arrow::array::{Array, StringArray, StringBuilder};

/// Sorted, distinct video ids and where each one is.
pub struct VideoIds {
    ids: StringArray,
    /// Open addressing with linear probing. 0: empty; else the id's hash's high 32 bits, then
    /// its position + 1. The high bits tell most other ids apart without reading their text.
    slots: Vec<u64>,
    mask: usize,
}

/// Ids hashed this far ahead of the one looked up, their slots prefetched: a lookup is a few
/// cache misses (slot, offset, text), and misses overlap only when issued early.
const AHEAD: usize = 16;

impl VideoIds {
    /// The distinct ids of `lists`, sorted by their bytes (as `Vec<String>::sort` orders them).
    pub fn build(lists: &[IdList]) -> Result<Self, RunError> {
        let ids = sorted_distinct(lists);
        if ids.len() >= u32::MAX as usize {
            return Err(RunError::Internal(format!(
                "{} source videos: more than a selection can index",
                ids.len()
            )));
        }
        let mask = (ids.len() + ids.len() / 2).next_power_of_two().max(16) - 1;
        let mut slots = vec![0u64; mask + 1];
        let base = slots.as_ptr();
        let texts = ids.iter().map(Option::unwrap_or_default);
        let mut p = 0u64;
        hashed_ahead(base, mask, texts, |h, _| {
            let mut i = h as usize & mask;
            // Distinct ids: no need to compare, only to find a free slot.
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            p += 1;
            slots[i] = (h & !0xFFFF_FFFF) | p;
        });
        Ok(Self { ids, slots, mask })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The ids, sorted: the `video_id` column of a selection.
    pub fn column(&self) -> &StringArray {
        &self.ids
    }

    pub fn id(&self, position: usize) -> &str {
        self.ids.value(position)
    }

    /// Where `id` is among the sorted ids; None when it is not a source video.
    pub fn position(&self, id: &str) -> Option<u32> {
        self.probe(hash(id.as_bytes()), id)
    }

    /// `position` of each of `ids`, in order, given to `each`; faster than one by one.
    pub fn positions<'a>(
        &self,
        ids: impl Iterator<Item = &'a str>,
        mut each: impl FnMut(Option<u32>),
    ) {
        hashed_ahead(self.slots.as_ptr(), self.mask, ids, |h, id| {
            each(self.probe(h, id))
        });
    }

    fn probe(&self, h: u64, id: &str) -> Option<u32> {
        let tag = h & !0xFFFF_FFFF;
        let mut i = h as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s & !0xFFFF_FFFF == tag {
                let p = (s as u32) - 1;
                if self.ids.value(p as usize) == id {
                    return Some(p);
                }
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// Calls `each(hash, id)` for every id in order, each id's slot prefetched `AHEAD` ids before.
/// `slots` is only an address to prefetch from (never read through here), so `each` may write
/// the table.
fn hashed_ahead<'a>(
    slots: *const u64,
    mask: usize,
    ids: impl Iterator<Item = &'a str>,
    mut each: impl FnMut(u64, &'a str),
) {
    let mut ring: std::collections::VecDeque<(u64, &'a str)> =
        std::collections::VecDeque::with_capacity(AHEAD);
    for id in ids {
        let h = hash(id.as_bytes());
        prefetch(slots.wrapping_add(h as usize & mask));
        if ring.len() == AHEAD
            && let Some((h, id)) = ring.pop_front()
        {
            each(h, id);
        }
        ring.push_back((h, id));
    }
    for (h, id) in ring {
        each(h, id);
    }
}

/// A hint to load `p`'s cache line; no access is made, so any address will do.
#[inline(always)]
fn prefetch(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and reads nothing into the program.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sorts on the first 16 bytes as two big-endian words before the text: most comparisons then
/// read no id text, which is what made sorting 10 million ids slow (a cache miss per compare).
/// Zero padding keeps the order: a word pair is never greater for the smaller id.
fn sorted_distinct(lists: &[IdList]) -> StringArray {
    let mut keyed: Vec<(u64, u64, &str)> = lists
        .iter()
        .flat_map(IdList::iter)
        .map(|id| {
            let mut b = [0u8; 16];
            let n = id.len().min(16);
            b[..n].copy_from_slice(&id.as_bytes()[..n]);
            let (hi, lo) = b.split_at(8);
            (
                u64::from_be_bytes(hi.try_into().unwrap_or_default()),
                u64::from_be_bytes(lo.try_into().unwrap_or_default()),
                id,
            )
        })
        .collect();
    sort_on_two_threads(&mut keyed);
    keyed.dedup();
    let bytes = keyed.iter().map(|k| k.2.len()).sum();
    let mut out = StringBuilder::with_capacity(keyed.len(), bytes);
    for (_, _, id) in keyed {
        out.append_value(id);
    }
    out.finish()
}

/// The halves around the median sorted at once: no merge, and no second buffer.
fn sort_on_two_threads<T: Ord + Send>(v: &mut [T]) {
    if v.len() < 1 << 16 {
        v.sort_unstable();
        return;
    }
    let mid = v.len() / 2;
    v.select_nth_unstable(mid);
    let (lo, hi) = v.split_at_mut(mid);
    std::thread::scope(|s| {
        s.spawn(|| lo.sort_unstable());
        hi.sort_unstable();
    });
}

/// A 64-bit hash of an id: word-at-a-time multiply, then murmur3's finaliser so both the low
/// bits (the slot) and the high bits (the tag) depend on every byte.
fn hash(s: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (s.len() as u64).wrapping_mul(K);
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .wrapping_mul(K)
            .rotate_left(29);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(29);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[&str]) -> IdList {
        IdList::parse(Some(serde_json::to_string(ids).unwrap()))
    }

    #[test]
    fn ids_are_sorted_as_strings_distinct_and_found() {
        // Shared 16-byte prefixes, prefixes of each other, NUL and non-ASCII bytes.
        let a = [
            "demo000-g000002",
            "demo000-g000001",
            "abcdefghijklmnopq2",
            "abcdefghijklmnopq1",
            "abcdefghijklmnop",
            "abc",
            "abc\u{0}",
            "é",
            "",
        ];
        let b = ["abc", "z", "demo000-g000001"];
        let ids = VideoIds::build(&[list(&a), list(&b)]).unwrap();
        let mut want: Vec<String> = a.iter().chain(&b).map(|s| s.to_string()).collect();
        want.sort();
        want.dedup();
        let got: Vec<&str> = ids.column().iter().map(|s| s.unwrap()).collect();
        assert_eq!(got, want);
        for (p, id) in want.iter().enumerate() {
            assert_eq!(ids.position(id), Some(p as u32), "{id:?}");
        }
        for absent in ["abcd", "demo000-g000003", "abcdefghijklmnopq"] {
            assert_eq!(ids.position(absent), None);
        }
    }

    #[test]
    fn many_ids_sort_on_two_threads_like_one() {
        let ids: Vec<String> = (0..200_000u64)
            .map(|i| format!("v{:x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40))
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let built = VideoIds::build(&[list(&refs)]).unwrap();
        let mut want = ids.clone();
        want.sort();
        want.dedup();
        assert_eq!(built.len(), want.len());
        for (p, id) in want.iter().enumerate() {
            assert_eq!(built.id(p), id);
            assert_eq!(built.position(id), Some(p as u32));
        }
        // A batch of lookups, with ids that are not there, answers as one at a time.
        let asked: Vec<String> = (0..1000).map(|i| format!("v{:x}", i * 7919)).collect();
        let mut got = vec![];
        built.positions(asked.iter().map(String::as_str), |p| got.push(p));
        let one: Vec<_> = asked.iter().map(|a| built.position(a)).collect();
        assert_eq!(got, one);
        assert!(got.iter().any(Option::is_none) && got.iter().any(Option::is_some));
    }
}
