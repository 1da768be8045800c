//! The record that travels the chain, the names of the columns every table shares, and the
//! 64-bit key of a video id.

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

/// Longest video id, in bytes: ids name files (frames, media), and 200 leaves room under the
/// usual 255-byte file-name limit for the suffixes added to them.
pub const MAX_VIDEO_ID_BYTES: usize = 200;

/// Why `id` cannot be a video id, or `None` when it can. Ids become parts of file names in the
/// run folder (frames, media), so one that is empty, too long, or holds a `/`, a `\`, a NUL or
/// another control character, or is `.` or `..`, is refused where it enters (every source), and
/// the other videos go on.
pub fn video_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("the video id is empty".into());
    }
    if id.len() > MAX_VIDEO_ID_BYTES {
        return Some(format!(
            "the video id is {} bytes long; at most {MAX_VIDEO_ID_BYTES} can name a file",
            id.len()
        ));
    }
    if id == "." || id == ".." {
        return Some(format!("the video id {id:?} names a folder, not a file"));
    }
    if let Some(c) = id
        .chars()
        .find(|c| matches!(c, '/' | '\\') || c.is_control())
    {
        return Some(format!(
            "the video id {id:?} holds {c:?}, which cannot be part of a file name"
        ));
    }
    None
}

/// 64 bits of BLAKE3 of a video id (its first 8 bytes, little-endian): the rank a video belongs
/// to, and the key resume and the local source's duplicate check keep per video instead of the id
/// (two ids of a billion-video run share a key with probability ~3 %; of a million, ~3e-8).
pub fn id_key(id: &str) -> u64 {
    let h = blake3::hash(id.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default())
}

/// What a stage fills in; the planner checks each stage's `requires()` against the slots filled
/// by the stages before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    Source,
    /// A local media file to decode (the local source, or a download stage).
    Media,
    Probe,
    Frames,
    Ocr,
    Overlays,
    Shots,
    Relevance,
    Prescreen,
    Quality,
    Committee,
    Dedup,
    Transcript,
    Caption,
    Questions,
    Blind,
    LevelCheck,
    Language,
    /// A model's answer under a schema of the pipeline's (`ask` stages).
    Answers,
    /// Benchmark items of a task file (`items` stages; several may run, one per task).
    Items,
}

impl Slot {
    /// Every slot (what a stage reading columns of any earlier stage reads).
    pub const ALL: &'static [Slot] = &[
        Slot::Source,
        Slot::Media,
        Slot::Probe,
        Slot::Frames,
        Slot::Ocr,
        Slot::Overlays,
        Slot::Shots,
        Slot::Relevance,
        Slot::Prescreen,
        Slot::Quality,
        Slot::Committee,
        Slot::Dedup,
        Slot::Transcript,
        Slot::Caption,
        Slot::Questions,
        Slot::Blind,
        Slot::LevelCheck,
        Slot::Language,
        Slot::Answers,
        Slot::Items,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Slot::Source => "source",
            Slot::Media => "media",
            Slot::Probe => "probe",
            Slot::Frames => "frames",
            Slot::Ocr => "ocr",
            Slot::Overlays => "overlays",
            Slot::Shots => "shots",
            Slot::Relevance => "relevance",
            Slot::Prescreen => "prescreen",
            Slot::Quality => "quality",
            Slot::Committee => "committee",
            Slot::Dedup => "dedup",
            Slot::Transcript => "transcript",
            Slot::Caption => "caption",
            Slot::Questions => "questions",
            Slot::Blind => "blind",
            Slot::LevelCheck => "level_check",
            Slot::Language => "language",
            Slot::Answers => "answers",
            Slot::Items => "items",
        }
    }
}

/// Where a video came from, as the source saw it: a local file, or a remote video with the
/// metadata its platform reported (YouTube). One row per video in the `source` table; metadata
/// the source does not have is null.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceInfo {
    /// Local path (absolute) of the media file, when the source listed a file.
    pub path: Option<String>,
    /// Where the media can be fetched (the watch page or a direct URL), for a download stage.
    pub url: Option<String>,
    /// Size in bytes when the source listed a local file.
    pub size_bytes: Option<u64>,
    /// Title as shown to people (HTML entities decoded) and as the API returned it.
    pub title: Option<String>,
    pub title_raw: Option<String>,
    pub description: Option<String>,
    pub description_raw: Option<String>,
    pub channel_id: Option<String>,
    pub channel_title: Option<String>,
    /// Upload time, RFC 3339 in UTC.
    pub published_at: Option<String>,
    pub duration_secs: Option<f64>,
    /// The duration as the API wrote it (ISO 8601), kept when it could not be parsed too.
    pub duration_iso: Option<String>,
    pub view_count: Option<i64>,
    pub like_count: Option<i64>,
    pub comment_count: Option<i64>,
    pub tags: Option<Vec<String>>,
    pub category_id: Option<String>,
    pub default_language: Option<String>,
    pub default_audio_language: Option<String>,
    pub live_broadcast_content: Option<String>,
    pub definition: Option<String>,
    pub caption: Option<bool>,
    pub privacy_status: Option<String>,
    pub license: Option<String>,
    pub embeddable: Option<bool>,
    pub made_for_kids: Option<bool>,
    /// Every search that found the video (empty for local files).
    pub provenance: Vec<Provenance>,
}

