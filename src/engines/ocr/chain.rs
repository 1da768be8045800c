//! Reading a frame of a chain with what the previous frames found (`reuse`): detection redone
//! only where the frame changed, recognition only for lines not seen before.

use super::det::Quad;
use super::reuse::{Change, KnownLine};
use super::{FrameMemory, LineRead, Models, OcrEngine, OcrError, ReuseCounts, line_crop};
use image::RgbImage;

impl OcrEngine {
    /// The lines of a frame of a chain, using what `memory` holds (`Reuse::On`), and leaving
    /// this frame's in it. `check`: recognise the reused lines too and count those whose text
    /// differs from what was remembered.
    pub(super) fn read_reusing(
        &self,
        m: &mut Models,
        img: &RgbImage,
        memory: &mut FrameMemory,
        check: bool,
        counts: &mut ReuseCounts,
    ) -> Result<Vec<KnownLine>, OcrError> {
        let t0 = std::time::Instant::now();
        let boxes = self.detect_in_chain(m, img, memory, counts)?;
        let t_det = t0.elapsed();
        let crops: Vec<RgbImage> = boxes.iter().map(|q| line_crop(img, q)).collect();
        counts.lines += boxes.len() as u64;
        // The known line each box repeats, if any.
        let known: Vec<Option<usize>> = boxes
            .iter()
            .zip(&crops)
            .map(|(q, c)| memory.same_line(q, c))
            .collect();
        counts.rec_reused += known.iter().flatten().count() as u64;
        let todo: Vec<usize> = (0..boxes.len())
            .filter(|&i| known[i].is_none() || check)
            .collect();
        let todo_crops: Vec<RgbImage> = todo.iter().map(|&i| crops[i].clone()).collect();
        let mut read: Vec<Option<LineRead>> = vec![None; boxes.len()];
        for (&i, r) in todo.iter().zip(self.read_lines(m, &todo_crops)?) {
            read[i] = Some(r);
        }
        tracing::debug!(
            det_ms = t_det.as_millis() as u64,
            rec_ms = (t0.elapsed() - t_det).as_millis() as u64,
            boxes = boxes.len(),
            recognised = todo.len(),
            "OCR timings."
        );
        // A repeated line keeps the crop and text it was first read from, so a slow change
        // cannot drift away from the pixels the text was read from.
        let mut lines = Vec::with_capacity(boxes.len());
        let mut remembered = Vec::with_capacity(boxes.len());
        for (i, (quad, crop)) in boxes.into_iter().zip(crops).enumerate() {
            match (known[i], read[i].take()) {
                (Some(j), fresh) => {
                    let was = memory.lines[j].clone();
                    if let Some((text, ..)) = fresh.filter(|f| f.0 != was.text) {
                        counts.rec_mismatch += 1;
                        tracing::debug!(was = %was.text, now = %text, "Reused recognition differs.");
                    }
                    lines.push(KnownLine {
                        quad,
                        ..was.clone()
                    });
                    remembered.push(was);
                }
                (None, Some((text, score, angle))) => {
                    let line = KnownLine {
                        quad,
                        crop,
                        text,
                        score,
                        angle,
                    };
                    lines.push(line.clone());
                    remembered.push(line);
                }
                (None, None) => unreachable!("every box is recognised or known"),
            }
        }
        memory.lines = remembered;
        Ok(lines)
    }

    /// The boxes of a frame of a chain: the previous frame's when nothing changed, from the
    /// previous map with the changed window recomputed when little did, else from scratch.
    /// Leaves this frame's map and boxes in `memory`.
    fn detect_in_chain(
        &self,
        m: &mut Models,
        img: &RgbImage,
        memory: &mut FrameMemory,
        counts: &mut ReuseCounts,
    ) -> Result<Vec<Quad>, OcrError> {
        let (w, h) = img.dimensions();
        let (rw, rh) = self.det_size(w, h);
        let full_px = rw as u64 * rh as u64;
        counts.det_pixels_full += full_px;
        // The frame memory keeps the pixels its map was computed from: kept as they were where
        // nothing changed, so a slow change is measured from where it started.
        let map = match memory.change(img, self.params.window_detection) {
            Change::Unchanged => {
                counts.det_reused += 1;
                return Ok(memory.boxes.clone());
            }
            Change::Within(win) => {
                counts.det_partial += 1;
                let prev = memory
                    .map
                    .take()
                    .expect("a change is only found against a map");
                let (run, _) = win.scaled(rw as f64 / w as f64, rh as f64 / h as f64, rw, rh);
                counts.det_pixels += (run[2] - run[0]) as u64 * (run[3] - run[1]) as u64;
                let map = self.det_map(m, img, Some((&prev, win)))?;
                if let Some(frame) = memory.frame.as_mut() {
                    win.copy(img, frame);
                }
                map
            }
            Change::Different => {
                counts.det_pixels += full_px;
                memory.frame = Some(img.clone());
                self.det_map(m, img, None)?
            }
        };
        let boxes = self.boxes(&map, w, h);
        memory.map = Some(map);
        memory.boxes = boxes.clone();
        Ok(boxes)
    }
}
