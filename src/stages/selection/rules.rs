//! A scoring stage's `select` as a rule over columns: for the kinds whose `RowThresholds::keep`
//! reads one value of a video's first row (relevance's score, quality's count of twos,
//! prescreen's certain failures), the comparison is an Arrow kernel over a batch of that one
//! column, so deciding a table reads two columns of it and decodes no row into its type. The
//! other kinds (the committee, questions, blind answers, the level check count or combine rows)
//! keep their own code (`StageKind::reselect`) over whole rows.
//!
//! The thresholds are read and checked by the stage's own type (`stages::thresholds`), so
//! defaults, errors and the settings written beside a selection are the stage's. Reads and
//! writes nothing; called by `decide`. The tests hold each rule to the stage's own `reselect`.

use crate::stages::{ThresholdError, prescreen, quality, relevance, thresholds};
use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use arrow::compute::kernels::cmp;
use arrow::datatypes::DataType;

/// How a scoring stage decides which of its done videos go on, under one `select`.
pub enum Rule {
    /// Every done video (prescreen with `reject_certain = false`).
    Every,
    /// `column` of the video's first row within `bound`; a video without rows goes on when
    /// `no_rows`.
    FirstRow {
        column: &'static str,
        bound: Bound,
        no_rows: bool,
    },
    /// The stage's `reselect` over whole rows, with this `select`.
    Rows(toml::Table),
}

#[derive(Clone, Copy)]
pub enum Bound {
    AtLeast(i64),
    AtMost(i64),
}

/// The rule of the kinds decided from one column, and their thresholds as applied (defaults
/// filled in); None for the other kinds.
pub fn column_rule(
    kind: &str,
    select: &toml::Table,
) -> Result<Option<(Rule, serde_json::Value)>, ThresholdError> {
    let first = |column, bound, no_rows| Rule::FirstRow {
        column,
        bound,
        no_rows,
    };
    Ok(Some(if kind == relevance::KIND.name {
        let t: relevance::RelevanceSelect = thresholds(select)?;
        let rule = first("score", Bound::AtLeast(t.min_score.into()), false);
        (rule, json(&t))
    } else if kind == quality::KIND.name {
        let t: quality::QualitySelect = thresholds(select)?;
        let rule = first("twos", Bound::AtLeast(t.min_twos.into()), false);
        (rule, json(&t))
    } else if kind == prescreen::KIND.name {
        let t: prescreen::PrescreenSelect = thresholds(select)?;
        // The prescreen only ever drops on certain evidence: no verdict goes on.
        let rule = if t.reject_certain {
            let limit = 12u32.saturating_sub(t.min_twos);
            first("certain_failures", Bound::AtMost(limit.into()), true)
        } else {
            Rule::Every
        };
        (rule, json(&t))
    } else {
        return Ok(None);
    }))
}

/// The thresholds as `reselect_rows` records them.
fn json<T: serde::Serialize>(t: &T) -> serde_json::Value {
    serde_json::to_value(t).unwrap_or_default()
}

impl Rule {
    /// The column the rule reads, if one.
    pub fn column(&self) -> Option<&'static str> {
        match self {
            Rule::FirstRow { column, .. } => Some(column),
            _ => None,
        }
    }

    /// Whether a done video without rows goes on (for `Rows`, the stage's code decides later).
    pub fn no_rows(&self) -> bool {
        match self {
            Rule::Every => true,
            Rule::FirstRow { no_rows, .. } => *no_rows,
            Rule::Rows(_) => false,
        }
    }

    /// Per row of a batch, whether its video goes on were it the video's first row; `values`
    /// is the batch's column of the rule (None when the rule reads no column).
    pub fn verdicts(
        &self,
        values: Option<&ArrayRef>,
        rows: usize,
    ) -> Result<BooleanArray, RuleError> {
        let (Rule::FirstRow { column, bound, .. }, Some(values)) = (self, values) else {
            return match self {
                Rule::FirstRow { column, .. } => Err(RuleError::NoColumn(column)),
                _ => Ok(BooleanArray::from(vec![true; rows])),
            };
        };
        let arrow = |error| RuleError::Arrow { column, error };
        // The row types hold unsigned integers; any integer column compares exactly as i64.
        let values = arrow::compute::cast(values, &DataType::Int64).map_err(arrow)?;
        if values.null_count() > 0 {
            return Err(RuleError::Nulls {
                column,
                nulls: values.null_count(),
            });
        }
        let out = match *bound {
            Bound::AtLeast(b) => cmp::gt_eq(&values, &Int64Array::new_scalar(b)),
            Bound::AtMost(b) => cmp::lt_eq(&values, &Int64Array::new_scalar(b)),
        };
        out.map_err(arrow)
    }
}

