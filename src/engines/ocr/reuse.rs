//! Reusing what earlier frames of the same video found (issue 12's temporal redundancy).
//!
//! Creator-added text stays on screen across many sampled frames, so the same caption would be
//! detected and recognised up to 16 times. A chain of frames read in order carries a
//! `FrameMemory`: the previous frame's detection input and boxes, and the text lines it knows
//! (each with the crop that was actually recognised). On the next frame
//! - detection is skipped when the whole detection input is unchanged (`change`), and, opted
//!   into with `window_detection`, recomputed only in the box that changed when that is small:
//!   close but not exact (the detector's squeeze-and-excitation blocks pool over the whole
//!   image, so boxes can move a pixel or two), hence off by default;
//! - recognition (and the angle classifier) is skipped for a box whose quad is within
//!   `QUAD_PX` of a known line's and whose crop has the same size and nearly the same pixels
//!   (`same_line`); the known line's text, score and angle are used.
//!
//! A reused line keeps the crop it was recognised from, so a slow fade cannot drift the
//! comparison away from the pixels the text was read from. `Reuse::Verify` decides the same way
//! but computes everything and counts where reuse gave a different answer. The tolerances below
//! came from such runs: on the ocr-truth corpus no pair of same-place crops within them read
//! differently (the pairs that did differed by a mean of 9 levels or more); on the slides
//! frames of `scripts/bench/ocr.py`, 3 of 563 reused lines read with one space more or less.

use super::DetMap;
use super::det::Quad;
use image::RgbImage;

/// How a chain of frames uses what the earlier frames found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reuse {
    /// Every frame from scratch (RapidOCR's procedure, frame by frame).
    Off,
    /// Skip detection on unchanged frames and recognition of unchanged lines.
    #[default]
    On,
    /// Decide as `On` would, compute everything anyway, output the computed results and count
    /// where reuse would have differed.
    Verify,
}

/// Corners of a box within this many pixels (of the detection input) count as the same box.
pub const QUAD_PX: f64 = 2.0;
/// A crop (or frame) pixel whose largest channel difference exceeds this has changed.
pub const PIXEL_TOL: u8 = 24;
/// Unchanged crop: mean absolute difference per channel at most this …
pub const CROP_MEAN: f64 = 4.0;
/// … and at most this share of its pixels changed.
pub const CROP_CHANGED: f64 = 0.05;
/// Unchanged frame: no pixel changed and a mean absolute difference of at most this.
pub const FRAME_MEAN: f64 = 1.0;
/// Changed pixels within a box of at most this share of the frame: detection recomputes that
/// box (with margins) and keeps the previous map elsewhere.
pub const WINDOW_MAX: f64 = 0.5;
/// Map values recomputed this far (detection-size pixels) around the changed box …
pub const PASTE_MARGIN: u32 = 160;
/// … from a detector input reaching this much further (multiples of 32 keep the network's
/// stride grid where it is in a whole-frame run).
pub const RUN_MARGIN: u32 = 160;

/// What reuse did, summed over frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReuseCounts {
    /// Frames read.
    pub frames: u64,
    /// Frames whose detection was taken from the previous frame.
    pub det_reused: u64,
    /// Frames whose detection ran on the changed window only.
    pub det_partial: u64,
    /// Detection pixels run, and the pixels whole-frame detection would have run.
    pub det_pixels: u64,
    pub det_pixels_full: u64,
    /// Boxes (text lines, before the score filter) on all frames.
    pub lines: u64,
    /// Lines whose recognition was taken from an earlier frame.
    pub rec_reused: u64,
    /// Verify mode: reused detections whose boxes differ from a fresh detection.
    pub det_mismatch: u64,
    /// Verify mode: reused lines whose text differs from a fresh recognition of their crop.
    pub rec_mismatch: u64,
    /// Verify mode: frames whose texts (after the score filter) differ from a reading from
    /// scratch.
    pub text_mismatch: u64,
}

impl ReuseCounts {
    pub fn add(&mut self, o: &ReuseCounts) {
        self.frames += o.frames;
        self.det_reused += o.det_reused;
        self.det_partial += o.det_partial;
        self.det_pixels += o.det_pixels;
        self.det_pixels_full += o.det_pixels_full;
        self.lines += o.lines;
        self.rec_reused += o.rec_reused;
        self.det_mismatch += o.det_mismatch;
        self.rec_mismatch += o.rec_mismatch;
        self.text_mismatch += o.text_mismatch;
    }
}

