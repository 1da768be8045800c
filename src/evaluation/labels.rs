//! The label metrics of `evaluate` (the module's doc): per variant and group, the confusion
//! matrix's F1, accuracy, specificity, balanced accuracy, MCC and no-skill F1, and the lengths
//! of the annotated risk signals.

use super::split::{Scope, SplitScored};
use super::{EvaluateOptions, group_at, no_column, number, parquet_batches, read_rows};
use crate::error::RunError;
use crate::store::shards::text_column;
use arrow::array::{Array, RecordBatch};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

/// Lengths of the annotated risk signals (end - start, seconds) of one group.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SignalLengths {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Videos per 1-second bin, from 0 s.
    pub histogram: Vec<u64>,
}

impl SignalLengths {
    pub fn of(mut v: Vec<f64>) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let mut histogram = vec![0u64; v[n - 1].max(0.0).floor() as usize + 1];
        for x in &v {
            histogram[x.max(0.0).floor() as usize] += 1;
        }
        Some(Self {
            n,
            mean: v.iter().sum::<f64>() / n as f64,
            median,
            histogram,
        })
    }
}

/// Counts of one confusion matrix (positive = the `--positive` label).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Confusion {
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    pub r#fn: u64,
}

/// The metrics of one group; a ratio with a zero denominator is 0 (as scikit-learn's
/// `zero_division=0`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Metrics {
    pub n: u64,
    pub f1: f64,
    pub accuracy: f64,
    pub specificity: f64,
    pub balanced_accuracy: f64,
    pub mcc: f64,
    /// F1 of predicting positive for every video.
    pub no_skill_f1: f64,
    pub confusion: Confusion,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

impl Confusion {
    pub fn add(&mut self, truth: bool, predicted: bool) {
        match (truth, predicted) {
            (true, true) => self.tp += 1,
            (false, true) => self.fp += 1,
            (false, false) => self.tn += 1,
            (true, false) => self.r#fn += 1,
        }
    }

    pub fn metrics(&self) -> Metrics {
        let (tp, fp, tn, fn_) = (
            self.tp as f64,
            self.fp as f64,
            self.tn as f64,
            self.r#fn as f64,
        );
        let n = tp + fp + tn + fn_;
        let recall = ratio(tp, tp + fn_);
        let specificity = ratio(tn, tn + fp);
        let pos = tp + fn_;
        let mcc_den = ((tp + fp) * (tp + fn_) * (tn + fp) * (tn + fn_)).sqrt();
        Metrics {
            n: n as u64,
            f1: ratio(2.0 * tp, 2.0 * tp + fp + fn_),
            accuracy: ratio(tp + tn, n),
            specificity,
            // scikit-learn's balanced accuracy: the mean recall of the classes present.
            balanced_accuracy: match (pos > 0.0, tn + fp > 0.0) {
                (true, true) => (recall + specificity) / 2.0,
                (true, false) => recall,
                (false, true) => specificity,
                (false, false) => 0.0,
            },
            mcc: ratio(tp * tn - fp * fn_, mcc_den),
            no_skill_f1: ratio(2.0 * pos, 2.0 * pos + (n - pos)),
            confusion: *self,
        }
    }
}

/// One prediction, with where it was read (for messages).
#[derive(Debug, Clone)]
struct Prediction {
    at: String,
    video_id: String,
    prediction: String,
    variant: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// The split scored.
    pub split: SplitScored,
    /// variant → group → metrics ("all" is every video; groups are values of `--by`).
    pub metrics: BTreeMap<String, BTreeMap<String, Metrics>>,
    /// variant → drop of F1 from the original order, overall.
    pub f1_drop: BTreeMap<String, f64>,
    pub positive: String,
    pub by: Option<String>,
    /// group -> risk-signal lengths from the release's annotation columns ("all" too).
    pub signal_lengths: BTreeMap<String, SignalLengths>,
}

