//! Angle classification and recognition of line crops, in batches as RapidOCR runs them.

use super::net::{Net, NetError};
use super::{Models, OcrEngine, OcrError, imgops};
use image::RgbImage;

impl OcrEngine {
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

    /// The 0°/180° verdict of each crop (None when `use_cls` is off), and the crops with those
    /// the classifier is sure are upside down turned.
    #[allow(clippy::type_complexity)]
    pub(super) fn classify(
        &self,
        m: &mut Models,
        mut crops: Vec<RgbImage>,
    ) -> Result<(Vec<RgbImage>, Option<Vec<(String, f32)>>), OcrError> {
        if !self.params.use_cls {
            return Ok((crops, None));
        }
        let _step = crate::profile::span("cls");
        let (h, w) = (48u32, 192u32);
        let mut angles = vec![(String::new(), 0.0f32); crops.len()];
        for batch in self.batches(&crops) {
            let (_, probs) = run_lines(&mut m.cls, &crops, &batch, h, w).map_err(|error| {
                OcrError::Inference {
                    model: "cls",
                    error,
                }
            })?;
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

    /// The text of each crop and its score, recognised in batches of similar width.
    pub(super) fn recognize(
        &self,
        m: &mut Models,
        crops: &[RgbImage],
    ) -> Result<Vec<(String, f32)>, OcrError> {
        let _step = crate::profile::span("rec");
        let h = 48u32;
        let mut out = vec![(String::new(), 0.0f32); crops.len()];
        for batch in self.batches(crops) {
            let max_ratio = batch
                .iter()
                .map(|&i| crops[i].width() as f64 / crops[i].height() as f64)
                .fold(320.0 / 48.0, f64::max);
            let w = (h as f64 * max_ratio) as u32;
            let tb = std::time::Instant::now();
            let (shape, probs) = run_lines(&mut m.rec, crops, &batch, h, w).map_err(|error| {
                OcrError::Inference {
                    model: "rec",
                    error,
                }
            })?;
            tracing::trace!(
                ms = tb.elapsed().as_secs_f64() * 1e3,
                w,
                n = batch.len(),
                widths = ?batch.iter().map(|&i| (48.0 * crops[i].width() as f64 / crops[i].height() as f64) as u32).collect::<Vec<_>>(),
                "Recognition batch."
            );
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
    net: &mut Net,
    crops: &[RgbImage],
    batch: &[usize],
    h: u32,
    w: u32,
) -> Result<(Vec<i64>, Vec<f32>), NetError> {
    let per = (3 * h * w) as usize;
    let mut input = vec![0f32; per * batch.len()];
    for (k, &i) in batch.iter().enumerate() {
        imgops::to_line_tensor(&crops[i], h, w, &mut input[k * per..(k + 1) * per]);
    }
    net.run([batch.len(), 3, h as usize, w as usize], &input)
}
