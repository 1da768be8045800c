//! `ocr`: on-screen text of every sampled frame, with colour, layout and creator-added verdicts.
//!
//! Reads: the `frames` slot, each frame as decoded (handed over by the frames stage, or decoded
//! again from the media on a resumed run: `stages::frames::decoded`), never its JPEG unless the
//! media is gone. Writes: the `ocr` slot, one row per
//! text region (the `ocr_regions` table when the stage id is `ocr_regions`): text, score, box,
//! layout (`layout.rs`), per-pixel stroke colour (`colour.rs`), creator-added verdict with its
//! evidence (`creator.rs`). Calls: PP-OCRv4 det + cls + rec on OpenVINO or ONNX Runtime (`crate::engines::ocr`), on the
//! CPU pool, one frame per core (each OCR worker is single-threaded). With `reuse` on (the
//! default) a video's frames are cut into one run of consecutive frames per OCR worker, each read
//! in order so a frame can reuse what the previous ones found (`crate::engines::ocr::reuse`); how often
//! that fired goes to the stage's tally and the run summary. Caches: nothing beyond its shards;
//! the models are loaded once per run.

pub mod colour;
pub mod creator;
pub mod layout;

use crate::config::{ConfigError, Seg};
use crate::engines::ocr::{
    DetProfile, EngineKind, FrameMemory, OcrEngine, OcrParams, Reuse, ReuseCounts,
};
use crate::error::{ErrorKind, StageError};
use crate::record::{Slot, TextRegion, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// `compute` settings of an `ocr` stage (defaults: RapidOCR 1.4.4's).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OcrConfig {
    /// Run the 0°/180° angle classifier.
    pub use_cls: bool,
    /// Drop regions whose recognition score is below this.
    pub text_score: f32,
    /// Detection: minimum mean probability inside a box.
    pub box_thresh: f32,
    /// Detection: how much boxes are grown.
    pub unclip_ratio: f64,
    /// Position grid (MVFNDB's position task has 30 cells: 5 rows × 6 columns).
    pub grid_rows: u32,
    pub grid_cols: u32,
    /// `on`: a video's frames are read in order and a frame reuses the previous one's detection
    /// when it is unchanged, and an earlier frame's recognition of a line whose crop is
    /// unchanged (`crate::engines::ocr::reuse`); `off`: every frame from scratch; `verify`: compute
    /// everything, output that, and count where reuse would have differed.
    pub reuse: Reuse,
    /// Detection input size: `capped` (the default: RapidOCR's rule, the short side raised to
    /// 736, with the long side capped at 1280: small images and 720p frames as RapidOCR reads
    /// them, 1080p frames at a third of their pixels), `rapidocr` (RapidOCR 1.4.4's own, for
    /// parity: 1080p frames detected whole) or `paddleocr` (PaddleOCR's own default, which
    /// MVFNDB used: the long side capped at 960 and small images not raised; small text may be
    /// lost).
    pub det_profile: DetProfile,
    /// With reuse: when only a small box of a frame changed, run detection on that box (with
    /// margins) and keep the previous map elsewhere. Saves detection on static shots with a
    /// moving element, but boxes can move by a pixel or two against a whole-frame run (the
    /// detector pools over the whole image), and with them a letter: off by default.
    pub window_detection: bool,
    /// The library the models run on: `auto` (the default: OpenVINO where its library loads,
    /// else ONNX Runtime), `openvino` or `onnxruntime` (RapidOCR's own). The same models give
    /// the same text on either, so changing it does not redo stored results.
    pub engine: EngineKind,
}

impl Default for OcrConfig {
    fn default() -> Self {
        Self {
            use_cls: true,
            text_score: 0.5,
            box_thresh: 0.5,
            unclip_ratio: 1.6,
            grid_rows: 5,
            grid_cols: 6,
            reuse: Reuse::On,
            det_profile: DetProfile::Capped,
            window_detection: false,
            engine: EngineKind::Auto,
        }
    }
}

