//! `ocr`: on-screen text of every sampled frame, with colour, layout and creator-added verdicts.
//!
//! Reads: the `frames` slot (JPEGs in the run directory). Writes: the `ocr` slot, one row per
//! text region (the `ocr_regions` table when the stage id is `ocr_regions`): text, score, box,
//! layout (`layout.rs`), per-pixel stroke colour (`colour.rs`), creator-added verdict with its
//! evidence (`creator.rs`). Calls: PP-OCRv4 det + cls + rec on ONNX Runtime (`crate::ocr`), on the
//! CPU pool, one frame per core (each OCR worker is single-threaded). Caches: nothing beyond its
//! shards; the models are loaded once per run.

pub mod colour;
pub mod creator;
pub mod layout;

use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::{ErrorKind, StageError};
use crate::ocr::{OcrEngine, OcrParams};
use crate::record::{Slot, TextRegion, VideoRecord};
use crate::runtime::ProcessorTask;
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
        }
    }
}

pub struct OcrStage {
    cfg: OcrConfig,
    engine: OnceLock<Result<Arc<OcrEngine>, String>>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "ocr",
    about: "text regions of every sampled frame (PP-OCRv4) with stroke colour (HSV), layout and creator-added vs scene text",
    build,
    reselect: None,
    summary: None,
};

pub fn build(
    common: &StageCommon,
    at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<super::Built, ConfigError> {
    let (cfg, mut compute) = super::compute_settings::<OcrConfig>(common, at, bcx)?;
    super::no_select(common, select_at, bcx)?;
    let key = |k: &str| crate::config::key_at(at, k);
    if !(1..=20).contains(&cfg.grid_rows) {
        return Err(bcx
            .src
            .error_at(&key("grid_rows"), "must be between 1 and 20"));
    }
    if !(1..=20).contains(&cfg.grid_cols) {
        return Err(bcx
            .src
            .error_at(&key("grid_cols"), "must be between 1 and 20"));
    }
    // The models are part of what the results depend on.
    compute["models"] =
        serde_json::json!("PP-OCRv4 det/rec + mobile v2 cls (rapidocr-onnxruntime 1.4.4)");
    Ok(super::Built {
        task: Box::new(ProcessorTask(Arc::new(OcrStage {
            cfg,
            engine: OnceLock::new(),
        }))),
        compute,
        version: 1,
        default_in_flight: 1,
    })
}

impl OcrStage {
    fn engine(&self, threads: usize) -> Result<Arc<OcrEngine>, StageError> {
        self.engine
            .get_or_init(|| {
                let params = OcrParams {
                    use_cls: self.cfg.use_cls,
                    text_score: self.cfg.text_score,
                    det: crate::ocr::det::DbParams {
                        box_thresh: self.cfg.box_thresh,
                        unclip_ratio: self.cfg.unclip_ratio,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                OcrEngine::load(&crate::paths::models_dir(), threads, params).map(Arc::new)
            })
            .clone()
            // Missing models stop the run: every video would fail the same way.
            .map_err(|e| StageError::new(ErrorKind::Config, "ocr_models", e))
    }
}

/// OCR, layout and colour of one decoded frame.
fn analyse_frame(
    engine: &OcrEngine,
    cfg: &OcrConfig,
    jpeg: &[u8],
    frame_index: u32,
    timestamp_secs: f64,
) -> Result<Vec<(TextRegion, creator::ColourFacts)>, StageError> {
    let img = image::load_from_memory(jpeg)
        .map_err(|e| StageError::data("bad_frame", e.to_string()))?
        .to_rgb8();
    let (fw, fh) = img.dimensions();
    let t0 = std::time::Instant::now();
    let found = engine
        .ocr(&img)
        .map_err(|e| StageError::internal("ocr_failed", e))?;
    let t1 = std::time::Instant::now();
    let out: Vec<_> = found
        .into_iter()
        .map(|r| {
            let lay = layout::measure(&r.quad, fw, fh, cfg.grid_rows, cfg.grid_cols);
            let xs = r.quad.iter().map(|p| p[0]);
            let ys = r.quad.iter().map(|p| p[1]);
            let (x0, x1) = (
                xs.clone().fold(f32::MAX, f32::min).floor() as u32,
                xs.fold(0f32, f32::max).ceil() as u32,
            );
            let (y0, y1) = (
                ys.clone().fold(f32::MAX, f32::min).floor() as u32,
                ys.fold(0f32, f32::max).ceil() as u32,
            );
            let c = colour::measure(&img, x0, y0, x1, y1);
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
    Ok(out)
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
        // Frames are read concurrently, one per OCR worker (the CPU pool bounds them).
        let jobs = frames.iter().map(|f| {
            let (engine, cfg, idx, ts) = (
                engine.clone(),
                self.cfg.clone(),
                f.frame_index,
                f.timestamp_secs,
            );
            let (store, path, cpu) = (cx.store.clone(), f.path.clone(), cx.cpu.clone());
            async move {
                let jpeg = store
                    .get(&path)
                    .await
                    .map_err(|e| StageError::internal("read_frame", format!("{path}: {e}")))?;
                cpu.run(move || analyse_frame(&engine, &cfg, &jpeg, idx, ts))
                    .await
            }
        });
        let mut regions = vec![];
        let mut facts = vec![];
        for (r, c) in futures::future::try_join_all(jobs)
            .await?
            .into_iter()
            .flatten()
        {
            regions.push(r);
            facts.push(c);
        }
        creator::classify(&mut regions, &facts);
        Ok(regions)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<TextRegion>) {
        rec.ocr = Some(rows);
    }
}
