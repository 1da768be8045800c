//! PP-OCRv4 text detection, angle classification and recognition, with the pre-
//! and post-processing of RapidOCR 1.4.4 (its `config.yaml` defaults), so results compare one to
//! one with it. Models and the engines (OpenVINO by default, ONNX Runtime as the fallback:
//! `net`) come from PyPI wheels (`scripts/fetch_models.sh`) and are loaded at run time.
//!
//! Pipeline per image: limit the long side to 2000 px; letterbox very flat images; detect at a
//! min side of 736 (multiple of 32); DB post-processing (`det`); crop each box (perspective warp);
//! classify 0°/180° in batches of 6 and turn crops the classifier is sure (> 0.9) are upside down;
//! recognise in batches of 6 sorted by width (height 48, CTC greedy decode); keep text score ≥ 0.5.

mod chain;
pub mod det;
pub mod imgops;
mod lines;
pub mod net;
pub mod reuse;
pub mod text;

use det::{DbParams, Quad};
use image::RgbImage;
pub use net::EngineKind;
use net::{Net, NetError, Runtime};
pub use reuse::{FrameMemory, Reuse, ReuseCounts};
use reuse::{KnownLine, Window};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Why the OCR engine could not load or read an image. Messages name the file or model that
/// failed and say how to fix a missing one.
#[derive(Debug, thiserror::Error)]
pub enum OcrError {
    /// Loading the engine's library or a model.
    #[error(transparent)]
    Load(#[from] NetError),
    #[error("{} has no `character` metadata", path.display())]
    NoCharacters { path: PathBuf },
    #[error("OCR worker poisoned")]
    Poisoned,
    /// A model (`det`, `cls`, `rec`) failed on its input.
    #[error("{model}: {error}")]
    Inference {
        model: &'static str,
        error: NetError,
    },
    #[error("det: map of {shape:?} for an input of {w}x{h}")]
    DetShape { shape: Vec<i64>, w: usize, h: usize },
    #[error("{}: {error}", path.display())]
    Image {
        path: PathBuf,
        error: image::ImageError,
    },
    #[error("{}: not an image format vidcurate reads", path.display())]
    NotAnImage { path: PathBuf },
}

/// Recognised text of one region. Coordinates are pixels of the input image.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Region {
    pub text: String,
    pub score: f32,
    /// tl, tr, br, bl.
    #[serde(rename = "box")]
    pub quad: [[f32; 2]; 4],
    /// Angle classifier verdict ("0" or "180") and its score, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub angle: Option<(String, f32)>,
}

/// How detection's `limit_side_len` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitType {
    Min,
    Max,
}

/// The size detection runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum DetProfile {
    /// RapidOCR's rule (the short side raised to 736), but images over 1600 px on the long side
    /// detected at a long side of 1280: small images and 720p frames as RapidOCR reads them,
    /// 1080p frames at 1280 x 736, a third of their pixels (`det_size`).
    #[default]
    Capped,
    /// RapidOCR 1.4.4's own: the short side raised to 736, so a 1080p frame is detected whole.
    Rapidocr,
    /// PaddleOCR's own default, which MVFNDB used: the long side capped at 960 and small images
    /// left as they are.
    Paddleocr,
}

impl DetProfile {
    /// `params` with this profile's detection size.
    pub fn apply(self, params: OcrParams) -> OcrParams {
        let (limit_side_len, limit_type, det_cap) = match self {
            Self::Capped => (
                736,
                LimitType::Min,
                Some(DetCap {
                    above: 1600,
                    to: 1280,
                }),
            ),
            Self::Rapidocr => (736, LimitType::Min, None),
            Self::Paddleocr => (960, LimitType::Max, None),
        };
        OcrParams {
            limit_side_len,
            limit_type,
            det_cap,
            ..params
        }
    }
}

/// Images whose long side is over `above` are detected at a long side of `to`. The two differ
/// so that an image a little over `to` (a 1280 x 720 frame raised to 1312 x 736) is left to
/// RapidOCR's rule: a 2.5 % squeeze read 18 % of its small scene-text lines differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetCap {
    pub above: u32,
    pub to: u32,
}