/// One (query, parameters, page, rank) that returned a video.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Provenance {
    /// The query text as sent (`q`).
    pub query: String,
    /// The query file's group that produced it.
    pub group: String,
    /// The other search parameters as JSON (sorted keys), the date window included.
    pub params: String,
    /// 1-based page of the window's result list.
    pub page: u32,
    /// 1-based position in the window's result list across pages.
    pub rank: u32,
}

/// The media file stages decode. `path` is absolute, or relative to the run directory for files a
/// download stage stored there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MediaFile {
    pub path: String,
    pub size_bytes: u64,
    /// BLAKE3 of the bytes (64 hex digits), when a source listed the file: what the stages that
    /// read the media read, wherever the file lies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// The source read the file in this invocation to know it (new, copied, moved or touched).
    #[serde(skip)]
    pub hashed: bool,
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

/// One multiple-choice item drafted for a video (a question stage's row): the options in the
/// order shown, with the permutation that put them there, and why it was rejected if it was.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QuestionItem {
    /// Stable for the video, level and place: seeds the shuffle, keys reviews.
    pub item_id: String,
    pub level: String,
    /// Its place among the video's items of its level (0-based).
    pub k: u32,
    pub question: String,
    /// Shown order.
    pub options: Vec<String>,
    /// The correct option's letter in the shown order ("" when rejected unreadable).
    pub answer: String,
    /// `permutation[i]`: the drafted index of the option shown at position i.
    pub permutation: Vec<u32>,
    /// Frames of the ones shown to the model (0-based, in the order sent).
    pub evidence_frames: Vec<u32>,
    pub evidence_start_secs: Option<f64>,
    pub evidence_end_secs: Option<f64>,
    pub evidence_transcript: String,
    pub rationale: String,
    /// The missing context a beyond-clip item rests on.
    pub context_note: String,
    pub kept: bool,
    /// The most similar earlier kept item of the video (empty for the first, or a rejected
    /// item) and how similar, 0 to 1 (`items::similarity`: character trigrams).
    pub nearest_item: String,
    pub nearest_similarity: f64,
    /// At the pipeline's `select.duplicate_at` (rethreshold re-decides from the similarity).
    pub near_duplicate: bool,
    /// Why the item was rejected after its repair (empty when kept).
    pub reject_reason: String,
    /// The rules it broke, as stable codes (`option_count`, `same_options`, …; see
    /// `items::check`): what reports group rejections by.
    pub reject_codes: Vec<String>,
    pub attempts: u32,
    pub provider: String,
    pub model: String,
}

/// One benchmark item of a task file (an `items` stage's rows): what it asks, its typed
/// reference in the columns of its format, and where the reference came from.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct BenchItem {
    /// `<video>:<task>:<k>`.
    pub item_id: String,
    pub task: String,
    pub format: String,
    pub k: u32,
    /// The task's question with the item's target text in place.
    pub question: String,
    /// The creator-added text the item asks about (derived text tasks).
    pub target_text: String,
    /// The key frame shown with the item (0-based among the sampled frames) and its time.
    pub key_frame: Option<u32>,
    pub key_time_secs: Option<f64>,
    /// Options in shown order (choice formats).
    pub options: Vec<String>,
    /// The reference, in the columns of its format (the others empty): the label shown for a
    /// choice ("C"; "A,C"; "7" past 26 options), the chosen indices, a count, time ranges as
    /// parallel start and end lists, a text (open text; a tagged answer's reasoning), a label
    /// (tagged reasoning), and reference lists as parallel field names and items.
    pub answer: String,
    pub answer_choices: Vec<u32>,
    pub answer_count: Option<u32>,
    pub answer_starts: Vec<f64>,
    pub answer_ends: Vec<f64>,
    pub answer_text: String,
    pub answer_label: String,
    pub reference_fields: Vec<String>,
    pub reference_items: Vec<Vec<String>>,
    pub rationale: String,
    /// People must confirm the reference before it is one (SAC's shot count).
    pub for_review: bool,
    pub kept: bool,
    pub reject_reason: String,
    pub reject_codes: Vec<String>,
    /// `derived` or `drafted`.
    pub origin: String,
    /// Derived: `stage.column` of every column read. Drafted: empty.
    pub from_columns: Vec<String>,
    /// The task file's fingerprint (its text and its prompts').
    pub task_fingerprint: String,
    /// Every round of a drafted item, in order: who wrote it (`draft` by model A, `refine` by
    /// model B), with which model, the text, and the judge's scores (null before a judgment)
    /// and reasons.
    pub round_roles: Vec<String>,
    pub round_models: Vec<String>,
    pub round_texts: Vec<String>,
    pub round_factual: Vec<Option<u8>>,
    pub round_logical: Vec<Option<u8>>,
    pub round_factual_reasons: Vec<String>,
    pub round_logical_reasons: Vec<String>,
    /// The round whose text is the item (kept items), and the judge's model.
    pub final_round: Option<u32>,
    pub judge_model: String,
}

