//! `prescreen` stage: the rubric's criteria that local signals can see, before any paid call.
//!
//! Reads: the `ocr` stage's text regions (text, confidence, position, creator-added verdict) and,
//! when a `shots` stage ran before, the number of shots. Calls: nothing. Caches: nothing (its own
//! table). Writes: one row per video with a verdict per criterion — `fail` (certain), `likely_fail`,
//! `pass`, `unknown` — and the evidence behind it:
//!   1 logo: the same creator-added text in a corner cell of most frames (a watermark or channel
//!     logo);  2 location: a place name from `locations` (or the query file's `location` values) in
//!     on-screen text;  3 time/date: dates and clock times in several languages and scripts;
//!   5 SNS overlays: subscribe/like/follow calls, @handles, #hashtags, platform names;
//!   7 continuity: jump cuts (3 or more shots);  10 subtitles: creator-added text in the bottom
//!     band of many frames whose content keeps changing (transcribed speech).
//! `select = { min_twos = 10 }`: the quality rubric keeps a video only if at least `min_twos` of 12
//! criteria score 2, so a video with more than 12 − min_twos *certain* failures cannot pass and
//! is dropped here; every other video goes on to the quality model. The run summary's `filtered`
//! count of this stage is the number of quality-model calls saved.

use crate::config::queries::QueryFile;
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{Slot, TextRegion, VideoRecord};
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use crate::stages::{Built, compute_settings};
use async_trait::async_trait;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrescreenConfig {
    /// Regions read with less confidence than this are not evidence.
    pub min_text_score: f32,
    /// Text whose centre is below this (0 = top, 1 = bottom) is in the subtitle band.
    pub bottom_band: f32,
    /// Place names that count as location information (case-insensitive, whole words).
    pub locations: Vec<String>,
    /// A query file whose `location` values are added to `locations` (relative to the pipeline).
    pub queries: Option<std::path::PathBuf>,
}

impl Default for PrescreenConfig {
    fn default() -> Self {
        Self {
            min_text_score: 0.8,
            bottom_band: 0.75,
            locations: vec![],
            queries: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrescreenSelect {
    /// The quality stage's min_twos: more than 12 − min_twos certain failures cannot pass.
    pub min_twos: u32,
    /// false: record verdicts only, pass every video on.
    pub reject_certain: bool,
}

impl Default for PrescreenSelect {
    fn default() -> Self {
        Self {
            min_twos: 10,
            reject_certain: true,
        }
    }
}

impl crate::stages::Thresholds for PrescreenSelect {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        crate::stages::ThresholdError::check_range("min_twos", self.min_twos, 0..=12)
    }
}

impl crate::stages::RowThresholds for PrescreenSelect {
    type Row = Prescreen;
    // No verdict: the prescreen only ever drops on certain evidence.
    const KEEP_WITHOUT_ROWS: bool = true;
    fn keep(&self, rows: &[Prescreen]) -> bool {
        !self.reject_certain
            || rows
                .first()
                .is_none_or(|r| r.certain_failures <= 12u32.saturating_sub(self.min_twos))
    }
}

/// The run summary's line: every video dropped here is a quality-model call not paid for.
fn summary(stage_id: &str, c: &crate::runtime::StageCounts) -> String {
    format!(
        "{stage_id}: {} videos dropped on certain local evidence: {} quality-model calls saved",
        c.filtered, c.filtered
    )
}

/// A criterion's verdict.
///
/// Stored as its name in a string column, as when verdicts were strings, so old shards, their
/// readers and the stage's fingerprint stay valid: serde_arrow traces a derived unit enum as a
/// union (or, configured, a dictionary), hence the conversion through a string.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Verdict {
    /// Certain: the quality rubric cannot give this criterion a 2.
    Fail,
    /// Probable, left for the quality model to decide.
    LikelyFail,
    Pass,
    /// No local signal to judge by (no shots stage, no place names configured).
    #[default]
    Unknown,
}

impl Verdict {
    const ALL: [Verdict; 4] = [
        Verdict::Fail,
        Verdict::LikelyFail,
        Verdict::Pass,
        Verdict::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fail => "fail",
            Verdict::LikelyFail => "likely_fail",
            Verdict::Pass => "pass",
            Verdict::Unknown => "unknown",
        }
    }
}

