//! People's reviews of benchmark task items (MVFNDB's ten tasks, every answer format): one row
//! per item and reviewer plus the decided row, each with the reference as the reviewer left it
//! in its format's columns (as `record::BenchItem` keeps them), how the decided reference
//! changed against the drafted or derived one, and per task the retention, the reviewers'
//! kappa on their decisions and their agreement on the reference itself: Cohen's or Fleiss'
//! kappa on the chosen options; Krippendorff's alpha on counts (interval), on time ranges
//! (distance 1 − IoU of the merged ranges) and on texts and reference lists (distance
//! 1 − character-trigram similarity).
//!
//! `annotate import` of a task review makes them; `release` publishes the decided references.
//! Reads and writes `annotations/tasks.parquet` and `annotations/tasks_report.json`; calls
//! nothing.

use super::kappa::krippendorff_alpha;
use super::{decision_kappa, nominal_kappa};
use crate::benchmark::formats::Format;
use crate::benchmark::score::union_iou;
use crate::benchmark::text::similarity;
use crate::error::RunError;
use crate::record::BenchItem;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const TASKS: &str = "annotations/tasks.parquet";
pub const TASKS_REPORT: &str = "annotations/tasks_report.json";

/// A task item's reference in its format's columns (the others empty), as `BenchItem` has it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReferenceColumns {
    pub answer: String,
    pub answer_choices: Vec<u32>,
    pub answer_count: Option<u32>,
    pub answer_starts: Vec<f64>,
    pub answer_ends: Vec<f64>,
    pub answer_text: String,
    pub answer_label: String,
    pub reference_fields: Vec<String>,
    pub reference_items: Vec<Vec<String>>,
}

impl ReferenceColumns {
    pub fn ranges(&self) -> Vec<[f64; 2]> {
        self.answer_starts
            .iter()
            .zip(&self.answer_ends)
            .map(|(s, e)| [*s, *e])
            .collect()
    }

    /// The reference's text: the answer text, then every list's items, one per line.
    pub fn text(&self) -> String {
        let mut t = self.answer_text.clone();
        for (f, items) in self.reference_fields.iter().zip(&self.reference_items) {
            t += &format!("\n{f}:\n{}", items.join("\n"));
        }
        t
    }
}

/// One review of one task item (or, with annotator `adjudicated`, the decided one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TaskReview {
    pub item_id: String,
    pub video_id: String,
    pub task: String,
    pub format: String,
    /// Label Studio's user email (or id); `adjudicated` for the decided row.
    pub annotator: String,
    pub task_id: Option<i64>,
    pub annotation_id: Option<i64>,
    pub updated_at: Option<String>,
    /// accept, edit or reject.
    pub decision: String,
    pub answer: String,
    pub answer_choices: Vec<u32>,
    pub answer_count: Option<u32>,
    pub answer_starts: Vec<f64>,
    pub answer_ends: Vec<f64>,
    pub answer_text: String,
    pub answer_label: String,
    pub reference_fields: Vec<String>,
    pub reference_items: Vec<Vec<String>>,
    pub reject_reason: String,
    /// Against the item as made: accepted, minor_edit, rewritten or rejected.
    pub edit_class: String,
    pub decided_by: Option<String>,
}

/// Copies a row type's reference columns (`BenchItem`'s, `TaskReview`'s) out and back in.
macro_rules! reference_columns {
    ($($row:ty),*) => {$(
        impl $row {
            pub fn reference(&self) -> ReferenceColumns {
                ReferenceColumns {
                    answer: self.answer.clone(),
                    answer_choices: self.answer_choices.clone(),
                    answer_count: self.answer_count,
                    answer_starts: self.answer_starts.clone(),
                    answer_ends: self.answer_ends.clone(),
                    answer_text: self.answer_text.clone(),
                    answer_label: self.answer_label.clone(),
                    reference_fields: self.reference_fields.clone(),
                    reference_items: self.reference_items.clone(),
                }
            }

            pub fn set_reference(&mut self, r: ReferenceColumns) {
                self.answer = r.answer;
                self.answer_choices = r.answer_choices;
                self.answer_count = r.answer_count;
                self.answer_starts = r.answer_starts;
                self.answer_ends = r.answer_ends;
                self.answer_text = r.answer_text;
                self.answer_label = r.answer_label;
                self.reference_fields = r.reference_fields;
                self.reference_items = r.reference_items;
            }
        }
    )*};
}
reference_columns!(BenchItem, TaskReview);

