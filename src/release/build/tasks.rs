//! The task configs of a release: one config per `items` stage (MVFNDB's ten tasks), named by
//! its task, with the kept items of the released videos in the split of their video and the
//! reference in the columns of the task's format (`Format::reference_columns`). Loadable with
//! `load_dataset(DIR, "kep")`.
//!
//! Reads the items tables under their current fingerprints, the pipeline file as run (for each
//! stage's task file) and the task files themselves, which must still have the fingerprint the
//! items were made with. Writes `tasks/<task>/<split>-00000-of-00001.parquet` and
//! `tasks/tasks.json` (what each task is: category, targets, format, metrics, question,
//! options, labels; what `evaluate` scores by). Calls nothing.

use super::write_parquet;
use crate::benchmark::review::tasks::{
    TaskReview, TaskShares, read_task_report, read_task_reviews,
};
use crate::benchmark::task::Task;
use crate::error::RunError;
use crate::record::BenchItem;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

/// What a released task is, as `tasks/tasks.json` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskInfo {
    /// The config's name (the task's).
    pub name: String,
    pub stage: String,
    pub title: String,
    pub category: String,
    pub targets: Vec<String>,
    pub format: String,
    pub metrics: Vec<String>,
    pub question: String,
    pub options: Vec<String>,
    pub labels: Vec<String>,
    /// drafted, derived or people.
    pub reference: String,
    pub fingerprint: String,
}

/// What the card says of one task config.
#[derive(Debug, Clone)]
pub struct TaskWritten {
    pub info: TaskInfo,
    pub schema: Option<Arc<Schema>>,
    /// split → (items, Arrow bytes)
    pub sizes: Vec<(String, usize, usize)>,
    /// Released items whose reference people must still confirm (SAC's shot counts).
    pub for_review: usize,
    /// The judges of the drafted items.
    pub judges: BTreeSet<String>,
    /// What people made of the task's items (`annotate import` of a task review), and the
    /// kept items left out for want of a decision; none when they were not reviewed.
    pub review: Option<TaskShares>,
    pub unreviewed: usize,
}

/// The released columns of every task, in this order, around the format's reference columns.
const BEFORE: &[&str] = &[
    "item_id",
    "task",
    "format",
    "question",
    "target_text",
    "key_frame",
    "key_time_secs",
];
const AFTER: &[&str] = &[
    "rationale",
    "origin",
    "for_review",
    "from_columns",
    "task_fingerprint",
    "final_round",
    "judge_model",
];

fn info(stage: &str, t: &Task) -> TaskInfo {
    let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let f = &t.file;
    TaskInfo {
        name: f.name.clone(),
        stage: stage.to_string(),
        title: f.title.clone(),
        category: name(serde_json::to_value(f.category).unwrap_or_default()),
        targets: f
            .targets
            .iter()
            .map(|x| name(serde_json::to_value(x).unwrap_or_default()))
            .collect(),
        format: t.format.name().to_string(),
        metrics: f.metrics.clone(),
        question: f.question.clone(),
        options: f.options.clone(),
        labels: f.labels.clone(),
        reference: f.reference.from.clone(),
        fingerprint: t.fingerprint.clone(),
    }
}

/// One split's rows of a task: the released columns of its format, with `video_id` and `split`.
fn task_batch(
    t: &Task,
    split: &str,
    rows: &[(&String, BenchItem, Option<String>)],
) -> Result<RecordBatch, RunError> {
    let fields = crate::store::shards::fields_of::<BenchItem>()?;
    let items: Vec<&BenchItem> = rows.iter().map(|(_, r, _)| r).collect();
    let full = serde_arrow::to_record_batch(&fields, &items)
        .map_err(|e| RunError::Internal(format!("task rows: {e}")))?;
    let options: &[&str] = if t.format.has_options() {
        &["options"]
    } else {
        &[]
    };
    let mut out_fields = vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(
            rows.iter().map(|(v, _, _)| v.as_str()).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(vec![split; rows.len()])),
    ];
    let schema = full.schema();
    for name in BEFORE
        .iter()
        .chain(options)
        .chain(t.format.reference_columns())
        .chain(AFTER)
    {
        let i = schema
            .index_of(name)
            .map_err(|e| RunError::Internal(format!("items column {name}: {e}")))?;
        out_fields.push(schema.field(i).clone());
        cols.push(full.column(i).clone());
    }
    // What people made of the item: accepted, minor_edit or rewritten; null when not reviewed.
    out_fields.push(Field::new("review", DataType::Utf8, true));
    cols.push(Arc::new(StringArray::from(
        rows.iter()
            .map(|(_, _, r)| r.as_deref())
            .collect::<Vec<_>>(),
    )));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(out_fields)), cols)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    super::rows::plain_batch(&batch)
}