impl From<Verdict> for &'static str {
    fn from(v: Verdict) -> Self {
        v.as_str()
    }
}

/// A stored verdict that is none of the four.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a prescreen verdict (fail, likely_fail, pass, unknown)")]
pub struct UnknownVerdict(pub String);

impl TryFrom<String> for Verdict {
    type Error = UnknownVerdict;
    fn try_from(s: String) -> Result<Self, UnknownVerdict> {
        // serde_arrow traces the row type by deserializing an empty string into each string
        // field, so the empty string must parse; an empty verdict says nothing either way.
        if s.is_empty() {
            return Ok(Verdict::Unknown);
        }
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or(UnknownVerdict(s))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Prescreen {
    pub logo: Verdict,
    pub logo_evidence: String,
    pub location: Verdict,
    pub location_evidence: String,
    pub time_date: Verdict,
    pub time_date_evidence: String,
    pub sns: Verdict,
    pub sns_evidence: String,
    pub jump_cuts: Verdict,
    pub jump_cuts_evidence: String,
    pub subtitles: Verdict,
    pub subtitles_evidence: String,
    /// Criteria certainly failed, and their rubric numbers ("1,3,10").
    pub certain_failures: u32,
    pub failed_criteria: String,
}

static DATE_TIME: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    let months = "jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|diciembre|janvier|février|fevrier|mars|avril|mai|juin|juillet|août|aout|septembre|octobre|novembre|décembre|decembre|januar|februar|märz|maerz|juni|juli|oktober|dezember|janeiro|fevereiro|março|maio|junho|julho|setembro|outubro|novembro|dezembro";
    [
        r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b".to_string(),
        r"\b\d{1,2}[-/.]\d{1,2}[-/.](?:\d{4}|\d{2})\b".to_string(),
        format!(r"(?i)\b(?:{months})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b"),
        format!(r"(?i)\b\d{{1,2}}(?:st|nd|rd|th|er|\.)?\s+(?:de\s+)?(?:{months})\b"),
        r"\d{4}\s*年\s*\d{1,2}\s*月|\d{1,2}\s*月\s*\d{1,2}\s*日".to_string(),
        r"\d{1,2}\s*월\s*\d{1,2}\s*일|\d{4}\s*년".to_string(),
        r"(?i)\b(?:[01]?\d|2[0-3])[:h][0-5]\d(?::[0-5]\d)?\s*(?:am|pm|uhr)?\b".to_string(),
        r"(?i)\b(?:1[0-2]|0?[1-9])\s*(?:am|pm|a\.m\.|p\.m\.)".to_string(),
    ]
    .iter()
    .map(|p| Regex::new(p).expect("valid pattern"))
    .collect()
});

static SNS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:subscribe|like\s*(?:&|and|\+)\s*share|follow\s+(?:us|me|for)|share\s+this|comment\s+below|tiktok|instagram|facebook|twitter|retweet|whatsapp|telegram|youtube)\b|(?:^|\s)@[a-z0-9_.]{3,}|(?:^|\s)#[\p{L}\d_]{2,}|点赞|关注|订阅|转发|좋아요|구독")
        .expect("valid pattern")
});