/// RapidOCR 1.4.4's defaults.
#[derive(Debug, Clone)]
pub struct OcrParams {
    pub use_cls: bool,
    pub text_score: f32,
    pub det: DbParams,
    pub limit_side_len: u32,
    /// Whether `limit_side_len` raises the short side (RapidOCR's `min`) or caps the long side
    /// (PaddleOCR's `max`).
    pub limit_type: LimitType,
    /// After `limit_side_len`, large images' long side capped (`DetProfile::Capped`).
    pub det_cap: Option<DetCap>,
    /// Reuse: recompute detection only in the changed box of a frame (`reuse::Change::Within`).
    pub window_detection: bool,
    pub max_side_len: u32,
    pub min_side_len: u32,
    pub min_height: u32,
    pub width_height_ratio: f64,
    pub cls_thresh: f32,
    pub batch: usize,
    /// The library the models run on.
    pub engine: EngineKind,
}

impl Default for OcrParams {
    fn default() -> Self {
        Self {
            use_cls: true,
            text_score: 0.5,
            det: DbParams::default(),
            limit_side_len: 736,
            limit_type: LimitType::Min,
            det_cap: None,
            window_detection: false,
            max_side_len: 2000,
            min_side_len: 30,
            min_height: 30,
            width_height_ratio: 8.0,
            cls_thresh: 0.9,
            batch: 6,
            engine: EngineKind::Auto,
        }
    }
}

/// One set of sessions, used by one thread at a time.
struct Models {
    det: Net,
    cls: Net,
    rec: Net,
}

/// `threads` workers, each a set of single-threaded sessions: two images at once on one thread
/// each read 1.5x more images per second here than one image at a time on two threads.
pub struct OcrEngine {
    workers: Vec<Mutex<Models>>,
    next: AtomicUsize,
    chars: Vec<String>,
    pub params: OcrParams,
}

impl OcrEngine {
    /// Loads det, cls and rec from `models/ppocrv4/` once per worker (`threads` workers) on
    /// the engine `params.engine` names.
    pub fn load(models: &Path, threads: usize, params: OcrParams) -> Result<Self, OcrError> {
        let mut runtime = Runtime::load(models, params.engine)?;
        let dir = models.join("ppocrv4");
        let rec_path = dir.join("rec.onnx");
        let mut workers = vec![];
        for _ in 0..threads.max(1) {
            workers.push(Mutex::new(Models {
                det: runtime.net(&dir.join("det.onnx"))?,
                cls: runtime.net(&dir.join("cls.onnx"))?,
                rec: runtime.net(&rec_path)?,
            }));
        }
        let dict = net::onnx_metadata(&rec_path, "character")?
            .ok_or(OcrError::NoCharacters { path: rec_path })?;
        // Index 0 is the CTC blank; a space is appended last (PaddleOCR's use_space_char).
        let mut chars = vec![String::new()];
        chars.extend(
            dict.split('\n')
                .map(|s| s.trim_end_matches('\r').to_string()),
        );
        chars.push(" ".into());
        Ok(Self {
            workers,
            next: AtomicUsize::new(0),
            chars,
            params,
        })
    }

