//! Which sampled frames of which videos show creator-added text, for the segment analysis:
//! filled while `regions` streams the OCR table, read by `tables` when it counts segments.

use std::collections::{HashMap, HashSet};

/// Which sampled frames of which videos show creator-added text: a video's first 64 frames
/// as the bits of one word (a set of pairs took most of `analyze`'s memory at ten million
/// regions), later ones as pairs.
#[derive(Default)]
pub(super) struct TextFrames {
    videos: HashMap<String, u32>,
    first: Vec<u64>,
    later: HashSet<(u32, u32)>,
}

impl TextFrames {
    pub(super) fn insert(&mut self, video: &str, frame: u32) {
        let v = match self.videos.get(video) {
            Some(v) => *v,
            None => {
                let next = self.first.len() as u32;
                self.videos.insert(video.to_string(), next);
                self.first.push(0);
                next
            }
        };
        if frame < 64 {
            self.first[v as usize] |= 1 << frame;
        } else {
            self.later.insert((v, frame));
        }
    }

    pub(super) fn contains(&self, video: &str, frame: u32) -> bool {
        self.videos.get(video).is_some_and(|&v| {
            if frame < 64 {
                (self.first[v as usize] >> frame) & 1 == 1
            } else {
                self.later.contains(&(v, frame))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_with_text_are_found_per_video_below_and_past_64() {
        let mut t = TextFrames::default();
        for (v, f) in [("a", 0), ("a", 63), ("b", 5), ("a", 64), ("b", 1000)] {
            t.insert(v, f);
        }
        let shown = |v: &str| {
            (0..1100)
                .filter(|f| t.contains(v, *f))
                .collect::<Vec<u32>>()
        };
        assert_eq!(shown("a"), [0, 63, 64]);
        assert_eq!(shown("b"), [5, 1000]);
        assert!(shown("c").is_empty());
    }
}