/// The release's videos as scoring reads them from its data files.
#[derive(Default)]
struct Truth {
    /// video → (label, group) of the split scored.
    videos: HashMap<String, (String, String)>,
    /// group → the annotated risk-signal lengths of the split scored.
    lengths: BTreeMap<String, Vec<f64>>,
    /// Every label of the release (any split): what a prediction may say.
    labels: BTreeSet<String>,
    /// Videos of the splits not scored.
    others: HashSet<String>,
}

/// The release's videos: those of the split `scope` scores with their label and group, the
/// others by id.
fn release_truth(release: &Path, opts: &EvaluateOptions, scope: &Scope) -> Result<Truth, RunError> {
    let dir = release.join("data");
    let files = crate::store::parquet_files_in(&dir)
        .map_err(|e| RunError::Config(format!("{}: {e} (not a release folder?)", dir.display())))?;
    let mut truth = Truth::default();
    for f in files {
        let kept = scope.keeps(&f);
        for b in parquet_batches(&f)? {
            batch_truth(&b, &f, opts, (kept, scope), &mut truth)?;
        }
    }
    Ok(truth)
}

/// One batch of data file `f` into `truth`: its videos scored when `kept`, else only named.
fn batch_truth(
    b: &RecordBatch,
    f: &Path,
    opts: &EvaluateOptions,
    (kept, scope): (bool, &Scope),
    truth: &mut Truth,
) -> Result<(), RunError> {
    let span = (
        number(b, "annotation_risk_signal_start"),
        number(b, "annotation_risk_signal_end"),
    );
    let missing = |c: &str| no_column(f, b, c);
    let ids = text_column(b, "video_id").ok_or_else(|| missing("video_id"))?;
    let labels = text_column(b, &opts.label).ok_or_else(|| missing(&opts.label))?;
    let groups = match &opts.by {
        Some(c) => Some(text_column(b, c).ok_or_else(|| missing(c))?),
        None => None,
    };
    for i in 0..b.num_rows() {
        truth.labels.insert(labels.value(i).to_string());
        if !kept || !scope.shares_video(ids.value(i)) {
            truth.others.insert(ids.value(i).to_string());
            continue;
        }
        let g = group_at(groups.as_ref(), i);
        if let (Some(s), Some(e)) = &span
            && !s.is_null(i)
            && !e.is_null(i)
        {
            let len = e.value(i) - s.value(i);
            truth.lengths.entry("all".into()).or_default().push(len);
            if opts.by.is_some() {
                truth.lengths.entry(g.clone()).or_default().push(len);
            }
        }
        truth
            .videos
            .insert(ids.value(i).to_string(), (labels.value(i).to_string(), g));
    }
    Ok(())
}

/// The label predictions of a predictions file: `video_id`, `prediction`, optional `variant`.
fn read_predictions(path: &Path) -> Result<Vec<Prediction>, RunError> {
    let (rows, columns) = read_rows(path)?;
    for need in ["video_id", "prediction"] {
        if !columns.iter().any(|c| c == need) {
            return Err(RunError::Config(format!(
                "{}:1: needs columns video_id and prediction (has: {})",
                path.display(),
                columns.join(", ")
            )));
        }
    }
    let mut out = vec![];
    for r in rows {
        let field = |k: &str| {
            r.get(k)
                .map(str::to_string)
                .ok_or_else(|| RunError::Config(format!("{}: no {k}", r.at)))
        };
        out.push(Prediction {
            video_id: field("video_id")?,
            prediction: field("prediction")?,
            variant: r
                .get("variant")
                .filter(|v| !v.is_empty())
                .unwrap_or("original")
                .to_string(),
            at: r.at.clone(),
        });
    }
    Ok(out)
}