pub struct PrescreenStage {
    cfg: PrescreenConfig,
    select: PrescreenSelect,
    places: Vec<Regex>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "prescreen",
    about: "local verdicts on the rubric's visible criteria (subtitles, dates, locations, logos, SNS overlays, jump cuts) from OCR and shots: rejects before any paid call when certain",
    build,
    reselect: Some(crate::stages::reselect::<PrescreenSelect>),
    summary: Some(summary),
    release: crate::stages::Release::PerVideo,
    keys: &[
        ("compute", crate::config::keys_of::<PrescreenConfig>),
        ("select", crate::config::keys_of::<PrescreenSelect>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, _): (PrescreenConfig, _) = compute_settings(common, compute_at, bcx)?;
    let select: PrescreenSelect = crate::stages::select_settings(common, select_at, bcx)?;
    let mut names: BTreeSet<String> = cfg.locations.iter().cloned().collect();
    if let Some(q) = &cfg.queries {
        let (qf, _) = QueryFile::load(&bcx.resolve(q))?;
        for g in &qf.groups {
            for r in &g.rows {
                if let Some(toml::Value::String(l)) = r.get("location") {
                    names.insert(l.clone());
                }
            }
            if let Some(ls) = g.cross.get("location") {
                names.extend(ls.iter().filter_map(|v| v.as_str().map(String::from)));
            }
        }
    }
    let places = names
        .iter()
        .filter(|n| !n.trim().is_empty())
        .map(|n| Regex::new(&format!(r"(?i)\b{}\b", regex::escape(n.trim()))).expect("escaped"))
        .collect();
    let compute = serde_json::json!({
        "min_text_score": cfg.min_text_score, "bottom_band": cfg.bottom_band, "locations": names,
    });
    Ok(Built {
        task: crate::stages::processor_task(PrescreenStage {
            cfg,
            select,
            places,
        }),
        compute,
        version: 1,
        default_in_flight: 4,
    })
}

fn norm(t: &str) -> String {
    t.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect()
}

fn quote(t: &str) -> String {
    let t: String = t.chars().take(40).collect();
    format!("{t:?}")
}

/// A criterion's verdict and the evidence behind it.
type Finding = (Verdict, String);

impl PrescreenStage {
    /// The verdicts of one video, from its regions, number of sampled frames and shots.
    pub fn judge(&self, regions: &[TextRegion], frames: usize, shots: Option<u32>) -> Prescreen {
        let good: Vec<&TextRegion> = regions
            .iter()
            .filter(|r| r.score >= self.cfg.min_text_score)
            .collect();
        let frames = frames.max(1);
        let (logo, logo_evidence) = logo(&good, frames);
        let (location, location_evidence) = self.location(&good);
        let (time_date, time_date_evidence) = time_date(&good);
        let (sns, sns_evidence) = sns(&good);
        let (jump_cuts, jump_cuts_evidence) = jump_cuts(shots);
        let (subtitles, subtitles_evidence) = subtitles(&good, frames, self.cfg.bottom_band);
        let verdicts = [
            (1, logo),
            (2, location),
            (3, time_date),
            (5, sns),
            (7, jump_cuts),
            (10, subtitles),
        ];
        let failed: Vec<String> = verdicts
            .iter()
            .filter(|(_, v)| *v == Verdict::Fail)
            .map(|(n, _)| n.to_string())
            .collect();
        Prescreen {
            logo,
            logo_evidence,
            location,
            location_evidence,
            time_date,
            time_date_evidence,
            sns,
            sns_evidence,
            jump_cuts,
            jump_cuts_evidence,
            subtitles,
            subtitles_evidence,
            certain_failures: failed.len() as u32,
            failed_criteria: failed.join(","),
        }
    }

