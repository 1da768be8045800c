//! `quality` stage: the 12-criterion visual quality rubric (RiskCue §3.2, A.2 table 7, A.4).
//!
//! Reads: the video's sampled frames (up to `max_images`, evenly spread). Calls: a vision model
//! service with the A.4 prompt verbatim and the frames as JPEG images, JSON mode where the API
//! has it. Caches: every answer, in the run's response cache (key includes each frame's hash).
//! Writes: one row per video with the 12 scores as columns, the number of 2s and the raw answer.
//! Validation is strict: exactly 12 objects, category numbers 1–12 once each, names matching the
//! rubric, scores in {0, 1, 2}; code fences and prose around the array are tolerated. An invalid
//! answer gets one repair request naming the problem, then the video is rejected with it.
//! `select = { min_twos = 10 }`: keep a video when at least 10 of 12 criteria score 2.

use super::model_inputs::{
    CRITERIA, QUALITY_PROMPT, ask_validated, frame_inputs, span, stage_service,
};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use crate::stages::model_call::Call;
use crate::stages::{Built, compute_settings, yes};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityConfig {
    /// A `[services.<name>]` entry (a vision model; the paper: Gemini 2.5 Flash Lite).
    pub service: String,
    pub model: String,
    /// Frames sent per video (evenly spread over the sampled ones).
    #[serde(default = "default_images")]
    pub max_images: usize,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub temperature: f32,
    /// Ask for JSON output (OpenAI `response_format`, Gemini `responseMimeType`).
    #[serde(default = "yes")]
    pub json_mode: bool,
}

fn default_images() -> usize {
    8
}
fn default_max_tokens() -> u32 {
    1024
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QualitySelect {
    /// Keep when at least this many of the 12 criteria score 2 (the paper: 10).
    pub min_twos: u32,
}

impl Default for QualitySelect {
    fn default() -> Self {
        Self { min_twos: 10 }
    }
}

impl crate::stages::Thresholds for QualitySelect {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        crate::stages::ThresholdError::check_range("min_twos", self.min_twos, 0..=12)
    }
}

impl crate::stages::RowThresholds for QualitySelect {
    type Row = Quality;
    fn keep(&self, rows: &[Quality]) -> bool {
        rows.first().is_some_and(|r| r.twos >= self.min_twos)
    }
}

/// The 12 scores in rubric order, as columns.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Quality {
    pub q01_logo: u8,
    pub q02_location: u8,
    pub q03_time_date: u8,
    pub q04_reporter: u8,
    pub q05_sns_overlays: u8,
    pub q06_natural_image: u8,
    pub q07_temporal_continuity: u8,
    pub q08_consequence_text: u8,
    pub q09_banner_text: u8,
    pub q10_subtitles: u8,
    pub q11_camera_perspective: u8,
    pub q12_post_production: u8,
    /// Criteria scoring 2.
    pub twos: u32,
    pub images: u32,
    pub raw: String,
    pub provider: String,
    pub model: String,
    pub attempts: u32,
}

impl Quality {
    fn from_scores(s: [u8; 12]) -> Self {
        Self {
            q01_logo: s[0],
            q02_location: s[1],
            q03_time_date: s[2],
            q04_reporter: s[3],
            q05_sns_overlays: s[4],
            q06_natural_image: s[5],
            q07_temporal_continuity: s[6],
            q08_consequence_text: s[7],
            q09_banner_text: s[8],
            q10_subtitles: s[9],
            q11_camera_perspective: s[10],
            q12_post_production: s[11],
            twos: s.iter().filter(|x| **x == 2).count() as u32,
            ..Default::default()
        }
    }
}

/// What is wrong with a rubric answer: the message goes back to the model in the repair request,
/// so it says exactly which object or category is off.
#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    #[error("no JSON array in the answer")]
    NoArray,
    #[error("not a JSON array: {0}")]
    NotArray(serde_json::Error),
    #[error("{0} objects, expected exactly 12")]
    Count(usize),
    /// `object` counts from 1, as the model sees the list.
    #[error("object {object}: category_number is not an integer")]
    NumberNotInteger { object: usize },
    #[error("object {object}: category_number {number} is not 1-12")]
    NumberOutOfRange { object: usize, number: u64 },
    #[error("category_number {0} appears twice")]
    Twice(u64),
    #[error("category {0}: category_name missing")]
    NameMissing(u64),
    #[error("category {number} is named {name:?}, expected {expected:?}")]
    Renamed {
        number: u64,
        name: String,
        expected: &'static str,
    },
    #[error("category {number}: score {score} is not 0, 1 or 2")]
    BadScore {
        number: u64,
        score: serde_json::Value,
    },
    #[error("category_number {0} missing")]
    Missing(usize),
}