    /// Number of images that can be read at once.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// A free worker, else waits for the next one in turn.
    fn worker(&self) -> Result<MutexGuard<'_, Models>, OcrError> {
        let n = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Ok(g) = self.workers[(start + i) % n].try_lock() {
                return Ok(g);
            }
        }
        self.workers[start % n]
            .lock()
            .map_err(|_| OcrError::Poisoned)
    }

    /// Detection, classification and recognition of every text line in one frame of a chain
    /// read in order: `memory` carries what the previous frames found, and `mode` says whether
    /// it is used (`reuse`).
    pub fn ocr_frame(
        &self,
        img: &RgbImage,
        memory: &mut FrameMemory,
        mode: Reuse,
    ) -> Result<(Vec<Region>, ReuseCounts), OcrError> {
        let (raw_w, raw_h) = img.dimensions();
        let step = crate::profile::span("resize");
        let (img, ratio_w, ratio_h) = self.limit_sides(img);
        let (img, pad_top) = self.letterbox(img);
        drop(step);
        let mut counts = ReuseCounts {
            frames: 1,
            ..Default::default()
        };
        let mut m = self.worker()?;
        let lines = match mode {
            Reuse::Off => self.read_fresh(&mut m, &img)?,
            Reuse::On => self.read_reusing(&mut m, &img, memory, false, &mut counts)?,
            Reuse::Verify => {
                let fresh = self.read_fresh(&mut m, &img)?;
                let reused = self.read_reusing(&mut m, &img, memory, true, &mut counts)?;
                let quads = |l: &[KnownLine]| l.iter().map(|k| k.quad).collect::<Vec<_>>();
                let worst = reuse::quad_distance(&quads(&fresh), &quads(&reused));
                if worst > reuse::QUAD_PX {
                    counts.det_mismatch = 1;
                    tracing::debug!(worst, "Reused detection differs.");
                }
                let texts = |l: &[KnownLine]| {
                    let mut t: Vec<String> = l
                        .iter()
                        .filter(|k| k.score >= self.params.text_score)
                        .map(|k| k.text.clone())
                        .collect();
                    t.sort();
                    t
                };
                let (a, b) = (texts(&fresh), texts(&reused));
                if a != b {
                    counts.text_mismatch = 1;
                    tracing::debug!(fresh = ?a, reused = ?b, "Frame read differently with reuse.");
                }
                fresh
            }
        };
        drop(m);
        let out = lines
            .into_iter()
            .filter(|k| k.score >= self.params.text_score)
            .map(|k| Region {
                quad: k.quad.map(|p| {
                    let x = (p[0] * ratio_w).clamp(0.0, raw_w as f64);
                    let y = ((p[1] - pad_top as f64) * ratio_h).clamp(0.0, raw_h as f64);
                    [x as f32, y as f32]
                }),
                text: k.text,
                score: k.score,
                angle: k.angle,
            })
            .collect();
        Ok((out, counts))
    }

    /// Detection, classification and recognition of a prepared image, from scratch.
    fn read_fresh(&self, m: &mut Models, img: &RgbImage) -> Result<Vec<KnownLine>, OcrError> {
        let t0 = std::time::Instant::now();
        let (w, h) = img.dimensions();
        let boxes = self.boxes(&self.det_map(m, img, None)?, w, h);
        let t_det = t0.elapsed();
        let crops: Vec<RgbImage> = boxes.iter().map(|q| line_crop(img, q)).collect();
        let read = self.read_lines(m, &crops)?;
        tracing::debug!(
            det_ms = t_det.as_millis() as u64,
            rec_ms = (t0.elapsed() - t_det).as_millis() as u64,
            boxes = boxes.len(),
            "OCR timings."
        );
        Ok(boxes
            .into_iter()
            .zip(crops)
            .zip(read)
            .map(|((quad, crop), (text, score, angle))| KnownLine {
                quad,
                crop,
                text,
                score,
                angle,
            })
            .collect())
    }

    /// Angle classification and recognition of line crops.
    fn read_lines(&self, m: &mut Models, crops: &[RgbImage]) -> Result<Vec<LineRead>, OcrError> {
        let (turned, angles) = self.classify(m, crops.to_vec())?;
        let texts = self.recognize(m, &turned)?;
        Ok(texts
            .into_iter()
            .enumerate()
            .map(|(i, (text, score))| (text, score, angles.as_ref().map(|a| a[i].clone())))
            .collect())
    }

    /// Letterboxes very flat or very low images (black bands top and bottom), as RapidOCR does.
    fn letterbox(&self, img: RgbImage) -> (RgbImage, u32) {
        let (w, h) = img.dimensions();
        let flat = w as f64 / h as f64 > self.params.width_height_ratio;
        if h <= self.params.min_height || flat {
            let new_h = ((w as f64 / self.params.width_height_ratio) as u32)
                .max(self.params.min_height)
                * 2;
            let pad = (new_h as i64 - h as i64).unsigned_abs() as u32 / 2;
            let mut padded = RgbImage::new(w, h + 2 * pad);
            image::imageops::replace(&mut padded, &img, 0, pad as i64);
            (padded, pad)
        } else {
            (img, 0)
        }
    }

    /// Recognition of the whole image as one line (RapidOCR with `use_det=False`).
    pub fn ocr_line(&self, img: &RgbImage) -> Result<Region, OcrError> {
        let (w, h) = img.dimensions();
        let (img, ..) = self.limit_sides(img);
        let mut m = self.worker()?;
        let (crops, angles) = self.classify(&mut m, vec![img])?;
        let (text, score) = self.recognize(&mut m, &crops)?.pop().unwrap_or_default();
        let (w, h) = (w as f32, h as f32);
        Ok(Region {
            text,
            score,
            quad: [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]],
            angle: angles.and_then(|mut a| a.pop()),
        })
    }

    /// RapidOCR's `reduce_max_side` / `increase_min_side` (sizes rounded to multiples of 32).
    fn limit_sides(&self, img: &RgbImage) -> (RgbImage, f64, f64) {
        let (w, h) = img.dimensions();
        let p = &self.params;
        let ratio = if w.max(h) > p.max_side_len {
            p.max_side_len as f64 / w.max(h) as f64
        } else if w.min(h) < p.min_side_len {
            p.min_side_len as f64 / w.min(h) as f64
        } else {
            return (img.clone(), 1.0, 1.0);
        };
        let rw = round32((w as f64 * ratio) as u32).max(32);
        let rh = round32((h as f64 * ratio) as u32).max(32);
        (
            imgops::resize_linear(img, rw, rh),
            w as f64 / rw as f64,
            h as f64 / rh as f64,
        )
    }

    fn det_size(&self, w: u32, h: u32) -> (u32, u32) {
        det_size(&self.params, w, h)
    }

    /// The text probability map of `img` (at `det_size`), or, given the previous frame's map
    /// and the window of it that changed (`Window`), that map with the window recomputed.
    fn det_map(
        &self,
        m: &mut Models,
        img: &RgbImage,
        partial: Option<(&DetMap, Window)>,
    ) -> Result<DetMap, OcrError> {
        let (w, h) = img.dimensions();
        let (rw, rh) = self.det_size(w, h);
        if rw == 0 || rh == 0 {
            return Ok(DetMap {
                w: 0,
                h: 0,
                data: vec![],
            });
        }
        let step = crate::profile::span("det.resize");
        let resized = imgops::resize_linear(img, rw, rh);
        drop(step);
        let Some((prev, win)) = partial else {
            let data = run_det(&mut m.det, &resized, [0, 0, rw, rh])?;
            return Ok(DetMap {
                w: rw as usize,
                h: rh as usize,
                data,
            });
        };
        let (run, paste) = win.scaled(rw as f64 / w as f64, rh as f64 / h as f64, rw, rh);
        let part = run_det(&mut m.det, &resized, run)?;
        let mut map = prev.clone();
        let run_w = (run[2] - run[0]) as usize;
        for y in paste[1]..paste[3] {
            let from = (y - run[1]) as usize * run_w + (paste[0] - run[0]) as usize;
            let to = y as usize * map.w + paste[0] as usize;
            let n = (paste[2] - paste[0]) as usize;
            map.data[to..to + n].copy_from_slice(&part[from..from + n]);
        }
        Ok(map)
    }

    /// DB post-processing of a map of `img_w` × `img_h` (detection-input pixels).
    fn boxes(&self, map: &DetMap, img_w: u32, img_h: u32) -> Vec<Quad> {
        let _step = crate::profile::span("det.boxes");
        let (w, h) = (img_w as usize, img_h as usize);
        let boxes = det::boxes_from_map(&map.data, map.w, map.h, w, h, &self.params.det);
        det::reading_order(det::tidy(boxes, w, h))
    }
}