    /// Criterion 2, location: a configured place name in the text.
    fn location(&self, good: &[&TextRegion]) -> Finding {
        let place_hits: Vec<String> = good
            .iter()
            .filter_map(|r| {
                self.places
                    .iter()
                    .find(|p| p.is_match(&r.text))
                    .map(|_| quote(&r.text))
            })
            .collect();
        if !place_hits.is_empty() {
            (
                Verdict::Fail,
                place_hits
                    .into_iter()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        } else if self.places.is_empty() {
            (Verdict::Unknown, "no place names configured".to_string())
        } else {
            (Verdict::Pass, String::new())
        }
    }
}

/// Criterion 1, logo: the same creator-added text in a corner cell of most frames.
fn logo(good: &[&TextRegion], frames: usize) -> Finding {
    let mut corner: BTreeMap<String, (BTreeSet<u32>, String)> = BTreeMap::new();
    for r in good {
        let edge_row = r.center_y < 0.2 || r.center_y > 0.8;
        let edge_col = r.center_x < 0.25 || r.center_x > 0.75;
        if r.creator_added && edge_row && edge_col && norm(&r.text).len() >= 2 {
            let e = corner.entry(norm(&r.text)).or_default();
            e.0.insert(r.frame_index);
            e.1 = r.text.clone();
        }
    }
    match corner.values().max_by_key(|(f, _)| f.len()) {
        Some((f, t)) if f.len() * 10 >= frames * 6 && f.len() >= 3 => (
            Verdict::Fail,
            format!("{} in a corner of {}/{frames} frames", quote(t), f.len()),
        ),
        Some((f, t)) if f.len() >= 2 => (
            Verdict::LikelyFail,
            format!("{} in a corner of {}/{frames} frames", quote(t), f.len()),
        ),
        _ => (Verdict::Pass, String::new()),
    }
}

/// Up to three of the regions' texts, quoted, in sorted order without repeats.
fn examples(rs: &[&TextRegion]) -> String {
    rs.iter()
        .map(|r| quote(&r.text))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(3)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Criterion 3, dates and times: certain when they show on more than one frame.
fn time_date(good: &[&TextRegion]) -> Finding {
    let dated: Vec<&TextRegion> = good
        .iter()
        .filter(|r| DATE_TIME.iter().any(|re| re.is_match(&r.text)))
        .copied()
        .collect();
    let dated_frames: BTreeSet<u32> = dated.iter().map(|r| r.frame_index).collect();
    match dated_frames.len() {
        0 => (Verdict::Pass, String::new()),
        1 => (Verdict::LikelyFail, examples(&dated)),
        n => (Verdict::Fail, format!("{} in {n} frames", examples(&dated))),
    }
}

/// Criterion 5, SNS engagement overlays: certain when the creator added them (scene text could
/// be a poster in the street).
fn sns(good: &[&TextRegion]) -> Finding {
    let social: Vec<&TextRegion> = good
        .iter()
        .filter(|r| SNS.is_match(&r.text))
        .copied()
        .collect();
    if social.iter().any(|r| r.creator_added) {
        (Verdict::Fail, examples(&social))
    } else if !social.is_empty() {
        (Verdict::LikelyFail, examples(&social))
    } else {
        (Verdict::Pass, String::new())
    }
}

/// Criterion 7, continuity: jump cuts, from the number of shots.
fn jump_cuts(shots: Option<u32>) -> Finding {
    match shots {
        None => (Verdict::Unknown, "no shots stage before".to_string()),
        Some(n) if n >= 3 => (Verdict::Fail, format!("{n} shots")),
        Some(2) => (Verdict::LikelyFail, "2 shots".to_string()),
        Some(n) => (Verdict::Pass, format!("{n} shot")),
    }
}

/// Criterion 10, subtitles: creator-added bottom-band text, in many frames, changing content (a
/// caption that stays the same is a title, not speech).
fn subtitles(good: &[&TextRegion], frames: usize, band: f32) -> Finding {
    let in_band: Vec<&TextRegion> = good
        .iter()
        .filter(|r| r.creator_added && r.center_y >= band)
        .copied()
        .collect();
    let sub_frames: BTreeSet<u32> = in_band.iter().map(|r| r.frame_index).collect();
    let sub_texts: BTreeSet<String> = in_band.iter().map(|r| norm(&r.text)).collect();
    let share = sub_frames.len() as f64 / frames as f64;
    let evidence = || {
        format!(
            "bottom-band text in {}/{frames} frames, {} different lines",
            sub_frames.len(),
            sub_texts.len()
        )
    };
    if share >= 0.5 && sub_texts.len() >= 4 {
        (Verdict::Fail, evidence())
    } else if sub_frames.len() >= 2 && sub_texts.len() >= 2 {
        (Verdict::LikelyFail, evidence())
    } else {
        (Verdict::Pass, String::new())
    }
}

#[async_trait]
impl Processor for PrescreenStage {
    type Row = Prescreen;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Ocr]
    }
    fn provides(&self) -> Slot {
        Slot::Prescreen
    }
    fn reads(&self) -> Vec<Slot> {
        vec![Slot::Ocr, Slot::Frames, Slot::Shots]
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        _cx: &StageContext,
    ) -> Result<Vec<Prescreen>, StageError> {
        let regions = rec.ocr.as_deref().unwrap_or_default();
        let frames = rec.frames.as_ref().map_or(0, |f| f.len());
        Ok(vec![self.judge(regions, frames, rec.shots)])
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<Prescreen>) {}

    crate::stages::keep_by_select!();
}

#[cfg(test)]
mod tests;