/// Scores `predictions` against the labels of the split `scope` scores; predictions of videos
/// of other splits are counted and left out.
pub fn evaluate(
    release: &Path,
    predictions: &Path,
    opts: &EvaluateOptions,
    scope: &Scope,
) -> Result<Report, RunError> {
    let truth = release_truth(release, opts, scope)?;
    let labels: BTreeSet<&str> = truth.labels.iter().map(String::as_str).collect();
    if !labels.contains(opts.positive.as_str()) {
        return Err(RunError::Config(format!(
            "--positive {:?} is not a value of the release's `{}` column (values: {})",
            opts.positive,
            opts.label,
            labels.iter().copied().collect::<Vec<_>>().join(", ")
        )));
    }
    let (cells, other) = confusions(&truth, &labels, predictions, opts)?;
    let metrics: BTreeMap<String, BTreeMap<String, Metrics>> = cells
        .iter()
        .map(|(v, g)| {
            (
                v.clone(),
                g.iter().map(|(k, c)| (k.clone(), c.metrics())).collect(),
            )
        })
        .collect();
    let f1_drop = f1_drops(&metrics);
    let signal_lengths: BTreeMap<String, SignalLengths> = truth
        .lengths
        .into_iter()
        .filter_map(|(g, v)| Some((g, SignalLengths::of(v)?)))
        .collect();
    if let Some(png) = &opts.lengths_plot {
        lengths_plot(png, &signal_lengths)?;
    }
    let total = truth.videos.len() + truth.others.len();
    Ok(Report {
        split: scope.scored("videos", truth.videos.len(), total, other),
        metrics,
        f1_drop,
        positive: opts.positive.clone(),
        by: opts.by.clone(),
        signal_lengths,
    })
}

/// variant → group → confusion matrix.
type Cells = BTreeMap<String, BTreeMap<String, Confusion>>;

/// variant → group → confusion matrix of the predictions, and how many predictions were of
/// videos of other splits; an unknown video or label, or a second prediction for a video, is
/// an error naming its line.
fn confusions(
    truth: &Truth,
    labels: &BTreeSet<&str>,
    predictions: &Path,
    opts: &EvaluateOptions,
) -> Result<(Cells, usize), RunError> {
    let mut cells: Cells = BTreeMap::new();
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    let mut other = 0;
    for p in read_predictions(predictions)? {
        let Some((label, group)) = truth.videos.get(&p.video_id) else {
            if truth.others.contains(&p.video_id) {
                other += 1;
                continue;
            }
            return Err(RunError::Config(format!(
                "{}: video_id {:?} is not in the release",
                p.at, p.video_id
            )));
        };
        if !labels.contains(p.prediction.as_str()) {
            return Err(RunError::Config(format!(
                "{}: prediction {:?} is not a label of the release (labels: {})",
                p.at,
                p.prediction,
                labels.iter().copied().collect::<Vec<_>>().join(", ")
            )));
        }
        if let Some(first) = seen.insert((p.variant.clone(), p.video_id.clone()), p.at.clone()) {
            return Err(RunError::Config(format!(
                "{}: a second prediction for {:?} ({}), first at {first}",
                p.at, p.video_id, p.variant
            )));
        }
        let (t, y) = (*label == opts.positive, p.prediction == opts.positive);
        let v = cells.entry(p.variant.clone()).or_default();
        v.entry("all".into()).or_default().add(t, y);
        if opts.by.is_some() {
            v.entry(group.clone()).or_default().add(t, y);
        }
    }
    Ok((cells, other))
}

/// variant → drop of its overall F1 from the original order's (none without an original).
fn f1_drops(metrics: &BTreeMap<String, BTreeMap<String, Metrics>>) -> BTreeMap<String, f64> {
    let base = metrics
        .get("original")
        .and_then(|g| g.get("all"))
        .map(|m| m.f1);
    match base {
        Some(b) => metrics
            .iter()
            .filter(|(v, _)| *v != "original")
            .filter_map(|(v, g)| Some((v.clone(), b - g.get("all")?.f1)))
            .collect(),
        None => BTreeMap::new(),
    }
}

