//! `committee` stage: hard-example mining with a committee of vision models (RiskCue §3.2, A.4).
//!
//! Reads: the sampled frames. Calls: every member (a service and a model; the paper used five)
//! with one visual-only risk question and the frames. Caches: every answer. Writes: one row per
//! (video, member): the vote (yes / no, null when the answer was neither), the raw answer, and
//! the video's vote counts. Selection (`select`, re-appliable with `vidcurate rethreshold`):
//!   - `rule = "majority_share"` (default): hard when the largest camp holds at most
//!     `max_majority_share` of the valid votes (default 0.6: a 3–2 split of five);
//!   - `rule = "entropy"`: hard when the vote entropy is at least `min_entropy` bits;
//!   - `rule = "disagree_with_label"`: hard when at least `min_disagree` members contradict the
//!     reference label in the column `label_column` (values yes/no, true/false, 1/0, risk/no_risk).
//!
//! The paper calls a video hard "if more than three out of five models disagree with each other";
//! with binary answers that cannot happen literally, so the default reads it as the most
//! disagreement five binary votes can show. `keep = "hard"` passes only hard videos on; "all"
//! passes every video (the votes are stored either way).

use super::model_call::Call;
use super::model_inputs::frame_inputs;
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use crate::stages::{Built, compute_settings};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The standardized visual-only question (the event fills `[risk event]`).
pub const COMMITTEE_PROMPT: &str = "These are frames sampled in order from one video. Looking only at what is visible in the frames (ignore any text, captions or logos), is [risk event] happening or about to happen? Answer with a single word: yes or no.";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// A `[services.<name>]` entry.
    pub service: String,
    pub model: String,
    /// Column value naming the member (default: the model).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitteeConfig {
    /// The committee (the paper: five VLMs).
    pub members: Vec<Member>,
    /// Fills `[risk event]`: the `[event]` name of this query file (relative to the pipeline
    /// file), as the relevance stage reads it...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<std::path::PathBuf>,
    /// ... or inline (both: they must name the same event).
    #[serde(default)]
    pub event: String,
    /// The question; `[risk event]` is replaced by the event. Default: the standardized
    /// visual-only question above. Part of the fingerprint (as a hash).
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default = "default_images")]
    pub max_images: usize,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
}

fn default_images() -> usize {
    8
}
fn default_max_tokens() -> u32 {
    8
}

/// What makes a video hard.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HardRule {
    /// The larger side's share of the votes is at most `max_majority_share` (3–2 of five).
    MajorityShare,
    /// The vote entropy is at least `min_entropy` bits.
    Entropy,
    /// At least `min_disagree` members vote against the reference label in `label_column`.
    DisagreeWithLabel,
}

/// Which videos the committee passes on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassOn {
    /// Only hard videos.
    Hard,
    /// Every video (the votes are recorded).
    All,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CommitteeSelect {
    pub rule: HardRule,
    pub max_majority_share: f64,
    pub min_entropy: f64,
    pub label_column: String,
    pub min_disagree: u32,
    pub keep: PassOn,
}

impl Default for CommitteeSelect {
    fn default() -> Self {
        Self {
            rule: HardRule::MajorityShare,
            max_majority_share: 0.6,
            min_entropy: 0.9,
            label_column: "label".into(),
            min_disagree: 3,
            keep: PassOn::Hard,
        }
    }
}

impl crate::stages::Thresholds for CommitteeSelect {
    fn check(&self) -> Result<(), crate::stages::ThresholdError> {
        use crate::stages::ThresholdError;
        ThresholdError::check_range("max_majority_share", self.max_majority_share, 0.0..=1.0)?;
        // Bits of a yes/no vote: at most 1.
        ThresholdError::check_range("min_entropy", self.min_entropy, 0.0..=1.0)
    }
}

/// `vidcurate rethreshold`: the votes are kept; `disagree_with_label` reads the label column.
fn reselect(
    select: &toml::Table,
    view: &crate::store::shards::TableView,
) -> Result<crate::stages::Reselected, crate::stages::ThresholdError> {
    let s: CommitteeSelect = crate::stages::thresholds(select)?;
    let labels = if s.rule == HardRule::DisagreeWithLabel {
        view.column(&s.label_column)
            .map_err(|e| crate::stages::ThresholdError::new("label_column", e.to_string()))?
    } else {
        Default::default()
    };
    crate::stages::reselect_rows(
        select,
        view,
        move |s: &CommitteeSelect, id: &str, rows: Option<&Vec<Vote>>| {
            rows.is_some_and(|rows| {
                let votes: Vec<Option<bool>> = rows.iter().map(|v| v.vote).collect();
                s.keep(&votes, labels.get(id).map(String::as_str))
            })
        },
    )
}