pub struct OcrStage {
    cfg: OcrConfig,
    /// The load's failure is kept as the stage error it becomes, so every video gets it.
    engine: OnceLock<Result<Arc<OcrEngine>, StageError>>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "ocr",
    about: "text regions of every sampled frame (PP-OCRv4) with stroke colour (HSV), layout and creator-added vs scene text",
    build: super::build_plain::<OcrConfig>,
    reselect: None,
    summary: Some(summary),
    release: crate::stages::Release::Text,
    keys: &[("compute", crate::config::keys_of::<OcrConfig>)],
};

/// The run summary's line: how much work reuse saved (and, verifying, whether it was exact),
/// and the frames not read as handed over by the frames stage.
fn summary(stage_id: &str, c: &crate::runtime::StageCounts) -> String {
    let n = |k: &str| c.tally.get(k).copied().unwrap_or(0);
    let mut notes = vec![];
    if n("frames_decoded_again") > 0 {
        notes.push(format!(
            "{} frames decoded again from the media (sampled by an earlier invocation, or runtime.decoded_frames_mib = 0)",
            n("frames_decoded_again")
        ));
    }
    if n("frames_from_jpeg") > 0 {
        notes.push(format!(
            "{} frames read from their stored JPEG because the media could not be decoded again (gone or changed; text may differ slightly from a read of the decoded frame)",
            n("frames_from_jpeg")
        ));
    }
    let reuse = reuse_summary(stage_id, c);
    match (reuse.is_empty(), notes.is_empty()) {
        (_, true) => reuse,
        (true, false) => format!("{stage_id}: {}", notes.join("; ")),
        (false, false) => format!("{reuse}; {}", notes.join("; ")),
    }
}

fn reuse_summary(stage_id: &str, c: &crate::runtime::StageCounts) -> String {
    let n = |k: &str| c.tally.get(k).copied().unwrap_or(0);
    if n("frames") == 0 {
        return String::new();
    }
    let mut line = format!(
        "{stage_id}: detection reused on {}/{} frames",
        n("detection_reused"),
        n("frames")
    );
    if n("detection_partial") > 0 {
        line += &format!(
            " and recomputed in a window on {} ({:.0} % of the pixels run)",
            n("detection_partial"),
            100.0 * n("detection_pixels") as f64 / n("detection_pixels_full").max(1) as f64
        );
    }
    line += &format!(
        ", recognition reused on {}/{} lines",
        n("recognition_reused"),
        n("lines")
    );
    if c.tally.contains_key("text_mismatch") {
        line += &format!(
            " (verify, against reading every frame from scratch: {} frames read differently, {} reused texts differ, {} frames' boxes moved more than {} px)",
            n("text_mismatch"),
            n("recognition_mismatch"),
            n("detection_mismatch"),
            crate::engines::ocr::reuse::QUAD_PX
        );
    }
    line
}

impl super::PlainStage for OcrConfig {
    const IN_FLIGHT: usize = 1;
    /// The models are part of what the results depend on.
    fn fingerprint(&self, mut compute: serde_json::Value) -> serde_json::Value {
        compute["models"] =
            serde_json::json!("PP-OCRv4 det/rec + mobile v2 cls (rapidocr-onnxruntime 1.4.4)");
        // Rows of runs that read the stored JPEGs are not mixed with rows read from the
        // decoded frames: a new version of this stage redoes them.
        compute["input"] = serde_json::json!("decoded frames");
        // Speed, not results: the engines agree to 1e-5 on these models.
        if let Some(c) = compute.as_object_mut() {
            c.remove("engine");
        }
        compute
    }
    fn task(self, at: &[Seg], bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        let key = |k: &str| crate::config::key_at(at, k);
        for (k, n) in [("grid_rows", self.grid_rows), ("grid_cols", self.grid_cols)] {
            if !(1..=20).contains(&n) {
                return Err(bcx.src.error_at(&key(k), "must be between 1 and 20"));
            }
        }
        Ok(super::processor_task(OcrStage {
            cfg: self,
            engine: OnceLock::new(),
        }))
    }
}