/// How alike two references of `format` are, 0 to 1: 1 for equal choices, counts and labels
/// (else 0); the IoU of merged time ranges; the trigram similarity of texts and lists.
pub fn alike(format: Format, a: &ReferenceColumns, b: &ReferenceColumns) -> f64 {
    match format {
        Format::SingleChoice | Format::MultipleChoice => {
            f64::from(u8::from(a.answer_choices == b.answer_choices))
        }
        Format::Count => f64::from(u8::from(a.answer_count == b.answer_count)),
        Format::TimeRanges => union_iou(&a.ranges(), &b.ranges()),
        Format::ReferenceList | Format::OpenText => similarity(&a.text(), &b.text()),
        Format::TaggedReasoning if a.answer_label != b.answer_label => 0.0,
        Format::TaggedReasoning => similarity(&a.text(), &b.text()),
    }
}

/// How a review changed the item as made: rejected; accepted (the same reference); a minor
/// edit (still at least `minor_at` alike, `alike`); or rewritten.
pub fn edit_class(
    format: Format,
    made: &ReferenceColumns,
    r: &TaskReview,
    minor_at: f64,
) -> &'static str {
    if r.decision == "reject" {
        return "rejected";
    }
    let mine = r.reference();
    if &mine == made {
        "accepted"
    } else if alike(format, made, &mine) >= minor_at {
        "minor_edit"
    } else {
        "rewritten"
    }
}

/// One task's review shares and agreement.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TaskShares {
    pub task: String,
    pub format: String,
    pub decided: usize,
    pub accepted: usize,
    pub minor_edit: usize,
    pub rewritten: usize,
    pub rejected: usize,
    /// Kept of decided.
    pub retained: f64,
    /// The reviewers' (not the senior's) kappa on accept / edit / reject.
    pub decision_kappa: Option<f64>,
    pub decision_items: usize,
    /// Their agreement on the reference of the items they both kept (`agreement_measure`).
    pub reference_agreement: Option<f64>,
    pub reference_items: usize,
    pub agreement_measure: String,
}

/// The measure of reference agreement for `format`.
pub fn agreement_measure(format: Format) -> &'static str {
    match format {
        Format::SingleChoice | Format::MultipleChoice => "kappa on the chosen options",
        Format::Count => "alpha, interval",
        Format::TimeRanges => "alpha, distance 1 - IoU",
        _ => "alpha, distance 1 - text similarity",
    }
}

/// The reviewers' agreement on the references of items each of them kept, the senior aside.
pub fn reference_agreement(
    format: Format,
    reviews: &[&TaskReview],
    senior: Option<&str>,
) -> (Option<f64>, usize) {
    let mut by_item: BTreeMap<&str, Vec<&TaskReview>> = BTreeMap::new();
    for r in reviews
        .iter()
        .filter(|r| Some(r.annotator.as_str()) != senior && r.decision != "reject")
    {
        by_item.entry(r.item_id.as_str()).or_default().push(r);
    }
    let pairable: Vec<Vec<&TaskReview>> =
        by_item.into_values().filter(|rs| rs.len() >= 2).collect();
    if format.has_options() {
        let units: Vec<BTreeMap<&str, &str>> = pairable
            .iter()
            .map(|rs| {
                rs.iter()
                    .map(|r| (r.annotator.as_str(), r.answer.as_str()))
                    .collect()
            })
            .collect();
        return nominal_kappa(&units);
    }
    let units: Vec<Vec<ReferenceColumns>> = pairable
        .iter()
        .map(|rs| rs.iter().map(|r| r.reference()).collect())
        .collect();
    let a = match format {
        Format::Count => krippendorff_alpha(&units, |x, y| {
            let d = f64::from(x.answer_count.unwrap_or(0)) - f64::from(y.answer_count.unwrap_or(0));
            d * d
        }),
        _ => krippendorff_alpha(&units, |x, y| 1.0 - alike(format, x, y)),
    };
    (a, units.len())
}

