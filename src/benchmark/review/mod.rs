//! What people decided of a run's videos and items, read back from `annotations/` by every
//! command that uses it (`annotate` writes it, `release` publishes it, scoring compares with it):
//! the per-video annotations (`Annotation`, RiskCue's 8 fields) and the rule that decides among
//! annotators, the item reviews (`items`), and the agreement statistics (`kappa`). Calls
//! nothing; caches nothing.

pub mod items;
pub mod kappa;

use crate::error::RunError;
use crate::store::Store;
use crate::store::shards::table_batches;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Where `annotate import` stores the annotations (one row per video and annotator, plus the
/// adjudicated row).
pub const ANNOTATIONS: &str = "annotations/annotations.parquet";

/// How one video's annotations are decided when several annotators labelled it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// The one annotator (with several, the most recent annotation).
    Single,
    /// The label most annotators chose; the spans and texts of the first of them. A tie is not
    /// adjudicated (listed in the report).
    Majority,
    /// This annotator's annotation wins; majority where they did not annotate.
    Reviewer(String),
}

impl std::str::FromStr for Rule {
    type Err = crate::error::BadArgument;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "single" => Ok(Rule::Single),
            "majority" => Ok(Rule::Majority),
            _ => match s.strip_prefix("reviewer:") {
                Some(name) if !name.is_empty() => Ok(Rule::Reviewer(name.to_string())),
                _ => Err(crate::error::BadArgument(format!(
                    "{s:?}: expected single, majority or reviewer:NAME (e.g. reviewer:lead@lab.org)"
                ))),
            },
        }
    }
}

/// One annotation of one video: RiskCue's 8 fields (times in seconds).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Annotation {
    pub video_id: String,
    /// Who annotated (Label Studio's user email or id; `adjudicated` for the decided row).
    pub annotator: String,
    pub task_id: Option<i64>,
    pub annotation_id: Option<i64>,
    pub updated_at: Option<String>,
    pub risk_signal_start: Option<f64>,
    pub risk_signal_end: Option<f64>,
    pub risk_visual_indicators: Option<String>,
    /// "First, …; Then, …; Afterwards, …" as the annotator wrote the three parts.
    pub risk_signal_description: Option<String>,
    pub accident_start: Option<f64>,
    pub accident_end: Option<f64>,
    pub accident_description: Option<String>,
    /// "yes" or "no".
    pub risk_label: String,
    /// The adjudicated row: the rule and the annotators it was decided from.
    pub decided_by: Option<String>,
}

/// The run's annotations (empty before the first import).
pub async fn read_annotations(store: &Arc<dyn Store>) -> Result<Vec<Annotation>, RunError> {
    let data = match store.get(ANNOTATIONS).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => {
            return Err(RunError::io(
                format!("{}/{ANNOTATIONS}", store.location()),
                e,
            ));
        }
    };
    let mut out = vec![];
    for b in table_batches(ANNOTATIONS, data)? {
        let rows: Vec<Annotation> = serde_arrow::from_record_batch(&b)
            .map_err(|e| RunError::Internal(format!("{ANNOTATIONS}: {e}")))?;
        out.extend(rows);
    }
    Ok(out)
}
