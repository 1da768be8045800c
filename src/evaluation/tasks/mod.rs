//! `vidcurate evaluate RELEASE PREDICTIONS` on a benchmark-task release (MVFNDB's ten tasks):
//! each task's predictions scored by its format (`benchmark::score`), per task, per category
//! (perception / understanding / reasoning) and per value of `--by` (a column of the release's
//! videos), every mean with its standard error clustered by video.
//!
//! Reads: `tasks/tasks.json` and `tasks/<task>/*.parquet` of the release (the rows of the split
//! scored; only `item_id` of the others), `data/*.parquet` for `--by`, and the predictions (CSV, JSONL or Parquet: `item_id`, `prediction` or `answer`).
//! Writes: its report only. Calls nothing: the judged metrics (hit rates, factual consistency,
//! theme relevance, completeness) are listed as not scored rather than guessed.

mod answers;
mod render;

pub use answers::answer_column;
pub(super) use answers::read_model_answers;
pub use render::render;

use super::split::{Scope, SplitScored};
use crate::benchmark::formats::Format;
use crate::benchmark::score::{
    ItemScore, Mean, Reference, Status, clustered_mean, computed, macro_f1, score_item,
};
use crate::error::{RunError, io};
use answers::{Answers, read_answers};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// What `tasks/tasks.json` says of a task (the fields scoring uses).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct TaskInfo {
    pub(super) name: String,
    #[serde(default)]
    title: String,
    category: String,
    format: String,
    pub(super) metrics: Vec<String>,
    /// The task's question (an item's own, with its target filled in, is in its row).
    #[serde(default)]
    pub(super) question: String,
    #[serde(default)]
    labels: Vec<String>,
}

/// One task's scores.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskReport {
    pub task: String,
    pub title: String,
    pub category: String,
    pub format: String,
    pub items: usize,
    pub read: usize,
    pub unread: usize,
    pub missing: usize,
    /// Why predictions could not be read: the format's problem codes.
    pub unread_codes: BTreeMap<String, usize>,
    /// metric → mean, clustered standard error, items, videos.
    pub metrics: BTreeMap<String, Mean>,
    /// Tagged reasoning: Macro-F1 of the result over the task's labels.
    pub macro_f1: Option<f64>,
    /// The task's metrics that need a judge, not scored here.
    pub not_scored: Vec<String>,
    /// `--by` value → metric → mean.
    pub by: BTreeMap<String, BTreeMap<String, Mean>>,
    /// Judged metrics: items left out (no element could be judged), judgments that stayed
    /// unjudged by reason, the judge's agreement with itself (two samples), the calls asked for.
    pub unjudged_items: BTreeMap<String, usize>,
    pub unjudged: BTreeMap<String, usize>,
    pub self_agreement: BTreeMap<String, f64>,
    pub judge_calls: usize,
    /// metric → the judge's agreement with people (`--people`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub people_agreement: BTreeMap<String, crate::benchmark::review::judging::JudgeAgreement>,
    /// The judge's verdicts, kept for `--people`.
    #[serde(skip)]
    pub verdicts: super::judged::Verdicts,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TasksReport {
    /// The split scored.
    pub split: SplitScored,
    pub tasks: Vec<TaskReport>,
    pub by_column: Option<String>,
    pub predictions: usize,
    /// The judge of the judged metrics (None: not judged).
    pub judge: Option<super::judge::JudgeInfo>,
    /// What `--people EXPORT.json` read (None: not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub people: Option<super::people_report::PeopleRead>,
}

/// How `evaluate` scores a task release: `--by`, `--items-out`, the judge, the split.
pub struct TaskOptions<'a> {
    pub by: Option<&'a str>,
    pub items_out: Option<&'a Path>,
    pub judge: Option<&'a super::judge::Judge>,
    pub scope: &'a Scope,
}