impl OcrStage {
    fn engine(&self, threads: usize) -> Result<Arc<OcrEngine>, StageError> {
        self.engine
            .get_or_init(|| {
                let params = self.cfg.det_profile.apply(OcrParams {
                    window_detection: self.cfg.window_detection,
                    engine: self.cfg.engine,
                    use_cls: self.cfg.use_cls,
                    text_score: self.cfg.text_score,
                    det: crate::engines::ocr::det::DbParams {
                        box_thresh: self.cfg.box_thresh,
                        unclip_ratio: self.cfg.unclip_ratio,
                        ..Default::default()
                    },
                    ..Default::default()
                });
                let _step = crate::profile::span("models");
                OcrEngine::load(&crate::paths::models_dir(), threads, params)
                    .map(Arc::new)
                    // Missing models stop the run: every video would fail the same way.
                    .map_err(|e| StageError::new(ErrorKind::Config, "ocr_models", e.to_string()))
            })
            .clone()
    }
}

/// OCR, layout and colour of one decoded frame.
fn analyse_frame(
    engine: &OcrEngine,
    cfg: &OcrConfig,
    img: &image::RgbImage,
    frame_index: u32,
    timestamp_secs: f64,
    memory: &mut FrameMemory,
) -> Result<(Vec<(TextRegion, creator::ColourFacts)>, ReuseCounts), StageError> {
    let (fw, fh) = img.dimensions();
    let t0 = std::time::Instant::now();
    let (found, reused) = engine
        .ocr_frame(img, memory, cfg.reuse)
        .map_err(|e| StageError::internal("ocr_failed", e.to_string()))?;
    let t1 = std::time::Instant::now();
    let out: Vec<_> = found
        .into_iter()
        .map(|r| {
            let step = crate::profile::span("layout");
            let lay = layout::measure(&r.quad, fw, fh, cfg.grid_rows, cfg.grid_cols);
            drop(step);
            // The quad's extent along axis `a`, in whole pixels.
            let span = |a: usize| {
                let v = r.quad.iter().map(|p| p[a]);
                let lo = v.clone().fold(f32::MAX, f32::min).floor() as u32;
                (lo, v.fold(0f32, f32::max).ceil() as u32)
            };
            let ((x0, x1), (y0, y1)) = (span(0), span(1));
            let step = crate::profile::span("colour");
            let c = colour::measure(img, x0, y0, x1, y1);
            drop(step);
            let facts = creator::ColourFacts {
                hue_spread: c.hue_spread,
                val_spread: c.val_spread,
                bg_uniformity: c.bg_uniformity,
            };
            let region = TextRegion {
                frame_index,
                timestamp_secs,
                text_len: r.text.chars().count() as u32,
                text: r.text,
                score: r.score,
                quad: r.quad.iter().flatten().copied().collect(),
                frame_width: fw,
                frame_height: fh,
                center_x: lay.center_x,
                center_y: lay.center_y,
                width: lay.width,
                height: lay.height,
                area_frac: lay.area_frac,
                aspect_ratio: lay.aspect_ratio,
                grid_row: lay.grid_row,
                grid_col: lay.grid_col,
                grid_cell: lay.grid_cell,
                text_h: c.text_h,
                text_s: c.text_s,
                text_v: c.text_v,
                text_color: c.text_color,
                bg_h: c.bg_h,
                bg_s: c.bg_s,
                bg_v: c.bg_v,
                bg_color: c.bg_color,
                stroke_pixels: c.stroke_pixels,
                hue_hist: c.hue_hist,
                sat_hist: c.sat_hist,
                val_hist: c.val_hist,
                creator_added: false,
                creator_score: 0.0,
                creator_evidence: String::new(),
            };
            (region, facts)
        })
        .collect();
    // The colour and layout share of the work, for RUST_LOG=vidcurate=debug.
    tracing::debug!(
        ocr_us = (t1 - t0).as_micros() as u64,
        colour_layout_us = t1.elapsed().as_micros() as u64,
        "Frame analysed."
    );
    Ok((out, reused))
}