/// Writes every task config; none when the run has no items stage.
pub(super) async fn write_tasks(
    store: &Arc<dyn Store>,
    m: &Manifest,
    order: &[String],
    by_split: &BTreeMap<String, Vec<String>>,
    out: &Path,
) -> Result<Vec<TaskWritten>, RunError> {
    let mut written = vec![];
    let reviews = read_task_reviews(store).await?;
    let report = read_task_report(store).await?;
    let decided: HashMap<&str, &TaskReview> = reviews
        .iter()
        .filter(|r| r.annotator == "adjudicated")
        .map(|r| (r.item_id.as_str(), r))
        .collect();
    for (id, fingerprint, task) in crate::stages::items::run_tasks(m)? {
        let items: HashMap<String, Vec<BenchItem>> =
            read_table(store, &id, &fingerprint, true).await?.rows()?;
        let mut w = TaskWritten {
            info: info(&id, &task),
            schema: None,
            sizes: vec![],
            for_review: 0,
            judges: BTreeSet::new(),
            review: None,
            unreviewed: 0,
        };
        let reviewed = decided.values().any(|r| r.task == w.info.name);
        if reviewed {
            w.review = report
                .as_ref()
                .and_then(|r| r.tasks.iter().find(|t| t.task == w.info.name).cloned());
        }
        if let Some(o) = written
            .iter()
            .find(|o: &&TaskWritten| o.info.name == w.info.name)
        {
            return Err(RunError::Config(format!(
                "stages {} and {} both build task {:?}: a release has one config per task",
                o.info.stage, w.info.stage, w.info.name
            )));
        }
        for split in order {
            let rows = split_rows(
                &by_split[split],
                &items,
                &decided,
                reviewed,
                &mut w.unreviewed,
            );
            for (_, r, _) in &rows {
                w.for_review += usize::from(r.for_review);
                if !r.judge_model.is_empty() {
                    w.judges.insert(r.judge_model.clone());
                }
            }
            let batch = task_batch(&task, split, &rows)?;
            let name = format!("tasks/{}/{split}-00000-of-00001.parquet", w.info.name);
            write_parquet(&out.join(name), &batch)?;
            w.sizes
                .push((split.clone(), rows.len(), batch.get_array_memory_size()));
            w.schema.get_or_insert(batch.schema());
        }
        written.push(w);
    }
    if !written.is_empty() {
        write_task_list(&written, out)?;
    }
    Ok(written)
}

/// The released rows of one split's videos: each kept item, and with a review its decided
/// reference and edit class (an item without a decision counts as unreviewed).
fn split_rows<'a>(
    ids: &'a [String],
    items: &HashMap<String, Vec<BenchItem>>,
    decided: &HashMap<&str, &TaskReview>,
    reviewed: bool,
    unreviewed: &mut usize,
) -> Vec<(&'a String, BenchItem, Option<String>)> {
    let mut rows: Vec<(&String, BenchItem, Option<String>)> = vec![];
    for (v, r) in ids
        .iter()
        .flat_map(|v| items.get(v).into_iter().flatten().map(move |r| (v, r)))
        .filter(|(_, r)| r.kept)
    {
        if !reviewed {
            rows.push((v, r.clone(), None));
            continue;
        }
        // With a review, the decided references replace the items' own; the rest
        // stay out.
        match decided.get(r.item_id.as_str()) {
            None => *unreviewed += 1,
            Some(d) if d.decision == "reject" => {}
            Some(d) => {
                let mut r = r.clone();
                r.set_reference(d.reference());
                r.for_review = false;
                rows.push((v, r, Some(d.edit_class.clone())));
            }
        }
    }
    rows
}

/// Writes `tasks/tasks.json`: what each released task is.
fn write_task_list(written: &[TaskWritten], out: &Path) -> Result<(), RunError> {
    let infos: Vec<&TaskInfo> = written.iter().map(|w| &w.info).collect();
    let path = out.join("tasks/tasks.json");
    let text = serde_json::to_string_pretty(&infos).unwrap_or_default();
    crate::store::write_file(&path, text.as_bytes()).map_err(crate::error::io(&path))
}