/// Whether the predictions answer the release's benchmark tasks (rather than its `questions`
/// config, whose item ids are 16 hex digits; a task item's is `<video>:<task>:<k>`).
pub fn answers_tasks(release: &Path, predictions: &Path) -> Result<bool, RunError> {
    if !release.join("tasks/tasks.json").is_file() {
        return Ok(false);
    }
    if !release.join("questions").is_dir() {
        return Ok(true);
    }
    let (_, first) = super::rows::peek(predictions, &["item_id"])?;
    Ok(first
        .and_then(|r| r.into_iter().next().flatten())
        .is_some_and(|id| id.contains(':')))
}

fn read_infos(release: &Path) -> Result<Vec<TaskInfo>, RunError> {
    let p = release.join("tasks/tasks.json");
    let text = std::fs::read_to_string(&p).map_err(io(&p))?;
    serde_json::from_str(&text).map_err(|e| RunError::Config(format!("{}: {e}", p.display())))
}

/// The task's released rows of the split `scope` scores as references, in file order; the
/// item ids of its other splits go to `others`.
fn read_references(
    release: &Path,
    t: &TaskInfo,
    scope: &Scope,
    others: &mut HashSet<String>,
) -> Result<Vec<Reference>, RunError> {
    let mut out = vec![];
    for f in super::parquet_files(&release.join("tasks").join(&t.name))? {
        if scope.keeps(&f) {
            let mut refs = vec![];
            super::references::read_file(&f, &mut refs)?;
            for r in refs {
                if scope.shares_item(&t.name, &r.item_id) {
                    out.push(r);
                } else {
                    others.insert(r.item_id);
                }
            }
        } else {
            super::references::read_ids(&f, others)?;
        }
    }
    Ok(out)
}

/// video → its value of `column` in the release's `data/*.parquet`.
fn video_groups(release: &Path, column: &str) -> Result<HashMap<String, String>, RunError> {
    let mut out = HashMap::new();
    for f in super::parquet_files(&release.join("data"))? {
        for b in super::parquet_batches(&f)? {
            let missing = || {
                RunError::Config(format!(
                    "--by {column}: the release's videos have no such column"
                ))
            };
            let ids = crate::store::shards::text_column(&b, "video_id").ok_or_else(missing)?;
            let vals = crate::store::shards::text_column(&b, column).ok_or_else(missing)?;
            for (id, v) in ids.iter().zip(vals.iter()) {
                if let Some(id) = id {
                    out.insert(id.to_string(), v.unwrap_or("(none)").to_string());
                }
            }
        }
    }
    Ok(out)
}

/// The release's tasks, each task's references of the split scored in release order, and the
/// item ids of the other splits.
pub(super) struct Loaded {
    pub(super) infos: Vec<TaskInfo>,
    pub(super) refs: Vec<Vec<Reference>>,
    pub(super) others: HashSet<String>,
}

impl Loaded {
    /// What was scored: the items of the split, of the release, and `other` predictions of
    /// other splits.
    pub(super) fn scored(&self, scope: &Scope, other: usize) -> SplitScored {
        let n: usize = self.refs.iter().map(Vec::len).sum();
        scope.scored("items", n, n + self.others.len(), other)
    }
}

pub(super) fn load_release(release: &Path, scope: &Scope) -> Result<Loaded, RunError> {
    let infos = read_infos(release)?;
    let mut refs = vec![];
    let mut others = HashSet::new();
    for t in &infos {
        refs.push(read_references(release, t, scope, &mut others)?);
    }
    Ok(Loaded {
        infos,
        refs,
        others,
    })
}

/// One item's final decision, for the prompt-variant comparison.
#[derive(Debug, Clone)]
pub struct DecisionItem {
    pub video_id: String,
    pub truth: String,
    pub label: Option<String>,
    pub accuracy: f64,
}

/// A tagged-reasoning task's decisions under one predictions file, items in release order.
#[derive(Debug, Clone)]
pub struct TaskScores {
    pub task: String,
    pub labels: Vec<String>,
    pub items: Vec<DecisionItem>,
}

