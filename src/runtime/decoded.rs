//! Decoded frames handed from the stage that decoded them to a later stage that reads pixels
//! (OCR), within one process, so the later stage reads the frame as decoded instead of its
//! stored JPEG (no encode-decode round trip, and no JPEG artefacts in what it reads).
//!
//! A hand-off only saves work: a reader that misses (the frames were decoded by an earlier
//! invocation) decodes the same frames again from the media, which gives the same pixels. So
//! what a stage computes never depends on whether a hand-off hit.
//!
//! Only the frames of a decoding stage some later stage reads are kept, each until every such
//! reader took it. Memory is bounded by `runtime.decoded_frames_mib`, by backpressure: the
//! decoding stage asks for room (`admit`) before it decodes a video and waits while the frames
//! held and promised would pass the budget; readers taking frames, and the runtime forgetting
//! the videos that leave the chain before a reader took them (`forget`), make room. Nothing
//! held is ever refused or evicted, so on a fresh run no frame is decoded twice (issue 70: a
//! refusal when full cost 48 of 640 frames while OCR loaded its models). A video is always
//! admitted when nothing is held, so one larger than the budget cannot wait for ever. A video
//! no stage ever forgets (a bug) is dropped once `LEAK_HORIZON` later videos were kept.

use image::RgbImage;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Videos kept after one before it counts as never coming.
const LEAK_HORIZON: u64 = 256;

#[derive(Clone, Default)]
pub struct DecodedFrames(Arc<Shared>);

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    /// Woken whenever held or promised bytes are freed.
    room: Notify,
}

#[derive(Default)]
struct Inner {
    budget: usize,
    /// Decoding stage id → how many later stages read its frames (absent: none).
    readers: BTreeMap<String, u32>,
    used: usize,
    /// Bytes promised to videos admitted and still decoding.
    promised: usize,
    seq: u64,
    videos: HashMap<String, Kept>,
    /// Admissions that had to wait for room.
    waited: u64,
}

struct Kept {
    seq: u64,
    /// By path: the frame and the reads it still has to serve.
    frames: HashMap<String, (RgbImage, u32)>,
}

fn bytes(img: &RgbImage) -> usize {
    img.as_raw().len()
}

/// Room promised to one video being decoded; given back when dropped (kept or not).
pub struct Admission {
    frames: DecodedFrames,
    stage_id: String,
    bytes: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut g = self.frames.lock();
        g.promised -= self.bytes;
        drop(g);
        self.frames.0.room.notify_waiters();
    }
}

