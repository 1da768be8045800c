//! `vidcurate evaluate`: a model's predictions on a release, scored as RiskCue reports them
//! (§3.4, A.10, A.13; SPEC §10): per domain and overall, positive-class F1, accuracy,
//! specificity, balanced accuracy, MCC and the always-positive ("no-skill") F1; per
//! perturbation variant when the predictions carry one, with the drop from the original order.
//!
//! Reads: the release's `data/*.parquet` (video_id, the label column, the `--by` column) and a
//! predictions file (CSV, JSONL or Parquet: `video_id`, `prediction`, optional `variant`).
//! Writes: nothing but its report (stdout, or JSON with `--json`). Calls nothing; caches nothing.
//! An unknown video id or label in the predictions is an error naming the line.

pub mod judge;
mod judge_batch;
mod judged;
mod people;
mod people_read;
pub mod questions;
mod references;
mod rows;
pub mod tasks;
pub mod variants;

use crate::error::RunError;
use crate::store::shards::text_column;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// What `evaluate` is asked for (also its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct EvaluateOptions {
    /// Group the metrics by this release column too (e.g. domain).
    #[arg(long)]
    pub by: Option<String>,
    /// The release column with the true label.
    #[arg(long, default_value = "label")]
    pub label: String,
    /// The label value of the positive class (risk = yes; for fake-news data, fake).
    #[arg(long, default_value = "yes")]
    pub positive: String,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the histogram of the annotated risk-signal lengths per group to this PNG.
    #[arg(long)]
    pub lengths_plot: Option<PathBuf>,
    /// Benchmark tasks: score the judged metrics (hit rates, 0–5 ratings) with the judge this
    /// file names (`[services.<name>]` and `[judge]`: service, model, samples, temperature).
    /// A service with `mode = "batch"` sends the uncached judgments as batches (queued beside
    /// the judge cache, in batches/) and waits for them; "offline" is refused.
    #[arg(long)]
    pub judge: Option<PathBuf>,
    /// The judge's response cache (default: <release>/.judge/responses.sqlite): a judgment is
    /// paid for once, for every model whose answer asks it again.
    #[arg(long)]
    pub judge_cache: Option<PathBuf>,
    /// With --judge: print the calls the judging would make, those cached, and their price; call
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Benchmark tasks: also write each item's score to this JSONL file (task, item, video, how
    /// the answer was read and as what, the metric values), for error analysis.
    #[arg(long)]
    pub items_out: Option<PathBuf>,
    /// Benchmark tasks: write a Label Studio project into this folder for people to make the
    /// judge's judgments on the same answers (label_config.xml, tasks.json: one task per item
    /// and model whose answer the judge judges; hit / miss per reference element, 0–5 per
    /// rating), and stop: no judge call. Create a project with the config, import the tasks,
    /// let two or more people judge each, export JSON, then give it back with --people.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["people", "dry_run"])]
    pub people_out: Option<PathBuf>,
    /// With --judge: a Label Studio JSON export of the --people-out project. Prints, per judged
    /// metric, the judge's agreement with people (Cohen's kappa on hit / miss, Krippendorff's
    /// alpha interval on 0–5): with each person, with their majority / mean, and theirs among
    /// themselves, on the judgments compared; bad annotations are named and kept out.
    #[arg(
        long,
        value_name = "EXPORT.json",
        requires = "judge",
        conflicts_with = "dry_run"
    )]
    pub people: Option<PathBuf>,
}

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
    /// variant → group → metrics ("all" is every video; groups are values of `--by`).
    pub metrics: BTreeMap<String, BTreeMap<String, Metrics>>,
    /// variant → drop of F1 from the original order, overall.
    pub f1_drop: BTreeMap<String, f64>,
    pub positive: String,
    pub by: Option<String>,
    /// group -> risk-signal lengths from the release's annotation columns ("all" too).
    pub signal_lengths: BTreeMap<String, SignalLengths>,
}

