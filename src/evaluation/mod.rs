//! `vidcurate evaluate`'s scoring: a model's predictions on a release, scored as RiskCue reports them
//! (§3.4, A.10, A.13; SPEC §10): per domain and overall, positive-class F1, accuracy,
//! specificity, balanced accuracy, MCC and the always-positive ("no-skill") F1; per
//! perturbation variant when the predictions carry one, with the drop from the original order.
//!
//! Every mode scores one split of the release (`split.rs`: the test split by default, `--split
//! all` every split); predictions for videos or items of other splits are counted and left out.
//!
//! Reads: the release's `data/*.parquet` (video_id, the label column, the `--by` column) and a
//! predictions file (CSV, JSONL or Parquet: `video_id`, `prediction`, optional `variant`).
//! Writes: nothing but its report (stdout, or JSON with `--json`). Calls nothing; caches nothing.
//! An unknown video id or label in the predictions is an error naming the line.

pub mod judge;
mod judge_batch;
mod judged;
mod labels;
mod people;
mod people_read;
mod people_report;
pub mod questions;
mod references;
mod rows;
pub mod split;
pub mod tasks;
pub mod variants;

pub use labels::{evaluate, render};

use crate::error::{RunError, io};
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What `evaluate` is asked for (also its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct EvaluateOptions {
    /// Score this split of the release only (its files' split, e.g. test or validation), or
    /// `all` for every split. Default: test when the release has a test split, else every split;
    /// the report's first line says which it scored. Predictions for videos or items of other
    /// splits are counted and left out.
    #[arg(long, value_name = "NAME")]
    pub split: Option<String>,
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
    /// An earlier version of the release: score only the videos (same split and label) and
    /// items (every value the same) both hold, so the score compares with one made on that
    /// version; the rest count as of another split, not scored.
    #[arg(long, value_name = "OLD")]
    pub shared_with: Option<PathBuf>,
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

fn parquet_batches(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    let shown = path.display().to_string();
    let f = std::fs::File::open(path).map_err(io(path))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.build())
        .map_err(|e| RunError::Config(format!("{shown}: {e}")))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Config(format!("{shown}: {e}")))
}

/// The Parquet files of `dir`, in name order.
fn parquet_files(dir: &Path) -> Result<Vec<PathBuf>, RunError> {
    crate::store::parquet_files_in(dir).map_err(io(dir))
}

/// Data file `f`'s error for a batch without column `c`, naming the columns it has.
fn no_column(f: &Path, b: &RecordBatch, c: &str) -> RunError {
    let names: Vec<&str> = b
        .schema_ref()
        .fields()
        .iter()
        .map(|x| x.name().as_str())
        .collect();
    RunError::Config(format!(
        "{}: no column `{c}` (columns: {})",
        f.display(),
        names.join(", ")
    ))
}

/// Row `i`'s `--by` group: its value, "(none)" when null, "" without `--by`.
fn group_at(groups: Option<&arrow::array::StringArray>, i: usize) -> String {
    groups
        .map(|g| {
            if g.is_null(i) {
                "(none)".to_string()
            } else {
                g.value(i).to_string()
            }
        })
        .unwrap_or_default()
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
    let (shown, ext) = rows::shown_and_ext(path);
    match ext.as_str() {
        "csv" => read_csv_rows(path, &shown),
        "jsonl" | "json" => read_jsonl_rows(path, &shown),
        "parquet" => read_parquet_rows(path, &shown),
        other => Err(RunError::Config(format!(
            "{shown}: predictions must be .csv, .jsonl or .parquet, not .{other}"
        ))),
    }
}

/// A predictions file's problem at `at` (a file, or a line of it).
fn bad(at: &str, msg: String) -> RunError {
    RunError::Config(format!("{at}: {msg}"))
}

/// The rows of a CSV predictions file, under its header's columns.
fn read_csv_rows(path: &Path, shown: &str) -> Result<(Vec<Row>, Vec<String>), RunError> {
    let mut out = vec![];
    let (mut rdr, columns) = rows::csv_header(path, shown)?;
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
    Ok((out, columns))
}

/// The rows of a JSONL predictions file; its columns are every key of any line, in order seen.
fn read_jsonl_rows(path: &Path, shown: &str) -> Result<(Vec<Row>, Vec<String>), RunError> {
    let mut out = vec![];
    let mut columns: Vec<String> = vec![];
    let text = std::fs::read_to_string(path).map_err(io(path))?;
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
    Ok((out, columns))
}

/// The rows of a Parquet predictions file, every column read as text.
fn read_parquet_rows(path: &Path, shown: &str) -> Result<(Vec<Row>, Vec<String>), RunError> {
    let mut out = vec![];
    let mut columns: Vec<String> = vec![];
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
    Ok((out, columns))
}