/// One task's shares: its decided rows and all its rows (reviewers and senior).
pub fn task_shares(
    task: &str,
    format: Format,
    decided: &[&TaskReview],
    reviews: &[&TaskReview],
    senior: Option<&str>,
) -> TaskShares {
    let mut s = TaskShares {
        task: task.to_string(),
        format: format.name().to_string(),
        decided: decided.len(),
        agreement_measure: agreement_measure(format).into(),
        ..Default::default()
    };
    for d in decided {
        match d.edit_class.as_str() {
            "accepted" => s.accepted += 1,
            "minor_edit" => s.minor_edit += 1,
            "rewritten" => s.rewritten += 1,
            _ => s.rejected += 1,
        }
    }
    if s.decided > 0 {
        s.retained = (s.decided - s.rejected) as f64 / s.decided as f64;
    }
    (s.decision_kappa, s.decision_items) = decision_kappa(reviews, senior);
    (s.reference_agreement, s.reference_items) = reference_agreement(format, reviews, senior);
    s
}

/// Why one review was kept out.
pub type TaskProblem = super::ReviewProblem;

/// What `annotate import` of task reviews stored and found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskImportReport {
    pub reviews: usize,
    pub changed: usize,
    pub cancelled: usize,
    pub problems: Vec<TaskProblem>,
    pub pending: Vec<String>,
    pub rule: String,
    pub minor_at: f64,
    /// Per task, in the run's stage order.
    pub tasks: Vec<TaskShares>,
}

/// The run's reviews (empty before the first import).
pub async fn read_task_reviews(store: &Arc<dyn Store>) -> Result<Vec<TaskReview>, RunError> {
    super::read_review_rows(store, TASKS).await
}

/// The run's review report, when there was a review.
pub async fn read_task_report(
    store: &Arc<dyn Store>,
) -> Result<Option<TaskImportReport>, RunError> {
    super::read_review_report(store, TASKS_REPORT).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(who: &str, item: &str, decision: &str, r: ReferenceColumns) -> TaskReview {
        let mut t = TaskReview {
            item_id: item.into(),
            video_id: "v".into(),
            task: "t".into(),
            annotator: who.into(),
            decision: decision.into(),
            ..Default::default()
        };
        t.set_reference(r);
        t
    }

    fn ranges(r: &[[f64; 2]]) -> ReferenceColumns {
        ReferenceColumns {
            answer_starts: r.iter().map(|x| x[0]).collect(),
            answer_ends: r.iter().map(|x| x[1]).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn range_agreement_is_alpha_with_one_minus_iou() {
        // Unit 1: [0,4] and [2,4] (IoU 0.5); unit 2: [5,6] twice. Values a=[0,4], b=[2,4],
        // c=d=[5,6]. D_o = (2·0.5 + 0) / 4 = 0.25. Ordered pairs: a-b 0.5, a-c 1, a-d 1,
        // b-c 1, b-d 1, c-d 0, each twice: 9 / 12 = 0.75. alpha = 1 − 0.25 / 0.75 = 2/3.
        let rs = [
            review("r1", "i1", "edit", ranges(&[[0.0, 4.0]])),
            review("r2", "i1", "edit", ranges(&[[2.0, 4.0]])),
            review("r1", "i2", "accept", ranges(&[[5.0, 6.0]])),
            review("r2", "i2", "accept", ranges(&[[5.0, 6.0]])),
            review("r2", "i3", "reject", ranges(&[[1.0, 2.0]])),
        ];
        let refs: Vec<&TaskReview> = rs.iter().collect();
        let (a, n) = reference_agreement(Format::TimeRanges, &refs, None);
        assert_eq!(n, 2);
        assert!((a.unwrap() - 2.0 / 3.0).abs() < 1e-12, "{a:?}");
    }

    #[test]
    fn an_edit_is_minor_while_the_reference_stays_alike() {
        let made = ranges(&[[0.0, 4.0]]);
        let r = review("r", "i", "edit", ranges(&[[0.0, 3.0]]));
        assert_eq!(edit_class(Format::TimeRanges, &made, &r, 0.5), "minor_edit");
        let r = review("r", "i", "edit", ranges(&[[3.0, 8.0]]));
        assert_eq!(edit_class(Format::TimeRanges, &made, &r, 0.5), "rewritten");
        let r = review("r", "i", "accept", made.clone());
        assert_eq!(edit_class(Format::TimeRanges, &made, &r, 0.5), "accepted");
        let count = |c| ReferenceColumns {
            answer_count: Some(c),
            ..Default::default()
        };
        let r = review("r", "i", "edit", count(3));
        assert_eq!(edit_class(Format::Count, &count(2), &r, 0.5), "rewritten");
    }
}
