//! `evaluate RELEASE PREDICTIONS --people-out DIR`: a Label Studio project in which people make
//! the judgments the LLM judge makes (MVFNDB B.3), on the same answers, so that `--people
//! EXPORT.json` (`people_read.rs`) can say how far the judge agrees with them.
//!
//! Reads: the release's `tasks/tasks.json` and `tasks/<task>/*.parquet` (references, and each
//! item's `question` where the rows carry one), and the predictions (every `model` in them).
//! Writes: `DIR/label_config.xml` and `DIR/tasks.json`, one task per (item, model) whose task
//! has judged metrics and whose answer was read (a missing or unread answer is scored 0 with no
//! judgment, so nobody is asked about it either). Calls nothing; caches nothing.
//!
//! The config is static, so it has `hit_0`..`hit_{N-1}` for the most reference elements any item
//! has (N) and one 0–5 Choices per rating any task names (Label Studio's Rating control starts at
//! 1); each task's data says how many elements it uses and which ratings its task names, and
//! carries `item_id`, `model` and the element keys (`METRIC#INDEX`) so the export maps back to
//! the judge's verdicts exactly.

use super::judge::RATINGS;
use crate::benchmark::review::xml;
use crate::error::RunError;
use crate::store::shards::text_column;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// What each rating asks, as the judge's prompt defines it (`judge::RATING_PROMPT`).
const RATING_MEANING: [(&str, &str); 3] = [
    (
        "factual_consistency",
        "the answer states nothing the reference contradicts or that is not in the video",
    ),
    (
        "theme_relevance",
        "the answer is about the theme of the reference",
    ),
    (
        "completeness",
        "the answer covers what the reference covers",
    ),
];

/// One answer people judge as the judge does: a read answer of one model to one item of a task
/// with judged metrics.
#[derive(Debug, Clone)]
pub(super) struct Judgeable {
    pub(super) task: String,
    /// The item's place among its task's rows: what the judge's verdicts are keyed by.
    pub(super) index: usize,
    pub(super) item_id: String,
    pub(super) model: String,
    pub(super) question: String,
    /// The text the judge reads (a tagged answer's reasoning).
    pub(super) answer: String,
    /// What the ratings compare with.
    pub(super) reference: String,
    /// (hit-rate metric, element index, element text) of every element the judge is asked about.
    pub(super) elements: Vec<(String, usize, String)>,
    /// The ratings the task names.
    pub(super) ratings: Vec<String>,
}

/// What the project covers: the judgeable answers, the item ids of the split scored, the
/// models, and what was scored.
pub(super) struct Judgeables {
    pub(super) answers: Vec<Judgeable>,
    pub(super) items: HashSet<String>,
    pub(super) models: Vec<String>,
    pub(super) scored: super::split::SplitScored,
}

/// How a task's data names an element: `METRIC#INDEX` (an index into the item's list).
pub(super) fn element_key(metric: &str, k: usize) -> String {
    format!("{metric}#{k}")
}

/// item → its own question, from the rows of `tasks/<task>/` (releases before the column have
/// none; the task's question stands in then).
fn item_questions(release: &Path, task: &str) -> Result<HashMap<String, String>, RunError> {
    let dir = release.join("tasks").join(task);
    let mut out = HashMap::new();
    for f in super::parquet_files(&dir)? {
        for b in super::parquet_batches(&f)? {
            let (Some(ids), Some(q)) = (text_column(&b, "item_id"), text_column(&b, "question"))
            else {
                continue;
            };
            for (id, q) in ids.iter().zip(q.iter()) {
                if let (Some(id), Some(q)) = (id, q) {
                    out.insert(id.to_string(), q.to_string());
                }
            }
        }
    }
    Ok(out)
}

