//! What people decided of a run's videos and items, read back from `annotations/` by every
//! command that uses it (`annotate` writes it, `release` publishes it, scoring compares with it):
//! the per-video annotations (`Annotation`, RiskCue's 8 fields) and the rule that decides among
//! annotators, the item reviews (`items`), and the agreement statistics (`kappa`). Calls
//! nothing; caches nothing.

pub mod items;
pub mod judging;
pub mod kappa;
pub mod tasks;

use crate::error::RunError;
use crate::store::Store;
use crate::store::shards::table_batches;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

impl Rule {
    /// As `--rule` spells it.
    pub fn name(&self) -> String {
        match self {
            Rule::Single => "single".into(),
            Rule::Majority => "majority".into(),
            Rule::Reviewer(s) => format!("reviewer:{s}"),
        }
    }
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    read_review_rows(store, ANNOTATIONS).await
}

/// One person's review of one item (a question item, a task item; a video's annotation): what
/// deciding among reviewers and their agreement on the decision need of it.
pub trait Reviewed: Clone {
    fn item(&self) -> &str;
    fn annotator(&self) -> &str;
    /// accept, edit or reject (an annotation's: its yes or no label).
    fn decision(&self) -> &str;
    fn updated_at(&self) -> Option<&str>;
    /// Makes this review the decided one, saying how it was decided.
    fn adjudicate(&mut self, how: String);
    /// Stamps the review with its Label Studio task, annotation `a`'s id and its time.
    fn stamp(&mut self, task_id: Option<i64>, a: &serde_json::Value);
}

/// `Reviewed` of the review rows, read from their item and decision columns (`item_id` and
/// `decision` in reviews), `annotator`, `updated_at` and `decided_by` (and `task_id`,
/// `annotation_id` stamped).
macro_rules! reviewed_rows {
    ($($row:ty: $item:ident, $decision:ident);*) => {$(
        impl Reviewed for $row {
            fn item(&self) -> &str {
                &self.$item
            }
            fn annotator(&self) -> &str {
                &self.annotator
            }
            fn decision(&self) -> &str {
                &self.$decision
            }
            fn updated_at(&self) -> Option<&str> {
                self.updated_at.as_deref()
            }
            fn adjudicate(&mut self, how: String) {
                self.annotator = "adjudicated".into();
                self.decided_by = Some(how);
            }
            fn stamp(&mut self, task_id: Option<i64>, a: &serde_json::Value) {
                self.task_id = task_id;
                self.annotation_id = a["id"].as_i64();
                self.updated_at = a["updated_at"]
                    .as_str()
                    .or(a["created_at"].as_str())
                    .map(String::from);
            }
        }
    )*};
}
reviewed_rows!(
    items::ItemReview: item_id, decision;
    tasks::TaskReview: item_id, decision;
    Annotation: video_id, risk_label
);

/// What a reviewer decides of an item.
pub const DECISIONS: [&str; 3] = ["accept", "edit", "reject"];

/// The decided review of each item under `rule`: the senior's (reviewer:NAME) where they
/// reviewed it; else the reviewers' common decision (the latest of them); else the item is
/// pushed to `pending`.
pub fn decide<R: Reviewed>(reviews: &[R], rule: &Rule, pending: &mut Vec<String>) -> Vec<R> {
    let mut by_item: BTreeMap<&str, Vec<&R>> = BTreeMap::new();
    for r in reviews {
        by_item.entry(r.item()).or_default().push(r);
    }
    let latest = |set: &[&R]| -> Option<R> {
        set.iter()
            .max_by(|a, b| a.updated_at().cmp(&b.updated_at()))
            .map(|r| (*r).clone())
    };
    let mut out = vec![];
    for (item, rs) in by_item {
        let pick = match rule {
            Rule::Single => latest(&rs).map(|r| {
                let how = format!("single: {}", r.annotator());
                (r, how)
            }),
            Rule::Reviewer(s) if rs.iter().any(|r| r.annotator() == s) => rs
                .iter()
                .find(|r| r.annotator() == s)
                .map(|r| ((*r).clone(), format!("senior: {s}"))),
            _ => {
                let mut count: BTreeMap<&str, usize> = BTreeMap::new();
                for r in &rs {
                    *count.entry(r.decision()).or_default() += 1;
                }
                let top = count.values().copied().max().unwrap_or(0);
                let tops: Vec<&str> = count
                    .iter()
                    .filter(|(_, n)| **n == top)
                    .map(|(d, _)| *d)
                    .collect();
                if tops.len() == 1 {
                    let with: Vec<&R> = rs
                        .iter()
                        .copied()
                        .filter(|r| r.decision() == tops[0])
                        .collect();
                    let names: Vec<&str> = rs.iter().map(|r| r.annotator()).collect();
                    latest(&with).map(|r| {
                        let how = format!(
                            "{} of {} reviewers ({}): {}",
                            top,
                            rs.len(),
                            names.join(", "),
                            tops[0]
                        );
                        (r, how)
                    })
                } else {
                    pending.push(item.to_string());
                    None
                }
            }
        };
        if let Some((mut d, how)) = pick {
            d.adjudicate(how);
            out.push(d);
        }
    }
    out
}

