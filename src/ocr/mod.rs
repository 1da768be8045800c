//! PP-OCRv4 text detection, angle classification and recognition on ONNX Runtime, with the pre-
//! and post-processing of RapidOCR 1.4.4 (its `config.yaml` defaults), so results compare one to
//! one with it. Models and ONNX Runtime come from PyPI wheels (`scripts/fetch_models.sh`);
//! ONNX Runtime is loaded at run time (`ort`'s load-dynamic).
//!
//! Pipeline per image: limit the long side to 2000 px; letterbox very flat images; detect at a
//! min side of 736 (multiple of 32); DB post-processing (`det`); crop each box (perspective warp);
//! classify 0°/180° in batches of 6 and turn crops the classifier is sure (> 0.9) are upside down;
//! recognise in batches of 6 sorted by width (height 48, CTC greedy decode); keep text score ≥ 0.5.

pub mod det;
pub mod imgops;

use det::{DbParams, Quad};
use image::RgbImage;
use ort::session::Session;
use ort::value::TensorRef;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

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

/// RapidOCR 1.4.4's defaults.
#[derive(Debug, Clone)]
pub struct OcrParams {
    pub use_cls: bool,
    pub text_score: f32,
    pub det: DbParams,
    pub limit_side_len: u32,
    pub max_side_len: u32,
    pub min_side_len: u32,
    pub min_height: u32,
    pub width_height_ratio: f64,
    pub cls_thresh: f32,
    pub batch: usize,
}

impl Default for OcrParams {
    fn default() -> Self {
        Self {
            use_cls: true,
            text_score: 0.5,
            det: DbParams::default(),
            limit_side_len: 736,
            max_side_len: 2000,
            min_side_len: 30,
            min_height: 30,
            width_height_ratio: 8.0,
            cls_thresh: 0.9,
            batch: 6,
        }
    }
}

static ORT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

