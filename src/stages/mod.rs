//! The stage registry: every `type` a pipeline file may name, and how each is built.
//! Adding a stage: a new `stages/<name>.rs` with `build`, a `mod` line, an arm in `build_stage`
//! and a line in `STAGE_TYPES`.

pub mod committee;
pub mod download;
pub mod frames;
pub mod judge;
pub mod local;
pub mod ocr;
pub mod overlays;
pub mod prescreen;
pub mod probe;
pub mod quality;
pub mod relevance;
pub mod shots;
pub mod youtube;

use crate::config::plan::BuildCx;
use crate::config::{ConfigError, Seg, StageCommon};
use crate::runtime::StageTask;
use crate::runtime::stage::Source;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// (type, what it adds) for `vidcurate list-stages` and error messages.
pub const STAGE_TYPES: &[(&str, &str)] = &[
    (
        "download",
        "media into the run's content-addressed store: direct links (resumable), YouTube via yt-dlp (opt-in), local files as they are",
    ),
    (
        "relevance",
        "1-10 likelihood of the risk event from title + description (RiskCue prompt; a model service, or the local MiniLM judge)",
    ),
    (
        "prescreen",
        "local verdicts on the rubric's visible criteria (subtitles, dates, locations, logos, SNS overlays, jump cuts) from OCR and shots: rejects before any paid call when certain",
    ),
    (
        "quality",
        "the 12-criterion visual rubric (RiskCue A.4 prompt) by a vision model over the sampled frames; keep >= 10 of 12 scoring 2",
    ),
    (
        "committee",
        "N vision models answer one visual-only risk question; every vote stored; hardness rule configurable",
    ),
    (
        "probe",
        "duration, display size, fps, codec, frame count, audio (ffmpeg, in process)",
    ),
    (
        "frames",
        "sampled frames as JPEG: uniform N, fps with a cap, or every frame in a time range",
    ),
    (
        "ocr",
        "text regions of every sampled frame (PP-OCRv4) with stroke colour (HSV), layout and creator-added vs scene text",
    ),
    (
        "overlays",
        "per-video summary of creator-added text: counts, colours, positions, share over 8 time segments",
    ),
    (
        "shots",
        "shot boundaries (content detector, PySceneDetect-style) and shots per video",
    ),
];

pub const SOURCE_TYPES: &[(&str, &str)] = &[
    (
        "local",
        "a folder of video files, or a CSV/JSONL manifest with extra columns carried through",
    ),
    (
        "youtube",
        "a query file -> YouTube Data API search and videos.list: one row per video with provenance (quota-aware, cached)",
    ),
];

/// A built stage and what its fingerprint hashes.
pub struct Built {
    pub task: Box<dyn StageTask>,
    /// Compute settings with defaults filled in.
    pub compute: serde_json::Value,
    /// Bumped when the stage's algorithm changes its results, so old shards are redone.
    pub version: u32,
    pub default_in_flight: usize,
}

/// Deserializes a stage's `compute` table into its typed settings.
pub fn compute_settings<T: DeserializeOwned + Serialize>(
    common: &StageCommon,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(T, serde_json::Value), ConfigError> {
    let t: T = bcx.src.typed(&common.compute, at)?;
    let json = serde_json::to_value(&t).map_err(|e| bcx.src.error_at(at, e.to_string()))?;
    Ok((t, json))
}

/// Stages without thresholds refuse a `select` table rather than ignore it.
pub fn no_select(common: &StageCommon, at: &[Seg], bcx: &BuildCx) -> Result<(), ConfigError> {
    if common.select.is_empty() {
        Ok(())
    } else {
        Err(bcx.src.error_at(
            at,
            format!("stage type `{}` has no `select` settings", common.kind),
        ))
    }
}

fn known(list: &[(&str, &str)]) -> String {
    list.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ")
}

pub fn build_stage(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    match common.kind.as_str() {
        "download" => download::build(common, compute_at, select_at, bcx),
        "relevance" => relevance::build(common, compute_at, select_at, bcx),
        "prescreen" => prescreen::build(common, compute_at, select_at, bcx),
        "quality" => quality::build(common, compute_at, select_at, bcx),
        "committee" => committee::build(common, compute_at, select_at, bcx),
        "probe" => probe::build(common, compute_at, select_at, bcx),
        "frames" => frames::build(common, compute_at, select_at, bcx),
        "ocr" => ocr::build(common, compute_at, select_at, bcx),
        "overlays" => overlays::build(common, compute_at, select_at, bcx),
        "shots" => shots::build(common, compute_at, select_at, bcx),
        other => {
            let mut at = compute_at.to_vec();
            at.pop();
            at.push(Seg::Key("type".into()));
            Err(bcx.src.error_at(
                &at,
                format!(
                    "unknown stage type {other:?}; known types: {}",
                    known(STAGE_TYPES)
                ),
            ))
        }
    }
}

pub fn build_source(
    kind: &str,
    table: &toml::Table,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError> {
    match kind {
        "local" => local::build(table, at, bcx),
        "youtube" => youtube::build(table, at, bcx),
        other => {
            let mut at = at.to_vec();
            at.push(Seg::Key("type".into()));
            Err(bcx.src.error_at(
                &at,
                format!(
                    "unknown source type {other:?}; known types: {}",
                    known(SOURCE_TYPES)
                ),
            ))
        }
    }
}