fn parquet_batches(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    let shown = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| RunError::io(shown.clone(), e))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.build())
        .map_err(|e| RunError::Config(format!("{shown}: {e}")))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Config(format!("{shown}: {e}")))
}

/// video → (label, group) from the release's data files.
type Truth = (
    HashMap<String, (String, String)>,
    BTreeMap<String, Vec<f64>>,
);

/// video -> (label, group), and group -> annotated risk-signal lengths.
fn release_truth(release: &Path, opts: &EvaluateOptions) -> Result<Truth, RunError> {
    let dir = release.join("data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| RunError::Config(format!("{}: {e} (not a release folder?)", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    let mut out = HashMap::new();
    let mut lengths: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for f in files {
        for b in parquet_batches(&f)? {
            let span = (
                number(&b, "annotation_risk_signal_start"),
                number(&b, "annotation_risk_signal_end"),
            );
            let missing = |c: &str| {
                RunError::Config(format!(
                    "{}: no column `{c}` (columns: {})",
                    f.display(),
                    b.schema()
                        .fields()
                        .iter()
                        .map(|x| x.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            };
            let ids = text_column(&b, "video_id").ok_or_else(|| missing("video_id"))?;
            let labels = text_column(&b, &opts.label).ok_or_else(|| missing(&opts.label))?;
            let groups = match &opts.by {
                Some(c) => Some(text_column(&b, c).ok_or_else(|| missing(c))?),
                None => None,
            };
            for i in 0..b.num_rows() {
                let g = groups
                    .as_ref()
                    .map(|g| {
                        if g.is_null(i) {
                            "(none)".to_string()
                        } else {
                            g.value(i).to_string()
                        }
                    })
                    .unwrap_or_default();
                if let (Some(s), Some(e)) = &span
                    && !s.is_null(i)
                    && !e.is_null(i)
                {
                    let len = e.value(i) - s.value(i);
                    lengths.entry("all".into()).or_default().push(len);
                    if opts.by.is_some() {
                        lengths.entry(g.clone()).or_default().push(len);
                    }
                }
                out.insert(ids.value(i).to_string(), (labels.value(i).to_string(), g));
            }
        }
    }
    Ok((out, lengths))
}

fn number(batch: &RecordBatch, name: &str) -> Option<arrow::array::Float64Array> {
    let col = batch.column_by_name(name)?;
    let cast = arrow::compute::cast(col, &DataType::Float64).ok()?;
    cast.as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .cloned()
}

/// One row of a predictions file: where it was read (`FILE:LINE`, or `FILE: row N`) and its
/// fields as text (a missing or null field is absent).
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) at: String,
    pub(crate) fields: HashMap<String, String>,
}

impl Row {
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }
}

/// A predictions file (CSV with a header, JSONL, or Parquet) as rows of text fields, and the
/// columns it has. Values are trimmed.
pub(crate) fn read_rows(path: &Path) -> Result<(Vec<Row>, Vec<String>), RunError> {
    let shown = path.display().to_string();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bad = |at: &str, msg: String| RunError::Config(format!("{at}: {msg}"));
    let mut out = vec![];
    let mut columns: Vec<String> = vec![];
    match ext.as_str() {
        "csv" => {
            let mut rdr = csv::Reader::from_path(path).map_err(|e| bad(&shown, e.to_string()))?;
            let headers = rdr
                .headers()
                .map_err(|e| bad(&shown, e.to_string()))?
                .clone();
            columns = headers.iter().map(|h| h.trim().to_string()).collect();
            for (n, r) in rdr.records().enumerate() {
                let at = format!("{shown}:{}", n + 2);
                let r = r.map_err(|e| bad(&at, e.to_string()))?;
                let fields = columns
                    .iter()
                    .zip(r.iter())
                    .map(|(k, v)| (k.clone(), v.trim().to_string()))
                    .collect();
                out.push(Row { at, fields });
            }
        }
        "jsonl" | "json" => {
            let text = std::fs::read_to_string(path).map_err(|e| RunError::io(shown.clone(), e))?;
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let at = format!("{shown}:{}", n + 1);
                let v: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| bad(&at, e.to_string()))?;
                let Some(obj) = v.as_object() else {
                    return Err(bad(&at, "not a JSON object".into()));
                };
                let mut fields = HashMap::new();
                for (k, v) in obj {
                    if !columns.contains(k) {
                        columns.push(k.clone());
                    }
                    match v {
                        serde_json::Value::Null => {}
                        serde_json::Value::String(s) => {
                            fields.insert(k.clone(), s.trim().to_string());
                        }
                        other => {
                            fields.insert(k.clone(), other.to_string());
                        }
                    }
                }
                out.push(Row { at, fields });
            }
        }
        "parquet" => {
            let mut row = 0;
            for b in parquet_batches(path)? {
                let cols: Vec<(String, arrow::array::ArrayRef)> = b
                    .schema()
                    .fields()
                    .iter()
                    .zip(b.columns())
                    .filter_map(|(f, c)| {
                        let s = arrow::compute::cast(c, &DataType::Utf8).ok()?;
                        Some((f.name().clone(), s))
                    })
                    .collect();
                for (name, _) in &cols {
                    if !columns.contains(name) {
                        columns.push(name.clone());
                    }
                }
                for i in 0..b.num_rows() {
                    row += 1;
                    let mut fields = HashMap::new();
                    for (name, c) in &cols {
                        let c = c
                            .as_any()
                            .downcast_ref::<arrow::array::StringArray>()
                            .expect("cast to Utf8");
                        if !c.is_null(i) {
                            fields.insert(name.clone(), c.value(i).trim().to_string());
                        }
                    }
                    out.push(Row {
                        at: format!("{shown}: row {row}"),
                        fields,
                    });
                }
            }
        }
        other => {
            return Err(RunError::Config(format!(
                "{shown}: predictions must be .csv, .jsonl or .parquet, not .{other}"
            )));
        }
    }
    Ok((out, columns))
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