/// A line's text, its score, and the angle classifier's verdict when it ran.
type LineRead = (String, f32, Option<(String, f32)>);

/// A detection probability map, one value per pixel of the detection-size image.
#[derive(Clone, PartialEq)]
pub(crate) struct DetMap {
    pub w: usize,
    pub h: usize,
    pub data: Vec<f32>,
}

/// Runs the detector on the `[x0, y0, x1, y1)` window of `resized`; the window's map.
fn run_det(net: &mut Net, resized: &RgbImage, win: [u32; 4]) -> Result<Vec<f32>, OcrError> {
    let _step = crate::profile::span("det");
    let (ww, wh) = ((win[2] - win[0]) as usize, (win[3] - win[1]) as usize);
    let plane = ww * wh;
    let mut input = vec![0f32; 3 * plane];
    for y in 0..wh {
        for x in 0..ww {
            let p = resized.get_pixel(win[0] + x as u32, win[1] + y as u32).0;
            let i = y * ww + x;
            input[i] = p[2] as f32 / 127.5 - 1.0;
            input[plane + i] = p[1] as f32 / 127.5 - 1.0;
            input[2 * plane + i] = p[0] as f32 / 127.5 - 1.0;
        }
    }
    let (shape, pred) = net
        .run([1, 3, wh, ww], &input)
        .map_err(|error| OcrError::Inference {
            model: "det",
            error,
        })?;
    if shape.len() != 4 || (shape[2] as usize, shape[3] as usize) != (wh, ww) {
        return Err(OcrError::DetShape {
            shape,
            w: ww,
            h: wh,
        });
    }
    Ok(pred)
}

