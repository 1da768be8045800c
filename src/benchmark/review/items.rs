//! People's reviews of question items (HarmVideoBench A.2: two reviewers and a senior
//! adjudicator): one row per item and reviewer plus the decided row, how each decided item
//! changed against the drafted one, the retention and edit shares with the reviewers' kappa, and
//! the stored report. `annotate import --items` makes them; `release` publishes the decided
//! items. Reads `annotations/items.parquet` and `items_report.json`; calls nothing.

use super::decision_kappa;
use crate::benchmark::text::{norm, similarity};
use crate::error::RunError;
use crate::record::QuestionItem;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

pub const ITEMS: &str = "annotations/items.parquet";
pub const ITEMS_REPORT: &str = "annotations/items_report.json";

pub use super::{DECISIONS, decide};

/// One review of one item (or, with annotator `adjudicated`, the decided item).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ItemReview {
    pub item_id: String,
    pub video_id: String,
    /// Label Studio's user email (or id); `adjudicated` for the decided row.
    pub annotator: String,
    pub task_id: Option<i64>,
    pub annotation_id: Option<i64>,
    pub updated_at: Option<String>,
    /// accept, edit or reject.
    pub decision: String,
    pub question: String,
    pub options: Vec<String>,
    pub answer: String,
    pub level: String,
    /// The drafted item's level (what the agreement is computed per).
    pub drafted_level: String,
    pub reject_reason: String,
    /// Against the drafted item: accepted, minor_edit, rewritten or rejected.
    pub edit_class: String,
    /// The decided row: the rule and the reviewers it was decided from.
    pub decided_by: Option<String>,
    /// The draft reviewed (`record::draft_digest`); None in reviews imported before drafts were
    /// recorded, which apply to the item as it is.
    #[serde(default)]
    pub drafted: Option<String>,
}

impl ItemReview {
    /// Whether this review is of `item` as drafted now (not of an earlier draft of its id).
    pub fn is_of(&self, item: &QuestionItem) -> bool {
        self.drafted.as_deref().is_none_or(|d| d == item.draft())
    }
}

/// One level's (or all levels') review shares.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReviewShares {
    pub decided: usize,
    pub accepted: usize,
    pub minor_edit: usize,
    pub rewritten: usize,
    pub rejected: usize,
    /// Kept items whose level the review changed.
    pub reassigned: usize,
    /// Kept of decided.
    pub retained: f64,
    /// Of the kept items, those edited a little and those rewritten.
    pub minor_share: f64,
    pub rewritten_share: f64,
    /// Agreement of the reviewers (not the senior) on the decision (accept / edit / reject):
    /// Cohen's kappa for two, Fleiss' for more; None when no item has two reviewers.
    pub kappa: Option<f64>,
    pub kappa_items: usize,
}

/// Why one review was kept out.
pub type ItemProblem = super::ReviewProblem;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ItemImportReport {
    pub reviews: usize,
    pub changed: usize,
    pub cancelled: usize,
    /// Stored reviews of an earlier draft of their item (or of an item no longer drafted):
    /// kept as history, not decided.
    #[serde(default)]
    pub superseded: usize,
    pub problems: Vec<ItemProblem>,
    /// Items whose reviewers disagree and no senior decided (the rule's name for them).
    pub pending: Vec<String>,
    pub rule: String,
    pub minor_at: f64,
    /// Per drafted level, in the stage's order, then over all.
    pub levels: Vec<(String, ReviewShares)>,
    pub all: ReviewShares,
}

/// The rows of the first stage of kind `kind` at or after stage `after`, by `id` (an item id).
pub(crate) async fn rows_after<T: serde::de::DeserializeOwned + Serialize + Clone>(
    store: &Arc<dyn Store>,
    m: &Manifest,
    after: &str,
    kind: &str,
    id: impl Fn(&T) -> String,
) -> Result<HashMap<String, T>, RunError> {
    let Some(st) = m
        .stages
        .iter()
        .skip_while(|s| s.id != after)
        .find(|s| s.kind == kind)
    else {
        return Ok(HashMap::new());
    };
    let rows: HashMap<String, Vec<T>> = read_table(store, &st.id, &st.fingerprint, true)
        .await?
        .rows()?;
    Ok(rows.into_values().flatten().map(|r| (id(&r), r)).collect())
}

/// How a kept review changed the drafted item: accepted (nothing), minor_edit (the question
/// and the correct option's text stay at least `minor_at` alike, character trigrams), or
/// rewritten.
pub fn edit_class(drafted: &QuestionItem, r: &ItemReview, minor_at: f64) -> &'static str {
    if r.decision == "reject" {
        return "rejected";
    }
    if r.question == drafted.question
        && r.options == drafted.options
        && r.answer == drafted.answer
        && r.level == drafted.level
    {
        return "accepted";
    }
    let correct = |opts: &[String], a: &str| {
        a.bytes()
            .next()
            .and_then(|b| opts.get((b - b'A') as usize))
            .cloned()
            .unwrap_or_default()
    };
    let (mine, made) = (
        correct(&r.options, &r.answer),
        correct(&drafted.options, &drafted.answer),
    );
    let same_answer = norm(&mine) == norm(&made) || similarity(&mine, &made) >= minor_at;
    if same_answer && similarity(&r.question, &drafted.question) >= minor_at {
        "minor_edit"
    } else {
        "rewritten"
    }
}

/// Retention and edit shares of decided items, and the reviewers' kappa on their decisions.
pub fn shares(
    decided: &[&ItemReview],
    reviews: &[&ItemReview],
    senior: Option<&str>,
) -> ReviewShares {
    let mut s = ReviewShares {
        decided: decided.len(),
        ..Default::default()
    };
    for d in decided {
        match d.edit_class.as_str() {
            "accepted" => s.accepted += 1,
            "minor_edit" => s.minor_edit += 1,
            "rewritten" => s.rewritten += 1,
            _ => s.rejected += 1,
        }
        if d.decision != "reject" && d.level != d.drafted_level {
            s.reassigned += 1;
        }
    }
    let kept = s.decided - s.rejected;
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    s.retained = share(kept, s.decided);
    s.minor_share = share(s.minor_edit, kept);
    s.rewritten_share = share(s.rewritten, kept);
    (s.kappa, s.kappa_items) = decision_kappa(reviews, senior);
    s
}

/// The run's reviews (empty before the first import).
pub async fn read_reviews(store: &Arc<dyn Store>) -> Result<Vec<ItemReview>, RunError> {
    super::read_review_rows(store, ITEMS).await
}

/// The run's review report, when there was a review.
pub async fn read_report(store: &Arc<dyn Store>) -> Result<Option<ItemImportReport>, RunError> {
    super::read_review_report(store, ITEMS_REPORT).await
}