/// Every answer of every model in `predictions` to an item of the split `scope` scores that
/// the judge judges, in release order.
pub(super) fn judgeables(
    release: &Path,
    predictions: &Path,
    scope: &super::split::Scope,
) -> Result<Judgeables, RunError> {
    let loaded = super::tasks::load_release(release, scope)?;
    let (by_model, _, other) = super::tasks::read_model_answers(predictions, &loaded)?;
    let super::tasks::Loaded { infos, refs, .. } = &loaded;
    let mut answers = vec![];
    for (ti, (t, refs)) in infos.iter().zip(refs).enumerate() {
        let hit_metrics: Vec<&String> = t
            .metrics
            .iter()
            .filter(|m| m.starts_with("hit_rate."))
            .collect();
        let ratings: Vec<String> = t
            .metrics
            .iter()
            .filter(|m| RATINGS.contains(&m.as_str()))
            .cloned()
            .collect();
        if hit_metrics.is_empty() && ratings.is_empty() {
            continue;
        }
        let questions = item_questions(release, &t.name)?;
        for (model, given) in &by_model {
            let (_, scores) = super::tasks::score_task(t, refs, &given[ti], None)?;
            for (index, (r, s)) in refs.iter().zip(&scores).enumerate() {
                let Some(answer) = super::judged::judged_text(s) else {
                    continue;
                };
                let mut elements = vec![];
                for m in &hit_metrics {
                    if let Some(items) = super::judged::hit_elements(m, r) {
                        for (k, e) in items.iter().enumerate() {
                            elements.push((m.to_string(), k, e.clone()));
                        }
                    }
                }
                if elements.is_empty() && ratings.is_empty() {
                    continue;
                }
                answers.push(Judgeable {
                    task: t.name.clone(),
                    index,
                    item_id: r.item_id.clone(),
                    model: model.clone(),
                    question: questions
                        .get(&r.item_id)
                        .cloned()
                        .unwrap_or_else(|| t.question.clone()),
                    answer,
                    reference: super::judged::reference_text(r),
                    elements,
                    ratings: ratings.clone(),
                });
            }
        }
    }
    Ok(Judgeables {
        answers,
        items: refs.iter().flatten().map(|r| r.item_id.clone()).collect(),
        models: by_model.into_keys().collect(),
        scored: loaded.scored(scope, other),
    })
}

/// The project's config: the question and the answer; `elements` hit / miss controls, each
/// under its element's text; one 0–5 choice per rating.
pub(super) fn label_config(elements: usize, ratings: &[&str]) -> String {
    let mut x = String::from(
        "<View>\n  <Header value=\"$title\"/>\n  <Header value=\"The question the model was asked\"/>\n  <Text name=\"question\" value=\"$question\"/>\n  <Header value=\"The model's answer\"/>\n  <Text name=\"answer\" value=\"$answer\"/>\n",
    );
    if elements > 0 {
        x += "  <Header value=\"Reference elements: does the answer state each one (the same fact, in any words)? hit: it does; miss: it does not\"/>\n  <Text name=\"elements_note\" value=\"$elements_note\"/>\n";
        for k in 0..elements {
            x += &format!(
                "  <Text name=\"element_{k}\" value=\"$element_{k}\"/>\n  <Choices name=\"hit_{k}\" toName=\"answer\" choice=\"single\" showInline=\"true\">\n    <Choice value=\"hit\"/>\n    <Choice value=\"miss\"/>\n  </Choices>\n"
            );
        }
    }
    if !ratings.is_empty() {
        x += "  <Header value=\"The reference the ratings compare with\"/>\n  <Text name=\"reference\" value=\"$reference\"/>\n  <Text name=\"ratings_note\" value=\"$ratings_note\"/>\n";
        for r in ratings {
            let meaning = RATING_MEANING
                .iter()
                .find(|(n, _)| n == r)
                .map_or("", |(_, m)| m);
            x += &format!(
                "  <Header value=\"{r}, 0 (not at all) to 5 (fully): {}\"/>\n  <Choices name=\"{r}\" toName=\"answer\" choice=\"single\" showInline=\"true\">\n",
                xml(meaning)
            );
            for v in 0..=5 {
                x += &format!("    <Choice value=\"{v}\"/>\n");
            }
            x += "  </Choices>\n";
        }
    }
    x + "</View>\n"
}