/// The reviewers' agreement (the senior aside) on the decision: Cohen's kappa for two,
/// Fleiss' for more (over the items the most of them reviewed); and on how many items.
pub fn decision_kappa<R: Reviewed>(reviews: &[&R], senior: Option<&str>) -> (Option<f64>, usize) {
    let mut by_item: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    for r in reviews.iter().filter(|r| Some(r.annotator()) != senior) {
        by_item
            .entry(r.item())
            .or_default()
            .insert(r.annotator(), r.decision());
    }
    nominal_kappa(&by_item.into_values().collect::<Vec<_>>())
}

/// Kappa of nominal labels, `units[i]` the labels of one unit by rater: Cohen's for two raters
/// (units both labelled), Fleiss' for more (units labelled by the most raters any unit has).
pub fn nominal_kappa(units: &[BTreeMap<&str, &str>]) -> (Option<f64>, usize) {
    let multi: Vec<&BTreeMap<&str, &str>> = units.iter().filter(|m| m.len() >= 2).collect();
    let mut who: Vec<&str> = multi.iter().flat_map(|m| m.keys().copied()).collect();
    who.sort_unstable();
    who.dedup();
    if who.len() == 2 {
        let (a, b): (Vec<&str>, Vec<&str>) = multi
            .iter()
            .filter_map(|m| Some((*m.get(who[0])?, *m.get(who[1])?)))
            .unzip();
        (kappa::cohen_kappa(&a, &b), a.len())
    } else if who.len() > 2 {
        let mut cats: Vec<&str> = multi.iter().flat_map(|m| m.values().copied()).collect();
        cats.sort_unstable();
        cats.dedup();
        let most = multi.iter().map(|m| m.len()).max().unwrap_or(0);
        let counts: Vec<Vec<f64>> = multi
            .iter()
            .filter(|m| m.len() == most)
            .map(|m| {
                cats.iter()
                    .map(|c| m.values().filter(|x| *x == c).count() as f64)
                    .collect()
            })
            .collect();
        (kappa::fleiss_kappa(&counts), counts.len())
    } else {
        (None, 0)
    }
}

/// The stored reviews (decided rows left out) with the fresh ones merged in: a review replaces
/// the stored one of the same reviewer and item unless it is equal or older. Returns the rows
/// and how many were new or replaced, so importing the same export again changes nothing.
pub fn merge_reviews<R: Reviewed + PartialEq>(stored: Vec<R>, fresh: Vec<R>) -> (Vec<R>, usize) {
    let mut rows: BTreeMap<(String, String), R> = stored
        .into_iter()
        .filter(|r| r.annotator() != "adjudicated")
        .map(|r| ((r.item().to_string(), r.annotator().to_string()), r))
        .collect();
    let mut changed = 0;
    for r in fresh {
        let key = (r.item().to_string(), r.annotator().to_string());
        match rows.get(&key) {
            Some(old) if old == &r || old.updated_at() > r.updated_at() => {}
            _ => {
                changed += 1;
                rows.insert(key, r);
            }
        }
    }
    (rows.into_values().collect(), changed)
}

/// Why one review was kept out: the Label Studio task, the item, the reviewer and the field.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewProblem {
    pub task_id: Option<i64>,
    pub item_id: Option<String>,
    pub annotator: Option<String>,
    pub field: String,
    pub reason: String,
}

