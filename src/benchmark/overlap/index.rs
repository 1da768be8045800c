//! Finding every stored 64-bit hash within d bits of a query without comparing it to all of
//! them: multi-index hashing (Norouzi, Punjani and Fleet, 2012). Each hash is cut into four
//! 16-bit chunks and each chunk is a key of its own table. Two hashes within d bits differ in at
//! most ⌊d/4⌋ bits in at least one chunk (four chunks cannot all hold more than a quarter of d),
//! so a query looks up, in each table, every 16-bit value within ⌊d/4⌋ bits of its own chunk,
//! and checks the full distance of what it finds. Nothing within d is missed.
//!
//! Cost: 4·Σₖ≤⌊d/4⌋ C(16,k) lookups a query (548 for d = 8 to 11, 2,788 for 12 to 15) plus the
//! candidates found; building is linear. 100,000 frames take a few MB.

use std::collections::HashMap;

pub struct HashIndex {
    hashes: Vec<u64>,
    tables: [HashMap<u16, Vec<u32>>; 4],
}

fn chunk(h: u64, c: usize) -> u16 {
    (h >> (16 * c)) as u16
}

/// Every 16-bit mask with at most `r` bits set.
fn masks(r: u32) -> Vec<u16> {
    (0..=u16::MAX).filter(|m| m.count_ones() <= r).collect()
}

impl HashIndex {
    pub fn new(hashes: Vec<u64>) -> Self {
        let mut tables: [HashMap<u16, Vec<u32>>; 4] = Default::default();
        for (i, h) in hashes.iter().enumerate() {
            for (c, t) in tables.iter_mut().enumerate() {
                t.entry(chunk(*h, c)).or_default().push(i as u32);
            }
        }
        HashIndex { hashes, tables }
    }

    /// A searcher for distance `d` (its probe masks computed once).
    pub fn searcher(&self, d: u32) -> Searcher<'_> {
        Searcher {
            index: self,
            d,
            masks: masks(d / 4),
            seen: vec![u32::MAX; self.hashes.len()],
            query: 0,
        }
    }
}

pub struct Searcher<'a> {
    index: &'a HashIndex,
    d: u32,
    masks: Vec<u16>,
    /// The last query that met each entry, so an entry found through two chunks counts once.
    seen: Vec<u32>,
    query: u32,
}

impl Searcher<'_> {
    /// The entries (their position in the indexed list) within d bits of `q`, with their
    /// distance, in no particular order.
    pub fn within(&mut self, q: u64) -> Vec<(u32, u32)> {
        self.query = self.query.wrapping_add(1);
        let mut out = vec![];
        for (c, table) in self.index.tables.iter().enumerate() {
            let key = chunk(q, c);
            for m in &self.masks {
                let Some(list) = table.get(&(key ^ m)) else {
                    continue;
                };
                for &e in list {
                    if self.seen[e as usize] == self.query {
                        continue;
                    }
                    self.seen[e as usize] = self.query;
                    let dist = (self.index.hashes[e as usize] ^ q).count_ones();
                    if dist <= self.d {
                        out.push((e, dist));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: a fixed stream of well-mixed hashes.
    fn stream(seed: u64, n: usize) -> Vec<u64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            })
            .collect()
    }

    #[test]
    fn finds_exactly_what_a_full_scan_finds() {
        let mut stored = stream(1, 3000);
        // Plant near copies: 1 to 14 bits flipped, spread over the chunks.
        let base = stored[..14].to_vec();
        for (k, h) in base.iter().enumerate() {
            let flips: u64 = (0..=k as u64).fold(0, |m, b| m | 1 << ((b * 37) % 64));
            stored.push(h ^ flips);
        }
        let index = HashIndex::new(stored.clone());
        for d in [0, 3, 7, 10, 13] {
            let mut s = index.searcher(d);
            for q in base.iter().chain(&stream(2, 50)) {
                let mut got: Vec<u32> = s.within(*q).into_iter().map(|(e, _)| e).collect();
                got.sort();
                let want: Vec<u32> = (0..stored.len() as u32)
                    .filter(|e| (stored[*e as usize] ^ q).count_ones() <= d)
                    .collect();
                assert_eq!(got, want, "d = {d}, q = {q:x}");
            }
        }
    }
}