/// Reference label text → risk yes/no.
pub fn label_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" | "risk" | "y" => Some(true),
        "no" | "false" | "0" | "no_risk" | "no-risk" | "n" => Some(false),
        _ => None,
    }
}

impl CommitteeSelect {
    /// Is the video hard, from its votes and (for `disagree_with_label`) its reference label?
    pub fn hard(&self, votes: &[Option<bool>], label: Option<&str>) -> bool {
        let yes = votes.iter().filter(|v| **v == Some(true)).count() as f64;
        let no = votes.iter().filter(|v| **v == Some(false)).count() as f64;
        let n = yes + no;
        if n == 0.0 {
            return false;
        }
        match self.rule {
            HardRule::Entropy => {
                let h = |p: f64| if p > 0.0 { -p * p.log2() } else { 0.0 };
                h(yes / n) + h(no / n) >= self.min_entropy
            }
            HardRule::DisagreeWithLabel => match label.and_then(label_bool) {
                Some(l) => {
                    let against = if l { no } else { yes };
                    against as u32 >= self.min_disagree
                }
                None => false,
            },
            HardRule::MajorityShare => yes.max(no) / n <= self.max_majority_share,
        }
    }

    pub fn keep(&self, votes: &[Option<bool>], label: Option<&str>) -> bool {
        self.keep == PassOn::All || self.hard(votes, label)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Vote {
    pub member: String,
    pub provider: String,
    pub model: String,
    /// true = risk, false = no risk, null = the answer was neither.
    pub vote: Option<bool>,
    pub raw: String,
    pub yes_votes: u32,
    pub no_votes: u32,
}

/// "yes"/"no" as the first word, case and punctuation ignored.
pub fn parse_vote(text: &str) -> Option<bool> {
    let w: String = text
        .trim()
        .chars()
        .take_while(|c| c.is_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    match w.as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

pub struct CommitteeStage {
    cfg: CommitteeConfig,
    select: CommitteeSelect,
    /// One per member, in order: the question over the frames, no schema.
    calls: Vec<Call>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "committee",
    about: "N vision models answer one visual-only risk question; every vote stored; hardness rule configurable",
    build,
    reselect: Some(reselect),
    summary: None,
    release: crate::stages::Release::Columns(&["yes_votes", "no_votes"]),
    keys: &[
        ("compute", crate::config::keys_of::<CommitteeConfig>),
        ("compute.members", crate::config::keys_of::<Member>),
        ("select", crate::config::keys_of::<CommitteeSelect>),
    ],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (mut cfg, mut compute): (CommitteeConfig, _) = compute_settings(common, compute_at, bcx)?;
    let inline = Some(cfg.event.as_str()).filter(|e| !e.is_empty());
    let (event, _) =
        super::model_inputs::risk_event(inline, cfg.queries.as_deref(), compute_at, bcx)?;
    // What decides the votes is the event, not where it was written: a pipeline that moves it
    // into the query file keeps its fingerprint.
    cfg.event = event;
    compute["event"] = cfg.event.clone().into();
    if let Some(c) = compute.as_object_mut() {
        c.remove("queries");
    }
    let prompt = cfg.prompt.as_deref().unwrap_or(COMMITTEE_PROMPT);
    compute["prompt"] = serde_json::Value::Null;
    compute["prompt_blake3"] = super::model_inputs::text_hash(prompt).into();
    let select: CommitteeSelect = crate::stages::select_settings(common, select_at, bcx)?;
    if cfg.members.is_empty() {
        return Err(bcx.src.error_at(compute_at, "a committee needs members"));
    }
    super::model_inputs::images_at_least_one(cfg.max_images, compute_at, bcx)?;
    let mut calls = vec![];
    for (i, m) in cfg.members.iter().enumerate() {
        let mut at = crate::config::key_at(compute_at, "members");
        at.push(Seg::Index(i));
        at.push(Seg::Key("service".into()));
        calls.push(Call {
            svc: bcx.llm_service(&m.service, &at, common)?,
            model: m.model.clone(),
            prompt: prompt.to_string(),
            schema: None,
            max_images: cfg.max_images,
            max_transcript_chars: 0,
            max_tokens: cfg.max_tokens,
            temperature: 0.0,
        });
    }
    Ok(Built {
        task: crate::stages::processor_task(CommitteeStage { cfg, select, calls }),
        compute,
        version: 1,
        default_in_flight: 8,
    })
}

#[async_trait]
impl Processor for CommitteeStage {
    type Row = Vote;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Frames]
    }
    fn provides(&self) -> Slot {
        Slot::Committee
    }
    fn reads(&self) -> Vec<Slot> {
        super::model_call::CALL_READS.to_vec()
    }

    fn estimate(&self) -> crate::runtime::stage::StageEstimate {
        crate::runtime::stage::StageEstimate {
            calls: self
                .calls
                .iter()
                .map(|c| c.call_estimate(self.cfg.event.len()))
                .collect(),
            frames: None,
        }
    }

    async fn process(&self, rec: &VideoRecord, cx: &StageContext) -> Result<Vec<Vote>, StageError> {
        let images = frame_inputs(rec, cx, self.cfg.max_images, "the committee").await?;
        let asks = self.calls.iter().map(|c| {
            let req = c.request(
                c.prompt.replace("[risk event]", &self.cfg.event),
                images.clone(),
            );
            async move { c.svc.chat(&req, &cx.cache.get()?, &cx.stage_id).await }
        });
        let answers = futures::future::join_all(asks).await;
        let mut votes = vec![];
        for ((m, c), a) in self.cfg.members.iter().zip(&self.calls).zip(answers) {
            let a = a?;
            let raw = a
                .text
                .clone()
                .or(a.refusal.clone().map(|r| format!("[{}] {r}", a.finish)))
                .unwrap_or_default();
            votes.push(Vote {
                member: m.name.clone().unwrap_or_else(|| m.model.clone()),
                provider: c.svc.name.clone(),
                model: m.model.clone(),
                vote: a.text.as_deref().and_then(parse_vote),
                raw,
                yes_votes: 0,
                no_votes: 0,
            });
        }
        let yes = votes.iter().filter(|v| v.vote == Some(true)).count() as u32;
        let no = votes.iter().filter(|v| v.vote == Some(false)).count() as u32;
        for v in &mut votes {
            v.yes_votes = yes;
            v.no_votes = no;
        }
        Ok(votes)
    }

    fn attach(_rec: &mut VideoRecord, _rows: Vec<Vote>) {}

    fn keep(&self, rec: &VideoRecord, extras: &[String], rows: &[Vote]) -> bool {
        let votes: Vec<Option<bool>> = rows.iter().map(|r| r.vote).collect();
        let label = super::model_inputs::extra_column(rec, extras, &self.select.label_column);
        self.select.keep(&votes, label.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardness_rules() {
        let s = CommitteeSelect::default();
        let v = |y: usize, n: usize| {
            let mut out = vec![Some(true); y];
            out.extend(vec![Some(false); n]);
            out
        };
        assert!(s.hard(&v(3, 2), None));
        assert!(!s.hard(&v(4, 1), None));
        assert!(!s.hard(&v(5, 0), None));
        let e = CommitteeSelect {
            rule: HardRule::Entropy,
            min_entropy: 0.9,
            ..Default::default()
        };
        assert!(e.hard(&v(3, 2), None)); // 0.971 bits
        assert!(!e.hard(&v(4, 1), None)); // 0.722 bits
        let d = CommitteeSelect {
            rule: HardRule::DisagreeWithLabel,
            min_disagree: 3,
            ..Default::default()
        };
        assert!(d.hard(&v(1, 4), Some("yes")));
        assert!(!d.hard(&v(3, 2), Some("yes")));
        assert!(!d.hard(&v(1, 4), None));
        assert_eq!(parse_vote("Yes."), Some(true));
        assert_eq!(parse_vote(" no\n"), Some(false));
        assert_eq!(parse_vote("Maybe"), None);
    }
}