/// The decisions of every tagged-reasoning task of the split `scope` scores, per model of
/// `predictions`, and what was scored.
pub fn score_release(
    release: &Path,
    predictions: &Path,
    scope: &Scope,
) -> Result<(BTreeMap<String, Vec<TaskScores>>, SplitScored), RunError> {
    let loaded = load_release(release, scope)?;
    let (answers, _, other) = read_model_answers(predictions, &loaded)?;
    let Loaded { infos, refs, .. } = &loaded;
    let mut out = BTreeMap::new();
    for (model, answers) in &answers {
        let mut tasks = vec![];
        for ((t, refs), given) in infos.iter().zip(refs).zip(answers) {
            if t.format != Format::TaggedReasoning.name() {
                continue;
            }
            let items = refs
                .iter()
                .zip(given)
                .map(|(r, a)| {
                    let s = score_item(Format::TaggedReasoning, r, &t.labels, a.as_deref());
                    DecisionItem {
                        video_id: r.video_id.clone(),
                        truth: r.label.clone(),
                        accuracy: s.values["accuracy"],
                        label: s.label,
                    }
                })
                .collect();
            tasks.push(TaskScores {
                task: t.name.clone(),
                labels: t.labels.clone(),
                items,
            });
        }
        out.insert(model.clone(), tasks);
    }
    if out.values().all(Vec::is_empty) {
        return Err(RunError::Config(format!(
            "{}: the release has no tagged-reasoning task (FDR) whose decisions variants compare",
            release.display()
        )));
    }
    Ok((out, loaded.scored(scope, other)))
}

/// Scores every task of the release.
pub fn evaluate(
    release: &Path,
    predictions: &Path,
    opts: &TaskOptions,
) -> Result<TasksReport, RunError> {
    let (by, items_out) = (opts.by, opts.items_out);
    let loaded = load_release(release, opts.scope)?;
    let (answers, rows, other) = read_answers(predictions, &loaded)?;
    let Loaded { infos, refs, .. } = &loaded;
    let groups = by.map(|c| video_groups(release, c)).transpose()?;
    let mut report = TasksReport {
        split: loaded.scored(opts.scope, other),
        by_column: by.map(str::to_string),
        predictions: rows,
        judge: opts.judge.map(|j| j.info()),
        ..Default::default()
    };
    let rt = match opts.judge {
        Some(_) => Some(crate::runtime::tokio_runtime()?),
        None => None,
    };
    if let (Some(j), Some(rt)) = (opts.judge, &rt)
        && j.batched()
    {
        let asks = judged_asks(infos, refs, &answers)?;
        rt.block_on(super::judge_batch::answer_all(j, &asks))?;
    }
    let mut lines = String::new();
    for ((t, refs), given) in infos.iter().zip(refs).zip(&answers) {
        let (mut rep, scores) = score_task(t, refs, given, groups.as_ref())?;
        if let (Some(j), Some(rt)) = (opts.judge, &rt) {
            let judged_metrics: Vec<String> = t
                .metrics
                .iter()
                .filter(|m| {
                    m.starts_with("hit_rate.") || super::judge::RATINGS.contains(&m.as_str())
                })
                .cloned()
                .collect();
            let got = rt.block_on(super::judged::judge_task(j, &judged_metrics, refs, &scores))?;
            for (m, v) in &got.values {
                let v: Vec<(&str, f64)> = v.iter().map(|(g, x)| (g.as_str(), *x)).collect();
                rep.metrics.insert(m.clone(), clustered_mean(&v));
            }
            rep.not_scored.retain(|m| !judged_metrics.contains(m));
            (
                rep.unjudged_items,
                rep.unjudged,
                rep.self_agreement,
                rep.judge_calls,
                rep.verdicts,
            ) = (
                got.unjudged_items,
                got.unjudged,
                got.self_agreement,
                got.calls,
                got.verdicts,
            );
        }
        // Only when asked for: a JSON line per item is most of the work at a million items.
        for s in scores.iter().filter(|_| items_out.is_some()) {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            v["task"] = serde_json::json!(t.name);
            lines += &v.to_string();
            lines.push('\n');
        }
        report.tasks.push(rep);
    }
    if let Some(p) = items_out {
        std::fs::write(p, lines).map_err(io(p))?;
    }
    Ok(report)
}