/// What an import kept out (a line each: task, item, reviewer, field, why) and the items whose
/// reviewers disagree with no senior decision yet.
pub fn render_problems(problems: &[ReviewProblem], pending: &[String]) -> String {
    let mut s = String::new();
    for p in problems {
        s += &format!(
            "kept out: task {} item {} reviewer {}: {}: {}\n",
            p.task_id.map_or("-".into(), |t| t.to_string()),
            p.item_id.as_deref().unwrap_or("-"),
            p.annotator.as_deref().unwrap_or("-"),
            p.field,
            p.reason
        );
    }
    if !pending.is_empty() {
        s += &format!(
            "reviewers disagree, no senior decision yet: {}\n",
            pending.join(", ")
        );
    }
    s
}

/// The reviews of item `item`'s exported task `t`, `review` reading each annotation (who made
/// it, its results), stamped with the task, the annotation and its time. A cancelled annotation
/// is counted in `cancelled`; a review that does not check goes to `problems`, field by field.
pub fn task_reviews<R: Reviewed>(
    t: &serde_json::Value,
    item: &str,
    cancelled: &mut usize,
    problems: &mut Vec<ReviewProblem>,
    review: impl Fn(&str, &[serde_json::Value]) -> Result<R, Vec<(String, String)>>,
) -> Vec<R> {
    let mut fresh = vec![];
    let task_id = t["id"].as_i64();
    for a in t["annotations"].as_array().into_iter().flatten() {
        let who = annotator_of(a);
        if a["was_cancelled"].as_bool() == Some(true) {
            *cancelled += 1;
            continue;
        }
        let result = a["result"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        match review(&who, result) {
            Ok(mut r) => {
                r.stamp(task_id, a);
                fresh.push(r);
            }
            Err(ps) => {
                for (field, reason) in ps {
                    problems.push(ReviewProblem {
                        task_id,
                        item_id: Some(item.into()),
                        annotator: Some(who.clone()),
                        field,
                        reason,
                    });
                }
            }
        }
    }
    fresh
}

/// Stores a review table (`rows`, reviewers' and decided) and its report through the run's store
/// (`name` names the table in an internal error).
pub async fn store_reviews<R: Serialize + serde::de::DeserializeOwned, T: Serialize>(
    store: &Arc<dyn Store>,
    (name, table, report_path): (&str, &str, &str),
    rows: &[R],
    report: &T,
) -> Result<(), RunError> {
    let fields = crate::store::shards::fields_of::<R>()?;
    let batch = serde_arrow::to_record_batch(&fields, &rows)
        .map_err(|e| RunError::Internal(format!("{name}: {e}")))?;
    store
        .put(table, crate::store::shards::encode_table(&batch)?)
        .await
        .map_err(|e| store.io_error(table, e))?;
    store
        .put(
            report_path,
            serde_json::to_vec_pretty(report).unwrap_or_default(),
        )
        .await
        .map_err(|e| store.io_error(report_path, e))
}

/// A review table's rows (empty before the first import).
pub async fn read_review_rows<R: serde::de::DeserializeOwned>(
    store: &Arc<dyn Store>,
    table: &str,
) -> Result<Vec<R>, RunError> {
    let data = match store.get(table).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(store.io_error(table, e)),
    };
    let mut out = vec![];
    for b in table_batches(table, data)? {
        let rows: Vec<R> = serde_arrow::from_record_batch(&b)
            .map_err(|e| RunError::Internal(format!("{table}: {e}")))?;
        out.extend(rows);
    }
    Ok(out)
}

/// A review report, when there was a review.
pub async fn read_review_report<T: serde::de::DeserializeOwned>(
    store: &Arc<dyn Store>,
    path: &str,
) -> Result<Option<T>, RunError> {
    match store.get(path).await {
        Ok(d) => serde_json::from_slice(&d)
            .map(Some)
            .map_err(|e| RunError::Internal(format!("{path}: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store.io_error(path, e)),
    }
}

/// `s` escaped for an attribute value of a Label Studio label config.
pub fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A label config's `<Choice>` lines, one per value.
pub fn xml_choices(vals: &[String]) -> String {
    vals.iter()
        .map(|v| format!("    <Choice value=\"{}\"/>\n", xml(v)))
        .collect()
}

/// Who made a Label Studio annotation: the user's email when the export carries the user,
/// else their id (people's reviews and their judgments of the judge are read alike).
pub fn annotator_of(a: &serde_json::Value) -> String {
    match &a["completed_by"] {
        serde_json::Value::Object(o) => o
            .get("email")
            .and_then(|e| e.as_str())
            .map(String::from)
            .or_else(|| o.get("id").map(|i| i.to_string())),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
    .unwrap_or_else(|| "unknown".into())
}