/// One shot of a video (the `shots` stage's rows).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Shot {
    pub shot_index: u32,
    pub start_secs: f64,
    pub end_secs: f64,
    /// In frames of the video's own rate (video2dataset's unit).
    pub start_frame: i64,
    pub end_frame: i64,
    /// Shots in the whole video (repeated on each row, for easy grouping).
    pub shots_in_video: u32,
}

/// One text region found on one sampled frame, with its colour and layout (the `ocr` stage).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TextRegion {
    pub frame_index: u32,
    pub timestamp_secs: f64,
    pub text: String,
    pub score: f32,
    /// Corners tl, tr, br, bl as x0, y0, x1, y1, x2, y2, x3, y3 in frame pixels.
    pub quad: Vec<f32>,
    pub frame_width: u32,
    pub frame_height: u32,
    // Layout, normalised by the frame size.
    pub center_x: f32,
    pub center_y: f32,
    pub width: f32,
    pub height: f32,
    /// Box area / frame area.
    pub area_frac: f32,
    /// Long side / short side of the box (MVFNDB: fake mostly < 15, real > 15).
    pub aspect_ratio: f32,
    pub grid_row: u32,
    pub grid_col: u32,
    /// e.g. "bottom center-left".
    pub grid_cell: String,
    pub text_len: u32,
    // Colour of the text strokes and of the background (HSV: h in degrees, s and v in 0..1).
    pub text_h: f32,
    pub text_s: f32,
    pub text_v: f32,
    pub text_color: String,
    pub bg_h: f32,
    pub bg_s: f32,
    pub bg_v: f32,
    pub bg_color: String,
    pub stroke_pixels: u32,
    /// 72 bins of 5° over stroke pixels with s and v ≥ 0.15.
    pub hue_hist: Vec<u32>,
    /// 20 bins over [0, 1] of all stroke pixels.
    pub sat_hist: Vec<u32>,
    pub val_hist: Vec<u32>,
    // Creator-added (editor overlay) vs scene text.
    pub creator_added: bool,
    pub creator_score: f32,
    pub creator_evidence: String,
}

/// One video on its way through the chain. Each stage fills its own slot; nothing is a dynamic map
/// except the carried-through manifest columns, which the user names.
#[derive(Debug, Clone, Default)]
pub struct VideoRecord {
    pub video_id: String,
    pub source: SourceInfo,
    /// Values of the source's extra columns (label, domain, ...), aligned with `Extras::names`.
    pub extra: Vec<Option<String>>,
    pub media: Option<MediaFile>,
    pub probe: Option<Probe>,
    pub frames: Option<Vec<FrameRef>>,
    pub ocr: Option<Vec<TextRegion>>,
    /// Shots in the whole video (the `shots` stage).
    pub shots: Option<u32>,
    /// Relevance score 1–10 (the `relevance` stage).
    pub relevance: Option<u8>,
    /// What is said in the video, its segments joined (the `transcript` stage; empty when the
    /// video has no audio or no speech), for stages that judge frames and speech together.
    pub transcript: Option<String>,
    /// A model's caption of the video (the `caption` stage), for the stages that draft
    /// questions from it.
    pub caption: Option<String>,
    /// Drafted multiple-choice items, kept and rejected (a question stage), for the stages
    /// that check them.
    pub questions: Option<Vec<QuestionItem>>,
    /// Benchmark items of the task stages so far (every task's, in stage order).
    pub items: Option<Vec<BenchItem>>,
    /// What the record's slots were computed from, as digests (see `Lineage`).
    pub lineage: Lineage,
}

