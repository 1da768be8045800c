//! The record that travels the chain, and the names of the columns every table shares.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Column present first in every stage table and in the rejects table.
pub const COL_VIDEO_ID: &str = "video_id";
/// Fingerprint of the stage's compute settings (and of every stage before it) that produced a row.
pub const COL_FINGERPRINT: &str = "stage_fingerprint";
/// Parquet footer key listing the video ids a shard completes (including ones with no rows).
pub const META_VIDEOS: &str = "vidcurate.videos";
/// Parquet footer key naming the stage that wrote a shard.
pub const META_STAGE: &str = "vidcurate.stage";

/// What a stage fills in; the planner checks each stage's `requires()` against the slots filled
/// by the stages before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    Source,
    Probe,
    Frames,
}

impl Slot {
    pub fn name(self) -> &'static str {
        match self {
            Slot::Source => "source",
            Slot::Probe => "probe",
            Slot::Frames => "frames",
        }
    }
}

/// Where a video came from, as the source saw it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceInfo {
    /// Local path (absolute) of the media file.
    pub path: String,
    /// Size in bytes when the source listed it.
    pub size_bytes: u64,
}

/// Facts about the media, from the `probe` stage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Probe {
    pub container: String,
    /// Container duration (what `ffprobe -show_format` reports).
    pub duration_secs: f64,
    /// Duration of the video stream alone; frame sampling spans this.
    pub video_duration_secs: f64,
    /// Display size, after rotation metadata.
    pub width: u32,
    pub height: u32,
    /// Size as coded in the stream, before rotation.
    pub coded_width: u32,
    pub coded_height: u32,
    /// Clockwise rotation (0, 90, 180, 270) a player applies to display the frames.
    pub rotation_deg: i32,
    pub fps: f64,
    pub codec: String,
    pub frame_count: i64,
    /// "container" when the header states it, "packets" when counted by demuxing.
    pub frame_count_source: String,
    pub has_audio: bool,
    pub bit_rate: i64,
}

/// One sampled frame stored as a JPEG under the run directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FrameRef {
    pub frame_index: u32,
    /// The time the sampler asked for.
    pub target_secs: f64,
    /// Presentation time of the decoded frame (first frame at or after the target).
    pub timestamp_secs: f64,
    /// Path relative to the run directory.
    pub path: String,
    pub width: u32,
    pub height: u32,
}

/// One video on its way through the chain. Each stage fills its own slot; nothing is a dynamic map
/// except the carried-through manifest columns, which the user names.
#[derive(Debug, Clone)]
pub struct VideoRecord {
    pub video_id: String,
    pub source: SourceInfo,
    /// Values of the source's extra columns (label, domain, ...), aligned with `Extras::names`.
    pub extra: Vec<Option<String>>,
    pub probe: Option<Probe>,
    pub frames: Option<Vec<FrameRef>>,
}

/// Names of the extra manifest columns carried through every output table.
pub type Extras = Arc<Vec<String>>;