pub(super) fn score_task(
    t: &TaskInfo,
    refs: &[Reference],
    answers: &[Option<String>],
    groups: Option<&HashMap<String, String>>,
) -> Result<(TaskReport, Vec<ItemScore>), RunError> {
    let format = Format::from_name(&t.format).ok_or_else(|| {
        RunError::Config(format!(
            "tasks.json: task {}: unknown format {:?}",
            t.name, t.format
        ))
    })?;
    let scores: Vec<ItemScore> = refs
        .iter()
        .zip(answers)
        .map(|(r, a)| score_item(format, r, &t.labels, a.as_deref()))
        .collect();
    let mut rep = TaskReport {
        task: t.name.clone(),
        title: t.title.clone(),
        category: t.category.clone(),
        format: t.format.clone(),
        items: scores.len(),
        ..Default::default()
    };
    tally(&mut rep, &scores);
    let wanted: Vec<&str> = computed(format)
        .iter()
        .copied()
        .filter(|m| t.metrics.iter().any(|x| x == m))
        .collect();
    rep.not_scored = t
        .metrics
        .iter()
        .filter(|m| !wanted.contains(&m.as_str()) && m.as_str() != "macro_f1")
        .cloned()
        .collect();
    let all: Vec<&ItemScore> = scores.iter().collect();
    rep.metrics = means(&wanted, &all);
    if t.metrics.iter().any(|m| m == "macro_f1") {
        let pairs: Vec<(&str, Option<&str>)> = refs
            .iter()
            .zip(&scores)
            .map(|(r, s)| (r.label.as_str(), s.label.as_deref()))
            .collect();
        rep.macro_f1 = Some(macro_f1(&pairs, &t.labels));
    }
    if let Some(g) = groups {
        let mut by: BTreeMap<String, Vec<&ItemScore>> = BTreeMap::new();
        for s in &scores {
            let k = g
                .get(&s.video_id)
                .cloned()
                .unwrap_or_else(|| "(none)".into());
            by.entry(k).or_default().push(s);
        }
        rep.by = by
            .into_iter()
            .map(|(k, set)| (k, means(&wanted, &set)))
            .collect();
    }
    Ok((rep, scores))
}

/// Counts the items read, unread (by problem code) and missing.
fn tally(rep: &mut TaskReport, scores: &[ItemScore]) {
    for s in scores {
        match s.status {
            Status::Read => rep.read += 1,
            Status::Unread => {
                rep.unread += 1;
                *rep.unread_codes.entry(s.problem.clone()).or_default() += 1;
            }
            Status::Missing => rep.missing += 1,
        }
    }
}

/// metric → its mean over `set`, clustered by video, for each of the `wanted` metrics.
fn means(wanted: &[&str], set: &[&ItemScore]) -> BTreeMap<String, Mean> {
    wanted
        .iter()
        .map(|m| {
            let v: Vec<(&str, f64)> = set
                .iter()
                .map(|s| (s.video_id.as_str(), s.values[*m]))
                .collect();
            (m.to_string(), clustered_mean(&v))
        })
        .collect()
}

/// What judging these predictions on the split `scope` scores would ask the judge: calls,
/// those already cached, the price; and what was scored.
pub fn dry_run(
    release: &Path,
    predictions: &Path,
    judge: &super::judge::Judge,
    scope: &Scope,
) -> Result<(super::judge::DryRun, SplitScored), RunError> {
    let loaded = load_release(release, scope)?;
    let (answers, _, other) = read_answers(predictions, &loaded)?;
    let price = judge.price(&judged_asks(&loaded.infos, &loaded.refs, &answers)?);
    Ok((price, loaded.scored(scope, other)))
}

/// Every judgment the tasks' judged metrics ask of these answers (each once per sample).
fn judged_asks(
    infos: &[TaskInfo],
    refs: &[Vec<Reference>],
    answers: &Answers,
) -> Result<Vec<(super::judge::Ask, String)>, RunError> {
    let mut asks = vec![];
    for ((t, refs), given) in infos.iter().zip(refs).zip(answers) {
        let (_, scores) = score_task(t, refs, given, None)?;
        asks.extend(super::judged::planned(&t.metrics, refs, &scores));
    }
    Ok(asks)
}