/// Whether a predictions file answers questions (it has `item_id`) rather than labels.
fn answers_questions(path: &Path) -> Result<bool, RunError> {
    // The first row tells: reading a million predictions twice to find out would double the
    // cost of scoring them.
    Ok(rows::peek(path, &["item_id"])?.0.seen[0])
}

/// What `vidcurate evaluate` is asked to score (its arguments, parsed).
pub struct Request<'a> {
    pub release: &'a Path,
    pub predictions: Option<&'a Path>,
    pub variants: &'a [(String, PathBuf)],
    pub rotations_out: Option<&'a Path>,
    pub opts: &'a EvaluateOptions,
}

/// A report as text for people and, where the report has one, as JSON (for `--json`).
pub struct Printed {
    pub text: String,
    pub json: Option<String>,
}

impl Printed {
    fn text(text: String) -> Self {
        Printed { text, json: None }
    }
    fn both<T: Serialize>(r: &T, text: String) -> Self {
        let json = serde_json::to_string_pretty(r).expect("a report serialises");
        Printed {
            text,
            json: Some(json),
        }
    }
}

/// Scores what `r` asks for: rotations to answer, prompt variants, benchmark tasks (judged,
/// priced or handed to people), questions, or labels; which one the predictions file tells.
pub fn score(r: &Request) -> Result<Printed, RunError> {
    let scope = split::Scope::resolve(r.release, r.opts.split.as_deref())?
        .shared_with(r.release, r.opts.shared_with.as_deref())?;
    if let Some(out) = r.rotations_out {
        let (n, scored) = questions::write_rotations(r.release, out, &scope)?;
        return Ok(Printed::text(format!(
            "{}{n} rotated items: {}\n",
            scored.line(),
            out.display()
        )));
    }
    if !r.variants.is_empty() {
        let v = variants::evaluate(r.release, r.variants, &scope)?;
        return Ok(Printed::both(&v, variants::render(&v)));
    }
    let preds = r.predictions.expect("clap requires it");
    let on_tasks = answers_questions(preds)? && tasks::answers_tasks(r.release, preds)?;
    if !on_tasks && (r.opts.people.is_some() || r.opts.people_out.is_some()) {
        return Err(RunError::Config(format!(
            "--people and --people-out compare the judge of benchmark tasks: {} answers no task of {}",
            preds.display(),
            r.release.display()
        )));
    }
    if on_tasks {
        return score_tasks(r, preds, &scope);
    }
    if answers_questions(preds)? {
        let q = questions::evaluate(r.release, preds, r.opts.by.as_deref(), &scope)?;
        Ok(Printed::both(&q, questions::render(&q)))
    } else {
        let e = evaluate(r.release, preds, r.opts, &scope)?;
        Ok(Printed::both(&e, render(&e)))
    }
}

/// Benchmark tasks: a project for people, the judging's price, or the scores (with the
/// judge's agreement with people when their export is given).
fn score_tasks(r: &Request, preds: &Path, scope: &split::Scope) -> Result<Printed, RunError> {
    if let Some(dir) = &r.opts.people_out {
        return Ok(Printed::text(people::write_project(
            r.release, preds, dir, scope,
        )?));
    }
    let judge = match &r.opts.judge {
        Some(f) => {
            let cache = r
                .opts
                .judge_cache
                .clone()
                .unwrap_or_else(|| r.release.join(".judge/responses.sqlite"));
            Some(judge::Judge::load(f, &cache)?)
        }
        None => None,
    };
    if r.opts.dry_run {
        let j = judge.as_ref().ok_or_else(|| {
            RunError::Config("--dry-run prices the judging: give --judge FILE".into())
        })?;
        let (d, scored) = tasks::dry_run(r.release, preds, j, scope)?;
        return Ok(Printed::text(format!(
            "{}judge {} on {}: {} calls, {} answered by the cache, {} to make ({} requests at most): {} input and {} output tokens at most, ${:.4}{}\n",
            scored.line(),
            j.settings.model,
            j.settings.service,
            d.calls,
            d.cached,
            d.calls - d.cached,
            d.requests_at_most,
            d.tokens_in,
            d.tokens_out,
            d.usd,
            if j.batched() { " at batch prices" } else { "" }
        )));
    }
    let mut t = tasks::evaluate(
        r.release,
        preds,
        &tasks::TaskOptions {
            by: r.opts.by.as_deref(),
            items_out: r.opts.items_out.as_deref(),
            judge: judge.as_ref(),
            scope,
        },
    )?;
    if let Some(export) = &r.opts.people {
        people_read::compare(r.release, preds, export, &mut t, scope)?;
    }
    Ok(Printed::both(&t, tasks::render(&t)))
}