/// A Label Studio task for one judgeable answer; `slots` hit controls, those past the item's
/// elements marked as unused.
fn task_data(j: &Judgeable, slots: usize) -> Value {
    // Label Studio shows an empty Text as nothing at all; a dash says "nothing here".
    let shown = |s: &str| {
        if s.trim().is_empty() {
            "—".to_string()
        } else {
            s.to_string()
        }
    };
    let used = j.elements.len();
    let mut d = json!({
        "title": format!("{} · {} · {}", j.task, j.item_id, j.model),
        "task": j.task,
        "item_id": j.item_id,
        "model": j.model,
        "question": shown(&j.question),
        "answer": j.answer,
        "reference": shown(&j.reference),
        "elements_used": used,
        "element_keys": j.elements.iter().map(|(m, k, _)| element_key(m, *k)).collect::<Vec<_>>(),
        "elements_note": match used {
            0 => "This item has no reference element: leave every hit / miss empty.".to_string(),
            n => format!("This item has {n} element(s): judge hit_0 to hit_{}; leave the others empty.", n - 1),
        },
        "ratings": j.ratings,
        "ratings_note": if j.ratings.is_empty() {
            "This task has no rating: leave them empty.".to_string()
        } else {
            format!("Rate {}; leave any other rating empty.", j.ratings.join(", "))
        },
    });
    for k in 0..slots {
        d[format!("element_{k}")] = json!(match j.elements.get(k) {
            Some((_, _, text)) => shown(text),
            None => "— (no element: leave empty)".to_string(),
        });
    }
    json!({ "data": d })
}

/// Writes the project into `dir`; returns what it says of it.
pub(super) fn write_project(
    release: &Path,
    predictions: &Path,
    dir: &Path,
    scope: &super::split::Scope,
) -> Result<String, RunError> {
    let all = judgeables(release, predictions, scope)?;
    if all.answers.is_empty() {
        return Err(RunError::Config(format!(
            "{}: no read answer to a task with judged metrics (hit_rate.FIELD, {}): nothing for people to judge",
            predictions.display(),
            RATINGS.join(", ")
        )));
    }
    let slots = all
        .answers
        .iter()
        .map(|j| j.elements.len())
        .max()
        .unwrap_or(0);
    let named: BTreeSet<&str> = all
        .answers
        .iter()
        .flat_map(|j| j.ratings.iter().map(String::as_str))
        .collect();
    // The judge's order, so the controls read the same in every project.
    let ratings: Vec<&str> = RATINGS
        .iter()
        .copied()
        .filter(|r| named.contains(r))
        .collect();
    std::fs::create_dir_all(dir).map_err(|e| RunError::at(dir.display().to_string(), e))?;
    let config = dir.join("label_config.xml");
    std::fs::write(&config, label_config(slots, &ratings))
        .map_err(|e| RunError::at(config.display().to_string(), e))?;
    let tasks: Vec<Value> = all.answers.iter().map(|j| task_data(j, slots)).collect();
    let file = dir.join("tasks.json");
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&tasks).expect("tasks serialise"),
    )
    .map_err(|e| RunError::at(file.display().to_string(), e))?;
    Ok(format!(
        "{}{} tasks for people (one per item and model the judge judges; {} model(s), up to {slots} reference element(s) an item, ratings: {}): {}, {}\nCreate a Label Studio project with label_config.xml, import tasks.json, have two or more people judge every task, export it as JSON and give it back: vidcurate evaluate RELEASE PREDICTIONS --judge JUDGE --people EXPORT.json\n",
        all.scored.line(),
        tasks.len(),
        all.models.len(),
        if ratings.is_empty() {
            "none".to_string()
        } else {
            ratings.join(", ")
        },
        config.display(),
        file.display()
    ))
}