#[async_trait]
impl Processor for OcrStage {
    type Row = TextRegion;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Ocr
    }
    fn reads_decoded_frames(&self) -> bool {
        true
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<TextRegion>, StageError> {
        let frames = rec
            .frames
            .as_ref()
            .ok_or_else(|| StageError::internal("missing_frames", "ocr needs frames"))?;
        let engine = self.engine(cx.cpu.threads())?;
        // Without reuse every frame is a job of its own; with it, the frames are cut into one
        // run of consecutive frames per OCR worker, each run read in order carrying its memory.
        let per_chain = match self.cfg.reuse {
            Reuse::Off => 1,
            _ => frames.len().div_ceil(engine.workers().max(1)).max(1),
        };
        let chains = frames.chunks(per_chain).map(|chain| {
            let (engine, cfg, cpu) = (engine.clone(), self.cfg.clone(), cx.cpu.clone());
            async move {
                let (images, read) = crate::stages::frames::decoded(rec, chain, cx).await?;
                let mut memory = FrameMemory::default();
                let mut counts = ReuseCounts::default();
                let mut rows = vec![];
                for (f, img) in chain.iter().zip(images) {
                    let (idx, ts) = (f.frame_index, f.timestamp_secs);
                    let cfg = cfg.clone();
                    let engine = engine.clone();
                    let (found, c, m) = cpu
                        .run(move || {
                            analyse_frame(&engine, &cfg, &img, idx, ts, &mut memory)
                                .map(|(found, c)| (found, c, memory))
                        })
                        .await?;
                    memory = m;
                    counts.add(&c);
                    rows.extend(found);
                }
                Ok::<_, StageError>((rows, counts, read))
            }
        });
        let mut regions = vec![];
        let mut facts = vec![];
        let mut counts = ReuseCounts::default();
        for (rows, c, read) in futures::future::try_join_all(chains).await? {
            counts.add(&c);
            // Only what happened: a run that read every frame as handed over has no such key.
            for (name, n) in [
                ("frames_decoded_again", read.decoded_again),
                ("frames_from_jpeg", read.from_jpeg),
            ] {
                if n > 0 {
                    cx.tally.add(name, n);
                }
            }
            for (r, f) in rows {
                regions.push(r);
                facts.push(f);
            }
        }
        if self.cfg.reuse != Reuse::Off {
            for (name, n) in [
                ("frames", counts.frames),
                ("detection_reused", counts.det_reused),
                ("detection_partial", counts.det_partial),
                ("detection_pixels", counts.det_pixels),
                ("detection_pixels_full", counts.det_pixels_full),
                ("lines", counts.lines),
                ("recognition_reused", counts.rec_reused),
            ] {
                cx.tally.add(name, n);
            }
        }
        if self.cfg.reuse == Reuse::Verify {
            cx.tally.add("detection_mismatch", counts.det_mismatch);
            cx.tally.add("recognition_mismatch", counts.rec_mismatch);
            cx.tally.add("text_mismatch", counts.text_mismatch);
        }
        creator::classify(&mut regions, &facts);
        Ok(regions)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<TextRegion>) {
        rec.ocr = Some(rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::PlainStage;

    fn hashed(cfg: &OcrConfig) -> serde_json::Value {
        cfg.fingerprint(serde_json::to_value(cfg).unwrap())
    }

    /// The engine changes speed, not text, so stored results stay valid across it; the
    /// detection size changes what is read, so it redoes them.
    #[test]
    fn the_engine_is_not_fingerprinted_and_the_detection_size_is() {
        let base = OcrConfig::default();
        let on = |engine| OcrConfig {
            engine,
            ..OcrConfig::default()
        };
        assert_eq!(hashed(&base), hashed(&on(EngineKind::Openvino)));
        assert_eq!(hashed(&base), hashed(&on(EngineKind::Onnxruntime)));
        let parity = OcrConfig {
            det_profile: DetProfile::Rapidocr,
            ..OcrConfig::default()
        };
        assert_ne!(hashed(&base), hashed(&parity));
        assert_eq!(hashed(&base)["det_profile"], "capped");
    }
}