/// The scores in rubric order, or what is wrong with the answer.
pub fn parse_rubric(text: &str) -> Result<[u8; 12], RubricError> {
    let arr = span(text, '[', ']').ok_or(RubricError::NoArray)?;
    let v: Vec<serde_json::Value> = serde_json::from_str(arr).map_err(RubricError::NotArray)?;
    if v.len() != 12 {
        return Err(RubricError::Count(v.len()));
    }
    let norm = |s: &str| {
        s.to_ascii_lowercase()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    let mut scores = [None::<u8>; 12];
    for (i, o) in v.iter().enumerate() {
        let n = o["category_number"]
            .as_u64()
            .ok_or(RubricError::NumberNotInteger { object: i + 1 })?;
        if !(1..=12).contains(&n) {
            return Err(RubricError::NumberOutOfRange {
                object: i + 1,
                number: n,
            });
        }
        let idx = n as usize - 1;
        if scores[idx].is_some() {
            return Err(RubricError::Twice(n));
        }
        let name = o["category_name"]
            .as_str()
            .ok_or(RubricError::NameMissing(n))?;
        if norm(name) != norm(CRITERIA[idx]) {
            return Err(RubricError::Renamed {
                number: n,
                name: name.to_string(),
                expected: CRITERIA[idx],
            });
        }
        let s = o["score"]
            .as_u64()
            .filter(|s| *s <= 2)
            .ok_or_else(|| RubricError::BadScore {
                number: n,
                score: o["score"].clone(),
            })?;
        scores[idx] = Some(s as u8);
    }
    let mut out = [0u8; 12];
    for (i, s) in scores.iter().enumerate() {
        out[i] = s.ok_or(RubricError::Missing(i + 1))?;
    }
    Ok(out)
}

pub struct QualityStage {
    cfg: QualityConfig,
    select: QualitySelect,
    /// The rubric prompt over the frames; no schema (the rubric is checked by `parse_rubric`).
    call: Call,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "quality",
    about: "the 12-criterion visual rubric (RiskCue A.4 prompt) by a vision model over the sampled frames; keep >= 10 of 12 scoring 2",
    build,
    reselect: Some(crate::stages::reselect::<QualitySelect>),
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[
        ("compute", crate::config::keys_of::<QualityConfig>),
        ("select", crate::config::keys_of::<QualitySelect>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, mut compute): (QualityConfig, _) = compute_settings(common, compute_at, bcx)?;
    // The rubric prompt's full text is hashed: a new text redoes the stage.
    compute["prompt_blake3"] = super::model_inputs::text_hash(QUALITY_PROMPT).into();
    let select: QualitySelect = crate::stages::select_settings(common, select_at, bcx)?;
    super::model_inputs::images_at_least_one(cfg.max_images, compute_at, bcx)?;
    let svc = stage_service(bcx, common, compute_at, &cfg.service)?;
    Ok(Built {
        task: crate::stages::processor_task(QualityStage {
            call: Call {
                svc,
                model: cfg.model.clone(),
                prompt: QUALITY_PROMPT.to_string(),
                schema: None,
                max_images: cfg.max_images,
                max_transcript_chars: 0,
                max_tokens: cfg.max_tokens,
                temperature: cfg.temperature,
            },
            cfg,
            select,
        }),
        compute,
        version: 1,
        default_in_flight: 16,
    })
}

#[async_trait]
impl Processor for QualityStage {
    type Row = Quality;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Quality
    }
    fn reads(&self) -> Vec<Slot> {
        super::model_call::CALL_READS.to_vec()
    }

    fn estimate(&self) -> crate::runtime::stage::StageEstimate {
        self.call.estimate(0, 1)
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<Quality>, StageError> {
        let images = frame_inputs(rec, cx, self.cfg.max_images, "the model").await?;
        let mut req = self.call.request(self.call.prompt.clone(), images.clone());
        // JSON mode without a schema: the rubric's array is checked here.
        req.json = self.cfg.json_mode;
        let a = ask_validated(&self.call.svc, req, cx, "invalid_rubric", parse_rubric, |problem| {
            format!("Your previous answer was invalid: {problem}. Reply with only the JSON array of exactly 12 objects (category_number, category_name, score).")
        })
        .await?;
        let mut q = Quality::from_scores(a.value);
        q.images = images.len() as u32;
        q.raw = a.raw;
        q.provider = self.call.svc.name.clone();
        q.model = self.call.model.clone();
        q.attempts = a.attempts;
        Ok(vec![q])
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<Quality>) {}

    crate::stages::keep_by_select!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(scores: &[u8]) -> String {
        let objs: Vec<String> = scores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    r#"{{"category_number": {}, "category_name": "{}", "score": {s}}}"#,
                    i + 1,
                    CRITERIA[i]
                )
            })
            .collect();
        format!("[{}]", objs.join(", "))
    }

    #[test]
    fn strict_rubric_parsing() {
        let ok = answer(&[2, 2, 2, 1, 2, 2, 2, 2, 0, 2, 2, 2]);
        assert_eq!(parse_rubric(&ok).unwrap()[3], 1);
        let fenced = format!("Here is my analysis:\n```json\n{ok}\n```\nDone.");
        assert!(parse_rubric(&fenced).is_ok());
        let problem = |t: &str| parse_rubric(t).unwrap_err().to_string();
        assert!(problem(&answer(&[2; 11])).contains("11 objects"));
        let bad_score = ok.replacen("\"score\": 1", "\"score\": 3", 1);
        assert!(problem(&bad_score).contains("not 0, 1 or 2"));
        let renamed = ok.replace("Logo Assessment", "Branding");
        assert!(problem(&renamed).contains("expected \"Logo Assessment\""));
        let twice = ok.replace("\"category_number\": 2,", "\"category_number\": 1,");
        assert!(parse_rubric(&twice).is_err());
        assert!(parse_rubric("{\"").is_err());
    }
}