/// A recognised line an earlier frame left.
#[derive(Clone)]
pub(super) struct KnownLine {
    pub quad: Quad,
    /// The crop recognition ran on (before the angle classifier turned it).
    pub crop: RgbImage,
    pub text: String,
    pub score: f32,
    pub angle: Option<(String, f32)>,
}

/// What a chain of frames carries from one frame to the next.
#[derive(Default)]
pub struct FrameMemory {
    pub(super) frame: Option<RgbImage>,
    pub(super) map: Option<DetMap>,
    pub(super) boxes: Vec<Quad>,
    pub(super) lines: Vec<KnownLine>,
}

impl FrameMemory {
    /// How `img` (a detection input) differs from the previous frame's.
    /// `windows`: report a change confined to a box as `Within` (else it is `Different`).
    pub(super) fn change(&self, img: &RgbImage, windows: bool) -> Change {
        let _step = crate::profile::span("reuse");
        let (Some(prev), Some(_)) = (&self.frame, &self.map) else {
            return Change::Different;
        };
        let Some(d) = diff(prev, img) else {
            return Change::Different;
        };
        let Some(bbox) = d.bbox else {
            return if d.mean <= FRAME_MEAN {
                Change::Unchanged
            } else {
                Change::Different
            };
        };
        let n = (img.width() as u64 * img.height() as u64).max(1);
        let area = (bbox[2] - bbox[0]) as u64 * (bbox[3] - bbox[1]) as u64;
        if windows && area as f64 / n as f64 <= WINDOW_MAX {
            Change::Within(Window(bbox))
        } else {
            Change::Different
        }
    }

    /// The known line a box at `quad` with pixels `crop` repeats.
    pub(super) fn same_line(&self, quad: &Quad, crop: &RgbImage) -> Option<usize> {
        let _step = crate::profile::span("reuse");
        self.near_line(quad, crop)
            .and_then(|(i, d)| (d.mean <= CROP_MEAN && d.changed <= CROP_CHANGED).then_some(i))
    }

    /// The first known line at the same place with a crop of the same size, and how its pixels
    /// differ from `crop`.
    pub(super) fn near_line(&self, quad: &Quad, crop: &RgbImage) -> Option<(usize, Diff)> {
        self.lines.iter().enumerate().find_map(|(i, k)| {
            let near = k
                .quad
                .iter()
                .zip(quad)
                .all(|(a, b)| (a[0] - b[0]).abs() <= QUAD_PX && (a[1] - b[1]).abs() <= QUAD_PX);
            if !near {
                return None;
            }
            diff(&k.crop, crop).map(|d| (i, d))
        })
    }
}

/// How a frame differs from the previous one of its chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Change {
    /// Detection's boxes are the previous frame's.
    Unchanged,
    /// Only this window changed.
    Within(Window),
    /// Detection runs on the whole frame.
    Different,
}

/// Detection-input pixels `[x0, y0, x1, y1)` that changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Window(pub [u32; 4]);

impl Window {
    /// Copies the window's pixels from `src` into `dst` (images of the same size).
    pub(super) fn copy(&self, src: &RgbImage, dst: &mut RgbImage) {
        let [x0, y0, x1, y1] = self.0;
        for y in y0..y1 {
            for x in x0..x1 {
                dst.put_pixel(x, y, *src.get_pixel(x, y));
            }
        }
    }

    /// In a detection-size image of `rw` × `rh` (scales `sx`, `sy`): the window the detector
    /// runs on (aligned to 32) and the part of it whose map values are kept.
    pub(super) fn scaled(&self, sx: f64, sy: f64, rw: u32, rh: u32) -> ([u32; 4], [u32; 4]) {
        let [x0, y0, x1, y1] = self.0;
        let lo = |v: u32, s: f64, m: u32| ((v as f64 * s).floor() as u32).saturating_sub(m);
        let hi = |v: u32, s: f64, m: u32, max: u32| (((v as f64 * s).ceil() as u32) + m).min(max);
        let paste = [
            lo(x0, sx, PASTE_MARGIN),
            lo(y0, sy, PASTE_MARGIN),
            hi(x1, sx, PASTE_MARGIN, rw),
            hi(y1, sy, PASTE_MARGIN, rh),
        ];
        let down = |v: u32| v.saturating_sub(RUN_MARGIN) / 32 * 32;
        let up = |v: u32, max: u32| ((v + RUN_MARGIN).div_ceil(32) * 32).min(max);
        let run = [
            down(paste[0]),
            down(paste[1]),
            up(paste[2], rw),
            up(paste[3], rh),
        ];
        (run, paste)
    }
}