/// Loads ONNX Runtime's shared library once (`ORT_DYLIB_PATH` overrides the models folder).
fn init_ort(models: &Path) -> Result<ort::environment::Environment, String> {
    ORT.get_or_init(|| {
        let lib = std::env::var_os("ORT_DYLIB_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| models.join("onnxruntime/libonnxruntime.so.1.31.1"));
        if !lib.is_file() {
            return Err(format!(
                "ONNX Runtime library not found at {}: run scripts/fetch_models.sh (or set ORT_DYLIB_PATH)",
                lib.display()
            ));
        }
        let builder = ort::init_from(&lib).map_err(|e| format!("loading {}: {e}", lib.display()))?;
        builder.with_name("vidcurate").build().map_err(|e| format!("starting ONNX Runtime: {e}"))
    })
    .clone()
}

/// One set of sessions, used by one thread at a time.
struct Models {
    det: Session,
    cls: Session,
    rec: Session,
}

/// `threads` workers, each a set of single-threaded sessions: two images at once on one thread
/// each read 1.5x more images per second here than one image at a time on two threads.
pub struct OcrEngine {
    workers: Vec<Mutex<Models>>,
    next: AtomicUsize,
    chars: Vec<String>,
    pub params: OcrParams,
}

fn session(
    env: &ort::environment::Environment,
    path: &Path,
    threads: usize,
) -> Result<Session, String> {
    if !path.is_file() {
        return Err(format!(
            "model {} not found: run scripts/fetch_models.sh",
            path.display()
        ));
    }
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let b = Session::builder(env).map_err(|e| err(&e))?;
    let b = b
        .with_optimization_level(ort::session::builder::GraphOptimizationLevel::Level3)
        .map_err(|e| err(&e))?;
    let b = b.with_intra_threads(threads).map_err(|e| err(&e))?;
    let mut b = b.with_inter_threads(1).map_err(|e| err(&e))?;
    b.commit_from_file(path).map_err(|e| err(&e))
}

impl OcrEngine {
    /// Loads det, cls and rec from `models/ppocrv4/` once per worker (`threads` workers).
    pub fn load(models: &Path, threads: usize, params: OcrParams) -> Result<Self, String> {
        let env = init_ort(models)?;
        let dir = models.join("ppocrv4");
        let mut workers = vec![];
        let mut chars = vec![];
        for _ in 0..threads.max(1) {
            let rec = session(&env, &dir.join("rec.onnx"), 1)?;
            if chars.is_empty() {
                let dict = rec
                    .metadata()
                    .map_err(|e| e.to_string())?
                    .custom("character")
                    .ok_or("rec model has no `character` metadata")?;
                // Index 0 is the CTC blank; a space is appended last (PaddleOCR's use_space_char).
                chars.push(String::new());
                chars.extend(
                    dict.split('\n')
                        .map(|s| s.trim_end_matches('\r').to_string()),
                );
                chars.push(" ".into());
            }
            workers.push(Mutex::new(Models {
                det: session(&env, &dir.join("det.onnx"), 1)?,
                cls: session(&env, &dir.join("cls.onnx"), 1)?,
                rec,
            }));
        }
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
    fn worker(&self) -> Result<MutexGuard<'_, Models>, String> {
        let n = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Ok(g) = self.workers[(start + i) % n].try_lock() {
                return Ok(g);
            }
        }
        self.workers[start % n]
            .lock()
            .map_err(|_| "OCR worker poisoned".to_string())
    }

    /// Detection, classification and recognition of every text line in `img`.
    pub fn ocr(&self, img: &RgbImage) -> Result<Vec<Region>, String> {
        let (raw_w, raw_h) = img.dimensions();
        let (img, ratio_w, ratio_h) = self.limit_sides(img);
        // Letterbox very flat or very low images (black bands top and bottom).
        let (w, h) = img.dimensions();
        let flat = w as f64 / h as f64 > self.params.width_height_ratio;
        let (img, pad_top) = if h <= self.params.min_height || flat {
            let new_h = ((w as f64 / self.params.width_height_ratio) as u32)
                .max(self.params.min_height)
                * 2;
            let pad = (new_h as i64 - h as i64).unsigned_abs() as u32 / 2;
            let mut padded = RgbImage::new(w, h + 2 * pad);
            image::imageops::replace(&mut padded, &img, 0, pad as i64);
            (padded, pad)
        } else {
            (img, 0)
        };
        let mut m = self.worker()?;
        let t0 = std::time::Instant::now();
        let boxes = self.detect(&mut m, &img)?;
        let t_det = t0.elapsed();
        if boxes.is_empty() {
            return Ok(vec![]);
        }
        let crops: Vec<RgbImage> = boxes
            .iter()
            .map(|q| {
                let d = |a: [f64; 2], b: [f64; 2]| {
                    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt()
                };
                let cw = d(q[0], q[1]).max(d(q[2], q[3])) as u32;
                let ch = d(q[0], q[3]).max(d(q[1], q[2])) as u32;
                let crop = imgops::crop_quad(&img, q, cw, ch);
                if crop.height() as f64 / crop.width() as f64 >= 1.5 {
                    image::imageops::rotate270(&crop)
                } else {
                    crop
                }
            })
            .collect();
        let t1 = std::time::Instant::now();
        let (crops, angles) = self.classify(&mut m, crops)?;
        let t_cls = t1.elapsed();
        let texts = self.recognize(&mut m, &crops)?;
        tracing::debug!(
            det_ms = t_det.as_millis() as u64,
            cls_ms = t_cls.as_millis() as u64,
            rec_ms = (t1.elapsed() - t_cls).as_millis() as u64,
            boxes = boxes.len(),
            "OCR timings."
        );
        let mut out = vec![];
        for (i, (q, (text, score))) in boxes.iter().zip(texts).enumerate() {
            if score < self.params.text_score {
                continue;
            }
            let quad = q.map(|p| {
                let x = (p[0] * ratio_w).clamp(0.0, raw_w as f64);
                let y = ((p[1] - pad_top as f64) * ratio_h).clamp(0.0, raw_h as f64);
                [x as f32, y as f32]
            });
            out.push(Region {
                text,
                score,
                quad,
                angle: angles.as_ref().map(|a| a[i].clone()),
            });
        }
        Ok(out)
    }

    /// Recognition of the whole image as one line (RapidOCR with `use_det=False`).
    pub fn ocr_line(&self, img: &RgbImage) -> Result<Region, String> {
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

    fn detect(&self, m: &mut Models, img: &RgbImage) -> Result<Vec<Quad>, String> {
        let (w, h) = img.dimensions();
        let ratio = if w.min(h) < self.params.limit_side_len {
            self.params.limit_side_len as f64 / w.min(h) as f64
        } else {
            1.0
        };
        let rw = round32((w as f64 * ratio) as u32);
        let rh = round32((h as f64 * ratio) as u32);
        if rw == 0 || rh == 0 {
            return Ok(vec![]);
        }
        let resized = imgops::resize_linear(img, rw, rh);
        let plane = (rw * rh) as usize;
        let mut input = vec![0f32; 3 * plane];
        for (i, p) in resized.pixels().enumerate() {
            input[i] = p.0[2] as f32 / 127.5 - 1.0;
            input[plane + i] = p.0[1] as f32 / 127.5 - 1.0;
            input[2 * plane + i] = p.0[0] as f32 / 127.5 - 1.0;
        }
        let tp = std::time::Instant::now();
        let tensor =
            TensorRef::from_array_view(([1usize, 3, rh as usize, rw as usize], input.as_slice()))
                .map_err(|e| e.to_string())?;
        let outputs = m
            .det
            .run(ort::inputs![tensor])
            .map_err(|e| format!("det: {e}"))?;
        let (shape, pred) = outputs[0]
            .try_extract_tensor::<f32>()
            .map_err(|e| e.to_string())?;
        let (mh, mw) = (shape[2] as usize, shape[3] as usize);
        tracing::trace!(
            infer_ms = tp.elapsed().as_millis() as u64,
            rw,
            rh,
            "Detection inference."
        );
        let boxes = det::boxes_from_map(pred, mw, mh, w as usize, h as usize, &self.params.det);
        Ok(det::reading_order(det::tidy(boxes, w as usize, h as usize)))
    }

    /// Batches of `batch` crops sorted by aspect ratio, as RapidOCR orders them.
    fn batches(&self, crops: &[RgbImage]) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..crops.len()).collect();
        order.sort_by(|&a, &b| {
            let r = |i: usize| crops[i].width() as f64 / crops[i].height() as f64;
            r(a).total_cmp(&r(b))
        });
        order
            .chunks(self.params.batch.max(1))
            .map(|c| c.to_vec())
            .collect()
    }

    #[allow(clippy::type_complexity)]
    fn classify(
        &self,
        m: &mut Models,
        mut crops: Vec<RgbImage>,
    ) -> Result<(Vec<RgbImage>, Option<Vec<(String, f32)>>), String> {
        if !self.params.use_cls {
            return Ok((crops, None));
        }
        let (h, w) = (48u32, 192u32);
        let mut angles = vec![(String::new(), 0.0f32); crops.len()];
        for batch in self.batches(&crops) {
            let (_, probs) =
                run_lines(&mut m.cls, &crops, &batch, h, w).map_err(|e| format!("cls: {e}"))?;
            for (k, &i) in batch.iter().enumerate() {
                let (p0, p180) = (probs[2 * k], probs[2 * k + 1]);
                let (label, score) = if p180 > p0 { ("180", p180) } else { ("0", p0) };
                angles[i] = (label.to_string(), score);
                if label == "180" && score > self.params.cls_thresh {
                    crops[i] = image::imageops::rotate180(&crops[i]);
                }
            }
        }
        Ok((crops, Some(angles)))
    }

    fn recognize(&self, m: &mut Models, crops: &[RgbImage]) -> Result<Vec<(String, f32)>, String> {
        let h = 48u32;
        let mut out = vec![(String::new(), 0.0f32); crops.len()];
        for batch in self.batches(crops) {
            let max_ratio = batch
                .iter()
                .map(|&i| crops[i].width() as f64 / crops[i].height() as f64)
                .fold(320.0 / 48.0, f64::max);
            let w = (h as f64 * max_ratio) as u32;
            let (shape, probs) =
                run_lines(&mut m.rec, crops, &batch, h, w).map_err(|e| format!("rec: {e}"))?;
            let (steps, classes) = (shape[1] as usize, shape[2] as usize);
            for (k, &i) in batch.iter().enumerate() {
                out[i] = self.ctc_decode(
                    &probs[k * steps * classes..(k + 1) * steps * classes],
                    steps,
                    classes,
                );
            }
        }
        Ok(out)
    }

    /// Greedy CTC: best class per step, repeats merged, blanks dropped; score = mean probability.
    fn ctc_decode(&self, probs: &[f32], steps: usize, classes: usize) -> (String, f32) {
        let mut text = String::new();
        let (mut sum, mut n) = (0f32, 0usize);
        let mut prev = usize::MAX;
        for t in 0..steps {
            let row = &probs[t * classes..(t + 1) * classes];
            let (best, p) =
                row.iter().enumerate().fold(
                    (0, f32::MIN),
                    |acc, (i, &v)| if v > acc.1 { (i, v) } else { acc },
                );
            if best != 0 && best != prev {
                if let Some(c) = self.chars.get(best) {
                    text.push_str(c);
                }
                sum += p;
                n += 1;
            }
            prev = best;
        }
        (text, if n == 0 { 0.0 } else { sum / n as f32 })
    }
}

/// Runs a line model (cls or rec) on crops `batch` resized to height `h`, padded to width `w`.
fn run_lines(
    session: &mut Session,
    crops: &[RgbImage],
    batch: &[usize],
    h: u32,
    w: u32,
) -> Result<(Vec<i64>, Vec<f32>), String> {
    let per = (3 * h * w) as usize;
    let mut input = vec![0f32; per * batch.len()];
    for (k, &i) in batch.iter().enumerate() {
        imgops::to_line_tensor(&crops[i], h, w, &mut input[k * per..(k + 1) * per]);
    }
    let tensor =
        TensorRef::from_array_view(([batch.len(), 3, h as usize, w as usize], input.as_slice()))
            .map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs![tensor])
        .map_err(|e| e.to_string())?;
    let (shape, data) = outputs[0]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    Ok((shape.iter().copied().collect(), data.to_vec()))
}

fn round32(v: u32) -> u32 {
    ((v as f64 / 32.0).round() as u32) * 32
}