impl Admission {
    /// Keeps the frames the admitted stage decoded of one video, by the path their JPEG is
    /// stored at, for its readers (even a little past the budget when the estimate was low).
    pub fn keep(self, video_id: &str, frames: Vec<(String, RgbImage)>) {
        let d = self.frames.clone();
        let mut g = d.lock();
        let reads = g.readers.get(&self.stage_id).copied().unwrap_or(0);
        if reads == 0 || frames.is_empty() {
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
        g.used += frames.iter().map(|(_, f)| bytes(f)).sum::<usize>();
        let frames = frames.into_iter().map(|(p, f)| (p, (f, reads))).collect();
        g.videos.insert(video_id.to_string(), Kept { seq, frames });
        // `self` drops here, after the frames are counted: the promise is given back.
    }
}

impl DecodedFrames {
    /// A hand-off holding about `budget` bytes of pixels (0: off), for the decoding stages
    /// named in `readers` with the number of later stages that read each one's frames.
    pub fn new(budget: usize, readers: BTreeMap<String, u32>) -> Self {
        Self(Arc::new(Shared {
            inner: Mutex::new(Inner {
                budget,
                readers,
                ..Default::default()
            }),
            room: Notify::new(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a later stage reads the frames `stage_id` decodes: it keeps none otherwise.
    pub fn wanted(&self, stage_id: &str) -> bool {
        let g = self.lock();
        g.budget > 0 && g.readers.contains_key(stage_id)
    }

    /// Room for `bytes` of frames `stage_id` is about to decode, waiting while what is held and
    /// promised would pass the budget (at once when nothing is). None when no later stage reads
    /// them, or when `cancel` fires while waiting (the frames are then not handed over).
    pub async fn admit(
        &self,
        stage_id: &str,
        bytes: usize,
        cancel: &CancellationToken,
    ) -> Option<Admission> {
        if !self.wanted(stage_id) {
            return None;
        }
        let mut counted = false;
        loop {
            // Registered before the check, so a release between the check and the wait wakes it.
            let notified = self.0.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut g = self.lock();
                let held = g.used + g.promised;
                if held == 0 || held + bytes <= g.budget {
                    g.promised += bytes;
                    return Some(Admission {
                        frames: self.clone(),
                        stage_id: stage_id.to_string(),
                        bytes,
                    });
                }
                if !counted {
                    g.waited += 1;
                    counted = true;
                }
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return None,
            }
        }
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
        drop(g);
        self.0.room.notify_waiters();
        Some(img)
    }

    /// Drops what is still held of a video that leaves the chain (filtered, rejected, deferred,
    /// at its end) without every reader having taken its frames.
    pub fn forget(&self, video_id: &str) {
        let mut g = self.lock();
        if g.videos.is_empty() {
            return;
        }
        if g.drop_video(video_id) {
            drop(g);
            self.0.room.notify_waiters();
        }
    }

    /// (bytes held now, admissions that waited for room).
    pub fn usage(&self) -> (usize, u64) {
        let g = self.lock();
        (g.used, g.waited)
    }
}

impl Inner {
    /// Whether anything of the video was held.
    fn drop_video(&mut self, video_id: &str) -> bool {
        match self.videos.remove(video_id) {
            Some(k) => {
                self.used -= k.frames.values().map(|(f, _)| bytes(f)).sum::<usize>();
                true
            }
            None => false,
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

    /// Admits and keeps one frame of `w` x 10 pixels for `video`.
    async fn put(d: &DecodedFrames, video: &str, w: u32, v: u8) {
        let never = CancellationToken::new();
        let a = d.admit("frames", w as usize * 30, &never).await.unwrap();
        a.keep(video, vec![(format!("{video}/0.jpg"), frame(w, v))]);
    }

    #[tokio::test]
    async fn frames_are_taken_once_and_only_by_readers() {
        let d = DecodedFrames::new(2 * 300, readers(1));
        assert!(d.wanted("frames") && !d.wanted("frames_b"));
        let never = CancellationToken::new();
        assert!(
            d.admit("frames_b", 300, &never).await.is_none(),
            "nobody reads frames_b"
        );
        put(&d, "a", 10, 1).await;
        put(&d, "b", 10, 2).await;
        assert_eq!(d.usage(), (600, 0));
        assert_eq!(d.take("a", "a/0.jpg").unwrap().get_pixel(0, 0)[0], 1);
        assert!(d.take("a", "a/0.jpg").is_none(), "taken once");
        assert_eq!(d.usage().0, 300);
        assert!(d.take("b", "b/1.jpg").is_none(), "another frame of b");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_budget_makes_the_decoder_wait_until_a_reader_takes() {
        let d = DecodedFrames::new(2 * 300, readers(1));
        put(&d, "a", 10, 1).await;
        put(&d, "b", 10, 2).await;
        let never = CancellationToken::new();
        let waiting = d.admit("frames", 300, &never);
        tokio::pin!(waiting);
        let early = tokio::time::timeout(std::time::Duration::from_secs(60), &mut waiting).await;
        assert!(early.is_err(), "admitted past the budget");
        assert_eq!(d.usage(), (600, 1));
        d.take("a", "a/0.jpg").unwrap();
        let c = waiting.await.expect("room after a take");
        c.keep("c", vec![("c/0.jpg".into(), frame(10, 3))]);
        assert_eq!(d.usage().0, 600);
        // Forgetting a video that left the chain makes room too.
        let next = d.admit("frames", 300, &never);
        tokio::pin!(next);
        assert!(futures::poll!(next.as_mut()).is_pending());
        d.forget("b");
        let e = next.await.expect("room after forget");
        // An admission dropped without keeping (the decode failed) gives its room back.
        drop(e);
        assert_eq!(d.usage().0, 300);
        put(&d, "f", 10, 6).await;
        assert!(d.take("c", "c/0.jpg").is_some() && d.take("f", "f/0.jpg").is_some());
        assert_eq!(d.usage().0, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_video_past_the_budget_is_admitted_alone_and_cancel_ends_a_wait() {
        let d = DecodedFrames::new(100, readers(1));
        put(&d, "big", 10, 1).await; // 300 bytes > 100: nothing was held
        let cancel = CancellationToken::new();
        let waiting = d.admit("frames", 30, &cancel);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        cancel.cancel();
        assert!(waiting.await.is_none());
        assert!(d.take("big", "big/0.jpg").is_some());
    }

    #[tokio::test]
    async fn every_reader_gets_the_frame() {
        let d = DecodedFrames::new(1 << 20, readers(2));
        put(&d, "a", 10, 1).await;
        assert!(d.take("a", "a/0.jpg").is_some());
        assert_eq!(d.usage().0, 300, "still held for the second reader");
        assert!(d.take("a", "a/0.jpg").is_some());
        assert!(d.take("a", "a/0.jpg").is_none());
        assert_eq!(d.usage(), (0, 0));
    }

    #[tokio::test]
    async fn off_keeps_nothing_and_unread_videos_expire() {
        let off = DecodedFrames::new(0, readers(1));
        assert!(!off.wanted("frames"));
        let never = CancellationToken::new();
        assert!(off.admit("frames", 300, &never).await.is_none());

        let d = DecodedFrames::new(1 << 20, readers(1));
        put(&d, "lost", 10, 1).await;
        for i in 0..LEAK_HORIZON + 1 {
            let v = format!("v{i}");
            put(&d, &v, 1, 0).await;
            d.take(&v, &format!("{v}/0.jpg"));
        }
        assert!(d.take("lost", "lost/0.jpg").is_none());
        assert_eq!(d.usage(), (0, 0));
    }
}