/// The histogram of risk-signal lengths per group (1-second bins), drawn as the analyses are.
fn lengths_plot(png: &Path, lengths: &BTreeMap<String, SignalLengths>) -> Result<(), RunError> {
    use crate::report::DistRow;
    let groups: Vec<String> = lengths
        .keys()
        .filter(|g| lengths.len() == 1 || *g != "all")
        .cloned()
        .collect();
    let bins = lengths
        .values()
        .map(|l| l.histogram.len())
        .max()
        .unwrap_or(0);
    let mut rows = vec![];
    for g in &groups {
        let l = &lengths[g];
        for b in 0..bins {
            let count = l.histogram.get(b).copied().unwrap_or(0) as f64;
            rows.push(DistRow {
                group: g.clone(),
                bin: b as u32,
                lo: b as f64,
                hi: b as f64 + 1.0,
                label: format!("{b}-{} s", b + 1),
                count,
                share: count / l.n as f64,
            });
        }
    }
    let sizes = groups.iter().map(|g| (g.clone(), lengths[g].n)).collect();
    let b = crate::report::plot::Bars {
        title: "risk-signal length",
        rows: &rows,
        groups: &groups,
        sizes: &sizes,
        marker: None,
    };
    crate::report::plot::bars(png, &b)
        .map_err(|e| RunError::Internal(format!("{}: {e}", png.display())))
}

/// The report as a table: one line per variant and group, then the signal lengths.
pub fn render(r: &Report) -> String {
    let mut s = r.split.line();
    s += &metrics_table(r);
    if !r.signal_lengths.is_empty() {
        s += "\nannotated risk-signal length (s):\n";
        for (g, l) in &r.signal_lengths {
            s += &format!(
                "{g:<16} n {:>5}  mean {:>6.2}  median {:>6.2}\n",
                l.n, l.mean, l.median
            );
        }
    }
    s
}

fn metrics_table(r: &Report) -> String {
    let mut s = format!(
        "{:<16} {:<16} {:>6} {:>7} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}\n",
        "variant",
        "group",
        "n",
        "F1",
        "accuracy",
        "specif.",
        "bal.acc",
        "MCC",
        "no-skill",
        "F1 drop"
    );
    for (v, groups) in &r.metrics {
        for (g, m) in groups {
            let drop = match (g.as_str(), r.f1_drop.get(v)) {
                ("all", Some(d)) => format!("{d:.3}"),
                _ => String::new(),
            };
            s += &format!(
                "{:<16} {:<16} {:>6} {:>7.3} {:>8.3} {:>8.3} {:>8.3} {:>7.3} {:>8.3} {:>8}\n",
                v,
                g,
                m.n,
                m.f1,
                m.accuracy,
                m.specificity,
                m.balanced_accuracy,
                m.mcc,
                m.no_skill_f1,
                drop
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confusion(tp: u64, fp: u64, tn: u64, fn_: u64) -> Confusion {
        Confusion {
            tp,
            fp,
            tn,
            r#fn: fn_,
        }
    }

    #[test]
    fn metrics_of_known_matrices() {
        let m = confusion(6, 2, 10, 2).metrics();
        assert_eq!(m.n, 20);
        assert!((m.f1 - 0.75).abs() < 1e-12);
        assert!((m.accuracy - 0.8).abs() < 1e-12);
        assert!((m.specificity - 10.0 / 12.0).abs() < 1e-12);
        assert!((m.balanced_accuracy - (0.75 + 10.0 / 12.0) / 2.0).abs() < 1e-12);
        let mcc = (60.0 - 4.0) / (8.0f64 * 8.0 * 12.0 * 12.0).sqrt();
        assert!((m.mcc - mcc).abs() < 1e-12);
        // 8 positives of 20: always-positive precision 0.4, recall 1.
        assert!((m.no_skill_f1 - 2.0 * 0.4 / 1.4).abs() < 1e-12);
        // Degenerate: no positive predicted and none true.
        let z = confusion(0, 0, 5, 0).metrics();
        assert_eq!((z.f1, z.mcc, z.no_skill_f1), (0.0, 0.0, 0.0));
        assert_eq!(z.balanced_accuracy, 1.0);
    }

    #[test]
    fn signal_length_statistics() {
        let l = SignalLengths::of(vec![2.5, 0.5, 1.0, 4.0]).unwrap();
        assert_eq!((l.n, l.mean, l.median), (4, 2.0, 1.75));
        assert_eq!(l.histogram, vec![1, 1, 1, 0, 1]);
        assert!(SignalLengths::of(vec![]).is_none());
    }
}