/// Digests of what a record's slots hold, so a rerun tells a stored row whose inputs changed from
/// one it may reuse. A slot's digest is of its lineage, not of its rows: the source's digests are
/// of what it read (the row, the media file's bytes), and a stage's slot
/// digest is of the stage and its input digest, so a frame rewritten under the same path still
/// changes what OCR read.
#[derive(Debug, Clone, Default)]
pub struct Lineage {
    pub slots: Vec<(Slot, u64)>,
    /// The extra columns' values: carried in every table, so a change rewrites stored rows.
    pub extras: u64,
    /// What the stage settling this record now read (set by the runtime; stored with its rows).
    pub stamp: Option<Stamp>,
}

impl Lineage {
    pub fn slot(&self, slot: Slot) -> Option<u64> {
        self.slots.iter().find(|(s, _)| *s == slot).map(|(_, d)| *d)
    }

    pub fn set(&mut self, slot: Slot, digest: u64) {
        match self.slots.iter_mut().find(|(s, _)| *s == slot) {
            Some(e) => e.1 = digest,
            None => self.slots.push((slot, digest)),
        }
    }
}

/// What one stage read for one video, as its shard's footer records it: the digest of the slots
/// it reads (`input`) and of the extra columns written beside its rows (`extras`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub input: u64,
    pub extras: u64,
}

impl Stamp {
    pub fn to_hex(self) -> String {
        format!("{:016x}{:016x}", self.input, self.extras)
    }

    pub fn from_hex(s: &str) -> Option<Self> {
        if s.len() != 32 {
            return None;
        }
        Some(Self {
            input: u64::from_str_radix(&s[..16], 16).ok()?,
            extras: u64::from_str_radix(&s[16..], 16).ok()?,
        })
    }
}

/// 64 bits of BLAKE3 over `parts`, each length-prefixed (so no two lists hash alike).
pub fn digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().unwrap_or_default())
}

/// What a reviewer of a drafted item saw: its level, question, options and answer, as a digest
/// (16 hex). A review applies to the draft it was made of; an item drafted again under the same
/// id (ids come from video, level and place) waits for a new review.
pub fn draft_digest(level: &str, question: &str, options: &[String], answer: &str) -> String {
    let mut parts: Vec<&[u8]> = vec![level.as_bytes(), question.as_bytes(), answer.as_bytes()];
    parts.extend(options.iter().map(|o| o.as_bytes()));
    format!("{:016x}", digest(parts))
}

impl QuestionItem {
    /// `draft_digest` of this item.
    pub fn draft(&self) -> String {
        draft_digest(&self.level, &self.question, &self.options, &self.answer)
    }
}

impl VideoRecord {
    /// A record with only the source's part filled.
    pub fn new(video_id: String, source: SourceInfo, extra: Vec<Option<String>>) -> Self {
        Self {
            video_id,
            source,
            extra,
            ..Default::default()
        }
    }

    /// The media file to decode, resolved against the run directory.
    pub fn media_path(
        &self,
        run_dir: &std::path::Path,
    ) -> Result<std::path::PathBuf, crate::error::StageError> {
        match &self.media {
            Some(m) => Ok(run_dir.join(&m.path)),
            None => Err(crate::error::StageError::internal(
                "no_media",
                "no media file: the planner should have required a media stage",
            )),
        }
    }
}

/// Names of the extra manifest columns carried through every output table.
pub type Extras = Arc<Vec<String>>;

#[cfg(test)]
mod tests {
    use super::video_id_problem;

    #[test]
    fn ids_that_cannot_name_a_file_are_refused_with_the_reason() {
        for ok in ["dQw4w9WgXcQ", "b..1", "..x", "x..", "7f3a_9c-2", "视频01"] {
            assert_eq!(video_id_problem(ok), None, "{ok}");
        }
        let why = |id: &str| video_id_problem(id).unwrap_or_default();
        assert!(why("../../x").contains("'/'"), "{}", why("../../x"));
        assert!(why("/etc").contains("'/'"));
        assert!(why("a\\b").contains("'\\\\'"), "{}", why("a\\b"));
        assert!(why("..").contains("folder"));
        assert!(why(".").contains("folder"));
        assert!(why("tab\there").contains("'\\t'"), "{}", why("tab\there"));
        assert!(why("nul\0").contains("'\\0'"), "{}", why("nul\0"));
        assert!(why("").contains("empty"));
        assert!(why(&"x".repeat(201)).contains("201 bytes"));
        assert_eq!(video_id_problem(&"x".repeat(200)), None);
    }
}
