//! `overlays`: per-video summary of on-screen text, from the `ocr` slot.
//!
//! Reads: the `frames` and `ocr` slots. Writes: one row per video (the `ocr_videos` table when the
//! stage id is `ocr_videos`): frames sampled, frames with any text and with creator-added text,
//! text coverage, regions, distinct overlays (creator-added text grouped by normalised text and
//! grid cell), the most common overlay colour. Calls: nothing. Caches: nothing beyond its shards.

use crate::config::{ConfigError, Seg};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlaysConfig {}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OverlaySummary {
    pub frames: u32,
    pub frames_with_text: u32,
    pub frames_with_overlay: u32,
    /// Share of sampled frames showing creator-added text.
    pub overlay_coverage: f32,
    /// Share of sampled frames showing any text.
    pub text_coverage: f32,
    pub regions: u32,
    pub creator_added_regions: u32,
    pub distinct_overlays: u32,
    /// Most common text colour name among creator-added regions ("" when none).
    pub overlay_color: String,
}

pub struct OverlaysStage;

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "overlays",
    about: "per-video summary of creator-added text: counts, colours, positions, share over 8 time segments",
    build: super::build_plain::<OverlaysConfig>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[("compute", crate::config::keys_of::<OverlaysConfig>)],
};

impl super::PlainStage for OverlaysConfig {
    const IN_FLIGHT: usize = 4;
    fn task(self, _at: &[Seg], _bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        Ok(super::processor_task(OverlaysStage))
    }
}

#[async_trait]
impl Processor for OverlaysStage {
    type Row = OverlaySummary;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames, Slot::Ocr]
    }
    fn provides(&self) -> Slot {
        Slot::Overlays
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        _cx: &StageContext,
    ) -> Result<Vec<OverlaySummary>, StageError> {
        let frames = rec.frames.as_ref().map_or(0, |f| f.len()) as u32;
        let regions = rec.ocr.as_deref().unwrap_or_default();
        let with_text: BTreeSet<u32> = regions.iter().map(|r| r.frame_index).collect();
        let added: Vec<_> = regions.iter().filter(|r| r.creator_added).collect();
        let with_overlay: BTreeSet<u32> = added.iter().map(|r| r.frame_index).collect();
        let distinct: BTreeSet<(String, String)> = added
            .iter()
            .map(|r| {
                (
                    r.text
                        .chars()
                        .filter(|c| c.is_alphanumeric())
                        .flat_map(char::to_lowercase)
                        .collect(),
                    r.grid_cell.clone(),
                )
            })
            .collect();
        let mut colours: BTreeMap<&str, u32> = BTreeMap::new();
        for r in &added {
            *colours.entry(r.text_color.as_str()).or_default() += 1;
        }
        let share = |n: usize| {
            if frames == 0 {
                0.0
            } else {
                n as f32 / frames as f32
            }
        };
        Ok(vec![OverlaySummary {
            frames,
            frames_with_text: with_text.len() as u32,
            frames_with_overlay: with_overlay.len() as u32,
            overlay_coverage: share(with_overlay.len()),
            text_coverage: share(with_text.len()),
            regions: regions.len() as u32,
            creator_added_regions: added.len() as u32,
            distinct_overlays: distinct.len() as u32,
            overlay_color: colours
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(c, _)| c.to_string())
                .unwrap_or_default(),
        }])
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<OverlaySummary>) {}
}
