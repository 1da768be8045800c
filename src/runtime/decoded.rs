//! Decoded frames handed from the stage that decoded them to a later stage that reads pixels
//! (OCR), within one process, so the later stage reads the frame as decoded instead of its
//! stored JPEG (no encode-decode round trip, and no JPEG artefacts in what it reads).
//!
//! A hand-off only saves work: a reader that misses (the frames were decoded by an earlier
//! invocation, or the budget was full) decodes the same frames again from the media, which
//! gives the same pixels. So what a stage computes never depends on whether a hand-off hit.
//!
//! Only the frames of a decoding stage some later stage reads are kept, each until every such
//! reader took it. Memory is bounded by `runtime.decoded_frames_mib`. When the budget is full a new video's
//! frames are not kept (its reader decodes again), rather than evicting the oldest: readers take
//! frames in about the order they were decoded, so the oldest are the next to be read. A video
//! that never reaches the reader (filtered on the way) is dropped once `LEAK_HORIZON` later
//! videos were kept.

use image::RgbImage;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Videos kept after one before it counts as never coming.
const LEAK_HORIZON: u64 = 256;

#[derive(Clone, Default)]
pub struct DecodedFrames(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    budget: usize,
    /// Decoding stage id → how many later stages read its frames (absent: none).
    readers: BTreeMap<String, u32>,
    used: usize,
    seq: u64,
    videos: HashMap<String, Kept>,
    /// Videos not kept because the budget was full.
    skipped: u64,
}

struct Kept {
    seq: u64,
    /// By path: the frame and the reads it still has to serve.
    frames: HashMap<String, (RgbImage, u32)>,
}

fn bytes(img: &RgbImage) -> usize {
    img.as_raw().len()
}

impl DecodedFrames {
    /// A hand-off holding at most `budget` bytes of pixels (0: off), for the decoding stages
    /// named in `readers` with the number of later stages that read each one's frames.
    pub fn new(budget: usize, readers: BTreeMap<String, u32>) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            budget,
            readers,
            ..Default::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a later stage reads the frames `stage_id` decodes: it keeps none otherwise.
    pub fn wanted(&self, stage_id: &str) -> bool {
        let g = self.lock();
        g.budget > 0 && g.readers.contains_key(stage_id)
    }

    /// Keeps the frames `stage_id` decoded of one video, by the path their JPEG is stored at;
    /// all or none.
    pub fn keep(&self, stage_id: &str, video_id: &str, frames: Vec<(String, RgbImage)>) {
        let mut g = self.lock();
        let reads = g.readers.get(stage_id).copied().unwrap_or(0);
        if g.budget == 0 || reads == 0 || frames.is_empty() {
            return;
        }
        g.seq += 1;
        let seq = g.seq;
        let stale: Vec<String> = g
            .videos
            .iter()
            .filter(|(_, k)| k.seq + LEAK_HORIZON < seq)
            .map(|(v, _)| v.clone())
            .collect();
        for v in stale {
            g.drop_video(&v);
        }
        g.drop_video(video_id);
        let size: usize = frames.iter().map(|(_, f)| bytes(f)).sum();
        if g.used + size > g.budget {
            g.skipped += 1;
            return;
        }
        g.used += size;
        let frames = frames.into_iter().map(|(p, f)| (p, (f, reads))).collect();
        g.videos.insert(video_id.to_string(), Kept { seq, frames });
    }

    /// The frame stored at `path` of a video, if it was kept; the last of its readers takes it.
    pub fn take(&self, video_id: &str, path: &str) -> Option<RgbImage> {
        let mut g = self.lock();
        let k = g.videos.get_mut(video_id)?;
        let (img, left) = k.frames.get_mut(path)?;
        if *left > 1 {
            *left -= 1;
            return Some(img.clone());
        }
        let (img, _) = k.frames.remove(path)?;
        if k.frames.is_empty() {
            g.videos.remove(video_id);
        }
        g.used -= bytes(&img);
        Some(img)
    }

    /// (bytes held now, videos not kept for lack of room).
    pub fn usage(&self) -> (usize, u64) {
        let g = self.lock();
        (g.used, g.skipped)
    }
}

impl Inner {
    fn drop_video(&mut self, video_id: &str) {
        if let Some(k) = self.videos.remove(video_id) {
            self.used -= k.frames.values().map(|(f, _)| bytes(f)).sum::<usize>();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(w: u32, v: u8) -> RgbImage {
        RgbImage::from_pixel(w, 10, image::Rgb([v, v, v]))
    }

    fn readers(n: u32) -> BTreeMap<String, u32> {
        [("frames".to_string(), n)].into()
    }

    #[test]
    fn frames_are_taken_once_within_the_budget() {
        let d = DecodedFrames::new(2 * 300, readers(1));
        assert!(d.wanted("frames") && !d.wanted("frames_b"));
        d.keep("frames_b", "x", vec![("x/0.jpg".into(), frame(10, 9))]);
        d.keep("frames", "a", vec![("a/0.jpg".into(), frame(10, 1))]);
        d.keep("frames", "b", vec![("b/0.jpg".into(), frame(10, 2))]);
        // No room for c: kept are a and b, whose readers come first.
        d.keep("frames", "c", vec![("c/0.jpg".into(), frame(10, 3))]);
        assert_eq!(d.usage(), (600, 1));
        assert_eq!(d.take("a", "a/0.jpg").unwrap().get_pixel(0, 0)[0], 1);
        assert!(d.take("a", "a/0.jpg").is_none(), "taken once");
        assert!(d.take("c", "c/0.jpg").is_none());
        assert_eq!(d.usage().0, 300);
        assert!(d.take("b", "b/1.jpg").is_none(), "another frame of b");
        assert!(d.take("x", "x/0.jpg").is_none(), "nobody reads frames_b");
    }

    #[test]
    fn every_reader_gets_the_frame() {
        let d = DecodedFrames::new(1 << 20, readers(2));
        d.keep("frames", "a", vec![("a/0.jpg".into(), frame(10, 1))]);
        assert!(d.take("a", "a/0.jpg").is_some());
        assert_eq!(d.usage().0, 300, "still held for the second reader");
        assert!(d.take("a", "a/0.jpg").is_some());
        assert!(d.take("a", "a/0.jpg").is_none());
        assert_eq!(d.usage(), (0, 0));
    }

    #[test]
    fn off_keeps_nothing_and_unread_videos_expire() {
        let off = DecodedFrames::new(0, readers(1));
        assert!(!off.wanted("frames"));
        off.keep("frames", "a", vec![("a/0.jpg".into(), frame(10, 1))]);
        assert_eq!(off.usage(), (0, 0));

        let d = DecodedFrames::new(1 << 20, readers(1));
        d.keep("frames", "lost", vec![("lost/0.jpg".into(), frame(10, 1))]);
        for i in 0..LEAK_HORIZON + 1 {
            let v = format!("v{i}");
            d.keep("frames", &v, vec![(format!("{v}/0.jpg"), frame(1, 0))]);
            d.take(&v, &format!("{v}/0.jpg"));
        }
        assert!(d.take("lost", "lost/0.jpg").is_none());
        assert_eq!(d.usage(), (0, 0));
    }
}