/// Why a column rule cannot decide a batch's rows.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("no column {0}")]
    NoColumn(&'static str),
    #[error("column {column}: {error}")]
    Arrow {
        column: &'static str,
        error: arrow::error::ArrowError,
    },
    #[error("column {column}: {nulls} rows without a value")]
    Nulls { column: &'static str, nulls: usize },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::prescreen::{Prescreen, Verdict};
    use crate::stages::quality::Quality;
    use crate::stages::relevance::Relevance;
    use arrow::array::{RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    /// Two rows per video for some, to tell the first row from the others.
    const IDS: [&str; 6] = ["a", "a", "b", "c", "c", "d"];

    fn batch<R: serde::Serialize + serde::de::DeserializeOwned>(rows: &[R]) -> RecordBatch {
        let fields = crate::store::shards::fields_of::<R>().unwrap();
        let b = serde_arrow::to_record_batch(&fields, &rows).unwrap();
        let mut f = vec![Arc::new(Field::new("video_id", DataType::Utf8, false))];
        f.extend(b.schema().fields().iter().cloned());
        let mut cols: Vec<ArrayRef> = vec![Arc::new(StringArray::from(IDS[..rows.len()].to_vec()))];
        cols.extend(b.columns().iter().cloned());
        RecordBatch::try_new(Arc::new(Schema::new(f)), cols).unwrap()
    }

    /// The rule's verdict per video (first row, or `no_rows`) against the stage's `reselect`.
    fn agree(kind: &str, batch: &RecordBatch, select: &str) {
        let select: toml::Table = toml::from_str(select).unwrap();
        let (rule, settings) = column_rule(kind, &select).unwrap().unwrap();
        let reselect = crate::stages::stage_kind(kind).unwrap().reselect.unwrap();
        let mut view = crate::store::shards::TableView::default();
        view.batches = vec![batch.clone()];
        let theirs = reselect(&select, &view).map_err(|e| e.message).unwrap();
        assert_eq!(settings, theirs.settings);
        let values = rule.column().and_then(|c| batch.column_by_name(c));
        let v = rule.verdicts(values, batch.num_rows()).unwrap();
        for id in ["a", "b", "c", "d", "no rows"] {
            let first = IDS.iter().position(|i| *i == id);
            let ours = first.map_or(rule.no_rows(), |i| v.value(i));
            assert_eq!(ours, (theirs.keep)(id), "{kind} {select:?} {id}");
        }
    }

    #[test]
    fn column_rules_decide_as_the_stages_own_code() {
        let rel = |score| Relevance {
            score,
            attempts: 1,
            ..Default::default()
        };
        let b = batch(&[rel(9), rel(1), rel(8), rel(3), rel(10), rel(10)]);
        for s in [
            "",
            "min_score = 8",
            "min_score = 9",
            "min_score = 1",
            "min_score = 10",
        ] {
            agree(relevance::KIND.name, &b, s);
        }
        let qual = |twos| Quality {
            twos,
            attempts: 1,
            ..Default::default()
        };
        let b = batch(&[qual(10), qual(2), qual(12), qual(9), qual(11), qual(0)]);
        for s in ["", "min_twos = 0", "min_twos = 9", "min_twos = 12"] {
            agree(quality::KIND.name, &b, s);
        }
        let pre = |certain_failures| Prescreen {
            logo: Verdict::Pass,
            location: Verdict::Unknown,
            time_date: Verdict::Fail,
            sns: Verdict::LikelyFail,
            jump_cuts: Verdict::Pass,
            subtitles: Verdict::Pass,
            certain_failures,
            ..Default::default()
        };
        let b = batch(&[pre(2), pre(0), pre(3), pre(0), pre(5), pre(1)]);
        for s in [
            "",
            "min_twos = 9",
            "min_twos = 12",
            "min_twos = 0",
            "reject_certain = false",
        ] {
            agree(prescreen::KIND.name, &b, s);
        }
    }

    #[test]
    fn other_scoring_kinds_keep_their_own_code() {
        let columnar = [
            relevance::KIND.name,
            quality::KIND.name,
            prescreen::KIND.name,
        ];
        for k in crate::stages::STAGE_KINDS
            .iter()
            .filter(|k| k.reselect.is_some())
        {
            let rule = column_rule(k.name, &toml::Table::new()).unwrap();
            assert_eq!(rule.is_some(), columnar.contains(&k.name), "{}", k.name);
        }
    }
}
