//! The metrics a task file may name (MVFNDB B.3) and the formats each can score; `Metric`
//! parses a task file's `metrics` entry against its format.

use super::formats::Format;

/// A metric part 2 computes, and the formats it can score (B.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Share right: single choice, the exact set of a multiple choice, a tagged result.
    Accuracy,
    /// Mean per-item Jaccard of the chosen and the right letters.
    Jaccard,
    /// Macro-F1 of a tagged result over the task's labels.
    MacroF1,
    /// Mean |predicted − reference| (SAC's Avg AD).
    AbsDistance,
    /// Mean IoU of predicted and reference time ranges (KEG).
    MeanIou,
    /// A judge decides per reference element whether the answer states it; `.FIELD` names
    /// the reference list (B.3's EHR, ENHR, KHR, RHR).
    HitRate,
    FactualConsistency,
    ThemeRelevance,
    Completeness,
    RougeL,
}

pub const METRICS: &[(&str, MetricKind, &[Format])] = &[
    (
        "accuracy",
        MetricKind::Accuracy,
        &[
            Format::SingleChoice,
            Format::MultipleChoice,
            Format::TaggedReasoning,
        ],
    ),
    ("jaccard", MetricKind::Jaccard, &[Format::MultipleChoice]),
    ("macro_f1", MetricKind::MacroF1, &[Format::TaggedReasoning]),
    ("abs_distance", MetricKind::AbsDistance, &[Format::Count]),
    ("mean_iou", MetricKind::MeanIou, &[Format::TimeRanges]),
    (
        "hit_rate",
        MetricKind::HitRate,
        &[Format::ReferenceList, Format::TaggedReasoning],
    ),
    ("factual_consistency", MetricKind::FactualConsistency, TEXT),
    ("theme_relevance", MetricKind::ThemeRelevance, TEXT),
    ("completeness", MetricKind::Completeness, TEXT),
    ("rouge_l", MetricKind::RougeL, TEXT),
];

const TEXT: &[Format] = &[
    Format::ReferenceList,
    Format::OpenText,
    Format::TaggedReasoning,
];

/// A metric as a task file names it: `hit_rate.entities` is a hit rate over the reference
/// list `entities`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    pub kind: MetricKind,
    pub field: Option<String>,
}

/// Why a task file's `metrics` entry does not name a metric of its format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    #[error("unknown metric {name:?} (known: {known})")]
    Unknown { name: String, known: String },
    #[error("metric {base:?} does not fit the format {format:?}: it scores {scores}")]
    Misfit {
        base: String,
        format: &'static str,
        scores: String,
    },
    #[error("hit_rate needs the reference list it counts: hit_rate.FIELD, FIELD one of {lists}")]
    NoList { lists: String },
    #[error("hit_rate.{field}: the reference has no list {field:?} (its lists: {lists})")]
    UnknownList { field: String, lists: String },
    #[error("metric {base:?} takes no field (got .{field})")]
    TakesNoField { base: String, field: String },
}

impl Metric {
    /// Parses a metric name and checks it fits `format`; `lists` are the task's reference
    /// list fields (what `hit_rate.FIELD` may name).
    pub fn parse(name: &str, format: Format, lists: &[String]) -> Result<Self, MetricError> {
        let (base, field) = match name.split_once('.') {
            Some((b, f)) => (b, Some(f.to_string())),
            None => (name, None),
        };
        let Some((_, kind, fits)) = METRICS.iter().find(|(n, _, _)| *n == base) else {
            let known: Vec<&str> = METRICS.iter().map(|(n, _, _)| *n).collect();
            return Err(MetricError::Unknown {
                name: name.to_string(),
                known: known.join(", "),
            });
        };
        if !fits.contains(&format) {
            let names: Vec<&str> = fits.iter().map(|f| f.name()).collect();
            return Err(MetricError::Misfit {
                base: base.to_string(),
                format: format.name(),
                scores: names.join(", "),
            });
        }
        match (*kind, field.as_deref()) {
            (MetricKind::HitRate, None) => Err(MetricError::NoList {
                lists: lists.join(", "),
            }),
            (MetricKind::HitRate, Some(f)) if !lists.iter().any(|l| l == f) => {
                Err(MetricError::UnknownList {
                    field: f.to_string(),
                    lists: lists.join(", "),
                })
            }
            (MetricKind::HitRate, _) | (_, None) => Ok(Self {
                kind: *kind,
                field: field.clone(),
            }),
            (_, Some(f)) => Err(MetricError::TakesNoField {
                base: base.to_string(),
                field: f.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_must_fit_the_format_and_name_a_reference_list() {
        let lists = vec!["entities".to_string()];
        let ok = Metric::parse("hit_rate.entities", Format::TaggedReasoning, &lists).unwrap();
        assert_eq!(ok.field.as_deref(), Some("entities"));
        let bad: [(&str, Format, &[&str]); 5] = [
            ("mean_iou", Format::Count, &["does not fit", "time_ranges"]),
            (
                "hit_rate.knowledge",
                Format::TaggedReasoning,
                &["no list \"knowledge\""],
            ),
            ("hit_rate", Format::ReferenceList, &["hit_rate.FIELD"]),
            ("bleu", Format::OpenText, &["unknown metric"]),
            ("accuracy.x", Format::SingleChoice, &["takes no field"]),
        ];
        for (name, format, wants) in bad {
            let e = Metric::parse(name, format, &lists).unwrap_err().to_string();
            for w in wants {
                assert!(e.contains(w), "{name}: wanted {w:?} in {e}");
            }
        }
    }
}