/// Scores `predictions` against the release's labels.
pub fn evaluate(
    release: &Path,
    predictions: &Path,
    opts: &EvaluateOptions,
) -> Result<Report, RunError> {
    let (truth, lengths) = release_truth(release, opts)?;
    let labels: std::collections::BTreeSet<&str> =
        truth.values().map(|(l, _)| l.as_str()).collect();
    if !labels.contains(opts.positive.as_str()) {
        return Err(RunError::Config(format!(
            "--positive {:?} is not a value of the release's `{}` column (values: {})",
            opts.positive,
            opts.label,
            labels.iter().copied().collect::<Vec<_>>().join(", ")
        )));
    }
    let mut cells: BTreeMap<String, BTreeMap<String, Confusion>> = BTreeMap::new();
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    for p in read_predictions(predictions)? {
        let Some((label, group)) = truth.get(&p.video_id) else {
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
    let metrics: BTreeMap<String, BTreeMap<String, Metrics>> = cells
        .iter()
        .map(|(v, g)| {
            (
                v.clone(),
                g.iter().map(|(k, c)| (k.clone(), c.metrics())).collect(),
            )
        })
        .collect();
    let base = metrics
        .get("original")
        .and_then(|g| g.get("all"))
        .map(|m| m.f1);
    let f1_drop = match base {
        Some(b) => metrics
            .iter()
            .filter(|(v, _)| *v != "original")
            .filter_map(|(v, g)| Some((v.clone(), b - g.get("all")?.f1)))
            .collect(),
        None => BTreeMap::new(),
    };
    let signal_lengths: BTreeMap<String, SignalLengths> = lengths
        .into_iter()
        .filter_map(|(g, v)| Some((g, SignalLengths::of(v)?)))
        .collect();
    if let Some(png) = &opts.lengths_plot {
        lengths_plot(png, &signal_lengths)?;
    }
    Ok(Report {
        metrics,
        f1_drop,
        positive: opts.positive.clone(),
        by: opts.by.clone(),
        signal_lengths,
    })
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
    crate::report::plot::bars(png, "risk-signal length", &rows, &groups, &sizes, None)
        .map_err(|e| RunError::Internal(format!("{}: {e}", png.display())))
}

/// The report as a table: one line per variant and group, then the signal lengths.
pub fn render(r: &Report) -> String {
    let mut s = metrics_table(r);
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

/// Score a model's predictions on a release.
///
/// Labels (a predictions file with `video_id`, `prediction`, optional `variant`): RiskCue's
/// metrics per domain and overall, and per perturbation variant.
///
/// Questions (a predictions file with `item_id` and `prediction` or `answer`, the model's raw
/// answer; optional `rotation`): accuracy per level, the macro average over levels
/// (HarmVideoBench's headline), the micro average, random chance and the blind baseline, with
/// standard errors clustered by video. Answers are parsed from "B", "(B)", "Answer: b", "The
/// answer is B because…", "答案：B" or the option's own text; an answer that names no option, or
/// an item without one, counts as wrong and is listed, never dropped from the denominator.
///
/// Benchmark tasks (a release with `tasks/`, MVFNDB's ten; `item_id` and `prediction`): each
/// answer read by its task's format, then per task and category, and per `--by` value: single
/// choice accuracy; multiple choice exact-set accuracy and mean Jaccard; count |predicted −
/// reference|; time ranges IoU of the union of the predicted ranges with the union of the
/// reference ranges (overlaps merged, order free); ROUGE-L F-measure as the rouge-score package
/// computes it on English (lower case, ASCII letters and digits, no stemming), each CJK character
/// a token (rouge-score drops them); tagged reasoning the <result> label's accuracy and Macro-F1,
/// ROUGE-L of the <think> part. An answer the format cannot read (no option, a word or a negative
/// number for a count, a reversed range, no <result> tag) is wrong, stays in the denominator
/// (a count read as 0) and is counted by reason; so is a missing one. Judged metrics (hit rates,
/// factual consistency, theme relevance, completeness) are listed as not scored. An unknown or
/// repeated item_id exits 2 at its line. `--items-out FILE.jsonl`: every item's reading and
/// values.
///
/// The judge against people: `--judge FILE --people-out DIR` writes a Label Studio project in
/// which people make the judge's judgments on the same answers (hit / miss for each reference
/// element, 0–5 for each rating); have two or more people judge it, export it as JSON, and
/// `--judge FILE --people EXPORT.json` prints, per judged metric, the judge's agreement with
/// each person, with their majority (hit / miss) or mean (ratings) and theirs among themselves,
/// beside the judge's agreement with itself.
///
/// CircularEval: `--rotations-out FILE.jsonl` writes every item once per rotation r = 0..n-1
/// (letter i shows option (i + r) mod n; the answer left out). Have the model answer each line
/// and give the answers back with their `item_id` and `rotation`: an item then counts only if
/// every rotation is answered right.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate evaluate data/releases/riskcue preds.csv --by domain\n  vidcurate evaluate data/releases/demo preds.jsonl --positive fake --json\n  vidcurate evaluate data/releases/harmvideo answers.csv --by language\n  vidcurate evaluate data/releases/harmvideo --rotations-out rotations.jsonl\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --by label --items-out scored.jsonl\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --judge judge.toml --people-out judging/\n  (a Label Studio project: judging/label_config.xml, judging/tasks.json; people judge it, export JSON)\n  vidcurate evaluate data/releases/mvfndb answers.jsonl --judge judge.toml --people export.json"
)]
pub struct Args {
    /// A release folder (vidcurate release --out).
    pub release: PathBuf,
    /// The predictions file (.csv, .jsonl or .parquet); not needed with --rotations-out or
    /// --variant.
    #[arg(required_unless_present_any = ["rotations_out", "variant"])]
    pub predictions: Option<PathBuf>,
    /// Benchmark tasks: a prompt variant's predictions, NAME=FILE (repeatable; the first is the
    /// baseline): the final decision's ACC and Macro-F1 per variant and model (a `model` column
    /// may hold several), as MVFNDB's Table 4, with paired differences and standard errors.
    #[arg(long, value_name = "NAME=FILE", value_parser = variants::parse_variant)]
    pub variant: Vec<(String, PathBuf)>,
    /// Write the questions' rotated variants (JSONL) to answer for CircularEval, and stop.
    #[arg(long)]
    pub rotations_out: Option<PathBuf>,
    #[command(flatten)]
    pub opts: EvaluateOptions,
}

/// Whether a predictions file answers questions (it has `item_id`) rather than labels.
fn answers_questions(path: &Path) -> Result<bool, RunError> {
    // The first row tells: reading a million predictions twice to find out would double the
    // cost of scoring them.
    Ok(rows::peek(path, &["item_id"])?.0.seen[0])
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    if let Some(out) = &a.rotations_out {
        let n = questions::write_rotations(&a.release, out)?;
        println!("{n} rotated items: {}", out.display());
        return Ok(crate::error::Exit::Done);
    }
    if !a.variant.is_empty() {
        let r = variants::evaluate(&a.release, &a.variant)?;
        if a.opts.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&r).expect("a report serialises")
            );
        } else {
            print!("{}", variants::render(&r));
        }
        return Ok(crate::error::Exit::Done);
    }
    let preds = a.predictions.as_deref().expect("clap requires it");
    let print = |json: String, text: String| {
        if a.opts.json {
            println!("{json}");
        } else {
            print!("{text}");
        }
    };
    let on_tasks = answers_questions(preds)? && tasks::answers_tasks(&a.release, preds)?;
    if !on_tasks && (a.opts.people.is_some() || a.opts.people_out.is_some()) {
        return Err(RunError::Config(format!(
            "--people and --people-out compare the judge of benchmark tasks: {} answers no task of {}",
            preds.display(),
            a.release.display()
        )));
    }
    if let (true, Some(dir)) = (on_tasks, &a.opts.people_out) {
        print!("{}", people::write_project(&a.release, preds, dir)?);
        return Ok(crate::error::Exit::Done);
    }
    if on_tasks {
        let judge = match &a.opts.judge {
            Some(f) => {
                let cache = a
                    .opts
                    .judge_cache
                    .clone()
                    .unwrap_or_else(|| a.release.join(".judge/responses.sqlite"));
                Some(judge::Judge::load(f, &cache)?)
            }
            None => None,
        };
        if a.opts.dry_run {
            let j = judge.as_ref().ok_or_else(|| {
                RunError::Config("--dry-run prices the judging: give --judge FILE".into())
            })?;
            let d = tasks::dry_run(&a.release, preds, j)?;
            println!(
                "judge {} on {}: {} calls, {} answered by the cache, {} to make: {} input and {} output tokens at most, ${:.4}{}",
                j.settings.model,
                j.settings.service,
                d.calls,
                d.cached,
                d.calls - d.cached,
                d.tokens_in,
                d.tokens_out,
                d.usd,
                if j.batched() { " at batch prices" } else { "" }
            );
            return Ok(crate::error::Exit::Done);
        }
        let mut r = tasks::evaluate(
            &a.release,
            preds,
            &tasks::TaskOptions {
                by: a.opts.by.as_deref(),
                items_out: a.opts.items_out.as_deref(),
                judge: judge.as_ref(),
            },
        )?;
        if let Some(export) = &a.opts.people {
            people_read::compare(&a.release, preds, export, &mut r)?;
        }
        let json = serde_json::to_string_pretty(&r).expect("a report serialises");
        print(json, tasks::render(&r));
    } else if answers_questions(preds)? {
        let r = questions::evaluate(&a.release, preds, a.opts.by.as_deref())?;
        let json = serde_json::to_string_pretty(&r).expect("a report serialises");
        print(json, questions::render(&r));
    } else {
        let r = evaluate(&a.release, preds, &a.opts)?;
        let json = serde_json::to_string_pretty(&r).expect("a report serialises");
        print(json, render(&r));
    }
    Ok(crate::error::Exit::Done)
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