/// The largest corner distance (pixels, per axis) between two lists of boxes in the same order;
/// infinite when the counts differ.
pub(super) fn quad_distance(a: &[Quad], b: &[Quad]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter()
        .zip(b)
        .flat_map(|(p, q)| p.iter().zip(q))
        .map(|(p, q)| (p[0] - q[0]).abs().max((p[1] - q[1]).abs()))
        .fold(0.0, f64::max)
}

/// How much two images of the same size differ.
#[derive(Debug, Clone, Copy)]
pub(super) struct Diff {
    /// Mean absolute difference per channel (0–255).
    pub mean: f64,
    /// Share of pixels whose largest channel difference exceeds `PIXEL_TOL`.
    pub changed: f64,
    /// The box `[x0, y0, x1, y1)` holding those pixels, if any.
    pub bbox: Option<[u32; 4]>,
}

/// `None` when the sizes differ.
pub(super) fn diff(a: &RgbImage, b: &RgbImage) -> Option<Diff> {
    if a.dimensions() != b.dimensions() {
        return None;
    }
    let w = a.width() as usize;
    let (mut sum, mut changed) = (0u64, 0u64);
    let mut bbox = [u32::MAX, u32::MAX, 0, 0];
    for (i, (p, q)) in a
        .as_raw()
        .chunks_exact(3)
        .zip(b.as_raw().chunks_exact(3))
        .enumerate()
    {
        let mut worst = 0u8;
        for c in 0..3 {
            let d = p[c].abs_diff(q[c]);
            sum += d as u64;
            worst = worst.max(d);
        }
        if worst > PIXEL_TOL {
            let (x, y) = ((i % w) as u32, (i / w) as u32);
            changed += 1;
            bbox = [
                bbox[0].min(x),
                bbox[1].min(y),
                bbox[2].max(x + 1),
                bbox[3].max(y + 1),
            ];
        }
    }
    let n = (a.width() as u64 * a.height() as u64).max(1);
    Some(Diff {
        mean: sum as f64 / (3 * n) as f64,
        changed: changed as f64 / n as f64,
        bbox: (changed > 0).then_some(bbox),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_counts_changed_pixels_and_mean() {
        let a = RgbImage::from_pixel(10, 10, image::Rgb([100, 100, 100]));
        let mut b = a.clone();
        b.put_pixel(0, 0, image::Rgb([100, 200, 100]));
        b.put_pixel(1, 0, image::Rgb([110, 100, 100]));
        let d = diff(&a, &b).unwrap();
        assert!((d.changed - 0.01).abs() < 1e-12, "{d:?}");
        assert!((d.mean - 110.0 / 300.0).abs() < 1e-12, "{d:?}");
        assert_eq!(
            d.bbox,
            Some([0, 0, 1, 1]),
            "only the pixel over the tolerance"
        );
        assert!(diff(&a, &RgbImage::new(10, 11)).is_none());
    }

    #[test]
    fn a_line_matches_only_near_and_unchanged() {
        let crop = RgbImage::from_fn(40, 12, |x, y| {
            image::Rgb([(x * 6) as u8, (y * 20) as u8, 9])
        });
        let quad = [[10.0, 10.0], [50.0, 10.0], [50.0, 22.0], [10.0, 22.0]];
        let mem = FrameMemory {
            lines: vec![KnownLine {
                quad,
                crop: crop.clone(),
                text: "HELLO".into(),
                score: 0.9,
                angle: None,
            }],
            ..Default::default()
        };
        let moved = |dx: f64| quad.map(|p| [p[0] + dx, p[1]]);
        assert_eq!(mem.same_line(&moved(1.5), &crop), Some(0));
        assert_eq!(mem.same_line(&moved(2.5), &crop), None);
        // A stroke more (40 of 480 pixels) is a different line; one odd pixel is not.
        let mut painted = crop.clone();
        for (x, y) in (0..20).flat_map(|x| (4..6).map(move |y| (x, y))) {
            painted.put_pixel(x, y, image::Rgb([255, 255, 255]));
        }
        assert_eq!(mem.same_line(&quad, &painted), None);
        let mut speck = crop.clone();
        speck.put_pixel(3, 3, image::Rgb([255, 255, 255]));
        assert_eq!(mem.same_line(&quad, &speck), Some(0));
    }
}