/// The perspective crop of one box, turned upright when it is much taller than wide.
fn line_crop(img: &RgbImage, q: &Quad) -> RgbImage {
    let _step = crate::profile::span("crop");
    let d = |a: [f64; 2], b: [f64; 2]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt();
    let cw = d(q[0], q[1]).max(d(q[2], q[3])) as u32;
    let ch = d(q[0], q[3]).max(d(q[1], q[2])) as u32;
    let crop = imgops::crop_quad(img, q, cw, ch);
    if crop.height() as f64 / crop.width() as f64 >= 1.5 {
        image::imageops::rotate270(&crop)
    } else {
        crop
    }
}

/// The size detection runs at: the short side raised to `limit_side_len` (or the long side
/// capped at it), except that an image larger than `det_cap.above` has its long side brought to
/// `det_cap.to`; multiples of 32.
fn det_size(params: &OcrParams, w: u32, h: u32) -> (u32, u32) {
    let limit = params.limit_side_len;
    let long = w.max(h) as f64;
    let ratio = match params.limit_type {
        LimitType::Min if w.min(h) < limit => limit as f64 / w.min(h) as f64,
        LimitType::Max if w.max(h) > limit => limit as f64 / long,
        _ => 1.0,
    };
    let ratio = match params.det_cap {
        Some(cap) if long > f64::from(cap.above) => f64::from(cap.to) / long,
        _ => ratio,
    };
    (
        round32((w as f64 * ratio) as u32),
        round32((h as f64 * ratio) as u32),
    )
}

fn round32(v: u32) -> u32 {
    ((v as f64 / 32.0).round() as u32) * 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_sizes_of_the_two_profiles() {
        let rapid = OcrParams::default();
        let paddle = OcrParams {
            limit_side_len: 960,
            limit_type: LimitType::Max,
            ..Default::default()
        };
        // RapidOCR raises the short side to 736: 1080p is detected whole, 720p slightly larger.
        assert_eq!(det_size(&rapid, 1920, 1080), (1920, 1088));
        assert_eq!(det_size(&rapid, 1280, 720), (1312, 736));
        // PaddleOCR caps the long side at 960; smaller frames are left as they are.
        assert_eq!(det_size(&paddle, 1920, 1080), (960, 544));
        assert_eq!(det_size(&paddle, 1280, 720), (960, 544));
        assert_eq!(det_size(&paddle, 640, 360), (640, 352));
        // Capped: images over 1600 px long are detected at a long side of 1280.
        let capped = DetProfile::Capped.apply(OcrParams::default());
        assert_eq!(det_size(&capped, 1920, 1080), (1280, 736));
        assert_eq!(det_size(&capped, 1080, 1920), (736, 1280));
        assert_eq!(det_size(&capped, 2560, 1440), (1280, 736));
        assert_eq!(det_size(&capped, 1601, 900), (1280, 704));
        // Smaller images, 720p frames among them, are sized as RapidOCR sizes them.
        for (w, h) in [(1600, 900), (1280, 720), (640, 360), (323, 430), (1167, 54)] {
            assert_eq!(det_size(&capped, w, h), det_size(&rapid, w, h), "{w}x{h}");
        }
    }
}
