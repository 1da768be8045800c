//! `evaluate RELEASE PREDICTIONS --judge FILE --people EXPORT.json`: the people's judgments of
//! the project `--people-out` wrote (`people.rs`), read back from Label Studio's JSON export and
//! set against the judge's verdicts of the same answers: per task and judged metric, Cohen's
//! kappa on hit / miss or Krippendorff's alpha (interval) on 0–5, the judge against each person
//! and against the people's majority / mean, and the people among themselves
//! (`benchmark::review::judging`).
//!
//! Reads: the export (a list of tasks, each with its `data` and `annotations`; the person is the
//! annotation's `completed_by`: an email, else Label Studio's user id), the release and the
//! predictions (to map each task back to the judged answer). Writes nothing; calls nothing (the
//! judge's verdicts come from the evaluation it runs beside); caches nothing. A task of an
//! unknown item or model, an answer that changed since the project was written, an element the
//! release no longer has, a choice outside hit / miss or 0–5, or a control the project does not
//! have is named (export, Label Studio task id, item, model, person, field) and kept out;
//! cancelled annotations are counted and kept out.

use super::judge::{RATINGS, Verdict};
use super::people::{Judgeable, element_key};
use super::tasks::TasksReport;
use crate::benchmark::review::judging::{JudgeAgreement, Unit, hit_agreement, rating_agreement};
use crate::error::RunError;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// One judgment, or a whole task, kept out of the comparison, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Problem {
    /// Label Studio's task id.
    pub task_id: Option<i64>,
    pub item_id: Option<String>,
    pub model: Option<String>,
    pub person: Option<String>,
    /// The data field or control at fault (`data.item_id`, `hit_2`, `completeness`).
    pub field: String,
    pub reason: String,
}

/// What `--people EXPORT.json` read: printed above the agreement, kept in the JSON report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PeopleRead {
    pub export: String,
    pub people: Vec<String>,
    pub tasks: usize,
    /// Annotations read (cancelled ones aside).
    pub annotations: usize,
    /// Cancelled (skipped) annotations: kept out.
    pub cancelled: usize,
    /// Judgments kept: one control of one annotation.
    pub judgments: usize,
    /// Judgments a later annotation (by `updated_at`) of the same person replaced.
    pub replaced: usize,
    pub problems: Vec<Problem>,
}

/// (task, metric) → (item index, element) → person → hit; the same for ratings, element None.
type People<V> = BTreeMap<(String, String), BTreeMap<(usize, Option<usize>), BTreeMap<String, V>>>;

/// Who made an annotation: the email when the export carries the user, else the user id.
fn annotator_of(a: &Value) -> String {
    match &a["completed_by"] {
        Value::Object(o) => o
            .get("email")
            .and_then(|e| e.as_str())
            .map(String::from)
            .or_else(|| o.get("id").map(|i| i.to_string())),
        Value::Null => None,
        other => Some(other.to_string()),
    }
    .unwrap_or_else(|| "unknown".into())
}

struct Reader<'a> {
    by_key: HashMap<(&'a str, &'a str), &'a Judgeable>,
    items: &'a std::collections::HashSet<String>,
    models: &'a [String],
    read: PeopleRead,
    hits: People<bool>,
    ratings: People<u8>,
    people: BTreeSet<String>,
}

/// Where a problem is: the task, and the person once known.
struct At<'v> {
    task_id: Option<i64>,
    item_id: Option<&'v str>,
    model: Option<&'v str>,
}

impl<'a> Reader<'a> {
    fn problem(&mut self, at: &At, person: Option<&str>, field: &str, reason: String) {
        self.read.problems.push(Problem {
            task_id: at.task_id,
            item_id: at.item_id.map(String::from),
            model: at.model.map(String::from),
            person: person.map(String::from),
            field: field.into(),
            reason,
        });
    }

    /// The judged answer a task is about, or None (the problem recorded).
    fn answer_of(&mut self, t: &Value, at: &At) -> Option<&'a Judgeable> {
        let kept_out = |t: &Value| {
            let n = t["annotations"].as_array().map_or(0, Vec::len);
            format!("its {n} annotation(s) kept out")
        };
        let (Some(item), Some(model)) = (at.item_id, at.model) else {
            let field = if at.item_id.is_none() {
                "data.item_id"
            } else {
                "data.model"
            };
            let why = format!(
                "missing (not a task of `evaluate --people-out`?); {}",
                kept_out(t)
            );
            self.problem(at, None, field, why);
            return None;
        };
        if !self.items.contains(item) {
            let why = format!("unknown item: not in the release; {}", kept_out(t));
            self.problem(at, None, "data.item_id", why);
            return None;
        }
        if !self.models.iter().any(|m| m == model) {
            let why = format!(
                "unknown model: the predictions answer for {}; {}",
                self.models.join(", "),
                kept_out(t)
            );
            self.problem(at, None, "data.model", why);
            return None;
        }
        let Some(j) = self.by_key.get(&(item, model)).copied() else {
            let why = format!(
                "the judge judges nothing of this answer (missing or unread, or no judged metric); {}",
                kept_out(t)
            );
            self.problem(at, None, "data.item_id", why);
            return None;
        };
        if t["data"]["answer"].as_str() != Some(j.answer.as_str()) {
            let why = format!(
                "the model's answer is not the one in the predictions now: people judged another answer; {}",
                kept_out(t)
            );
            self.problem(at, None, "data.answer", why);
            return None;
        }
        Some(j)
    }

    /// The element each `hit_K` control of a task judges (None: kept out, the problem recorded).
    fn slots(&mut self, t: &Value, j: &Judgeable, at: &At) -> Vec<Option<(String, usize)>> {
        let keys = t["data"]["element_keys"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut out = vec![];
        for (k, key) in keys.iter().enumerate() {
            let found = key.as_str().and_then(|key| {
                j.elements
                    .iter()
                    .find(|(m, i, _)| element_key(m, *i) == key)
            });
            let Some((m, i, text)) = found else {
                let why = format!(
                    "{key}: this item has no such element in the release; hit_{k} kept out"
                );
                self.problem(at, None, &format!("data.element_keys[{k}]"), why);
                out.push(None);
                continue;
            };
            if t["data"][format!("element_{k}")].as_str() != Some(text.as_str()) {
                let why = format!(
                    "the element's text is not the release's ({text:?}): people judged another element; hit_{k} kept out"
                );
                self.problem(at, None, &format!("data.element_{k}"), why);
                out.push(None);
                continue;
            }
            out.push(Some((m.clone(), *i)));
        }
        out
    }

    fn task(&mut self, t: &Value) {
        self.read.tasks += 1;
        let data = &t["data"];
        let at = At {
            task_id: t["id"].as_i64(),
            item_id: data["item_id"].as_str(),
            model: data["model"].as_str(),
        };
        let Some(j) = self.answer_of(t, &at) else {
            return;
        };
        let slots = self.slots(t, j, &at);
        let empty = vec![];
        // Oldest first, so a person's later annotation of the same task replaces the earlier.
        let mut annotations: Vec<&Value> = t["annotations"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .collect();
        annotations.sort_by_key(|a| {
            a["updated_at"]
                .as_str()
                .or(a["created_at"].as_str())
                .unwrap_or("")
        });
        for a in annotations {
            let person = annotator_of(a);
            if a["was_cancelled"].as_bool() == Some(true) {
                self.read.cancelled += 1;
                continue;
            }
            self.read.annotations += 1;
            for r in a["result"].as_array().unwrap_or(&empty) {
                self.result(r, j, &slots, &at, &person);
            }
        }
    }

    /// One control's judgment of one annotation.
    fn result(
        &mut self,
        r: &Value,
        j: &Judgeable,
        slots: &[Option<(String, usize)>],
        at: &At,
        person: &str,
    ) {
        let name = r["from_name"].as_str().unwrap_or("");
        let choices: Vec<&str> = r["value"]["choices"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let who = Some(person);
        let [choice] = choices[..] else {
            let why = format!(
                "{} choice(s) ({}): one is expected",
                choices.len(),
                choices.join(", ")
            );
            self.problem(at, who, name, why);
            return;
        };
        if let Some(k) = name
            .strip_prefix("hit_")
            .and_then(|k| k.parse::<usize>().ok())
        {
            let Some(slot) = slots.get(k) else {
                let why = format!(
                    "the item has {} reference element(s): hit_{k} judges none of them",
                    slots.len()
                );
                self.problem(at, who, name, why);
                return;
            };
            // A slot whose element is wrong was named once, for the task.
            let Some((metric, i)) = slot else { return };
            let hit = match choice {
                "hit" => true,
                "miss" => false,
                other => {
                    self.problem(at, who, name, format!("{other:?} is not hit or miss"));
                    return;
                }
            };
            let unit = (j.index, Some(*i));
            let key = (j.task.clone(), metric.clone());
            let had = self
                .hits
                .entry(key)
                .or_default()
                .entry(unit)
                .or_default()
                .insert(person.into(), hit);
            self.kept(had.is_some(), person);
        } else if RATINGS.contains(&name) {
            if !j.ratings.iter().any(|x| x == name) {
                let why = format!(
                    "task {} names no such rating (it rates: {})",
                    j.task,
                    j.ratings.join(", ")
                );
                self.problem(at, who, name, why);
                return;
            }
            let Some(v) = choice.parse::<u8>().ok().filter(|v| *v <= 5) else {
                self.problem(
                    at,
                    who,
                    name,
                    format!("{choice:?} is not a rating from 0 to 5"),
                );
                return;
            };
            let key = (j.task.clone(), name.to_string());
            let had = self
                .ratings
                .entry(key)
                .or_default()
                .entry((j.index, None))
                .or_default()
                .insert(person.into(), v);
            self.kept(had.is_some(), person);
        } else {
            let why = "no control of the judging project (hit_K or a rating)".to_string();
            self.problem(at, who, name, why);
        }
    }

    fn kept(&mut self, replaced: bool, person: &str) {
        if replaced {
            self.read.replaced += 1;
        } else {
            self.read.judgments += 1;
        }
        self.people.insert(person.to_string());
    }
}

/// Reads `export` and sets each task's people agreement in `report` (judged by the judge whose
/// verdicts it holds).
pub(super) fn compare(
    release: &Path,
    predictions: &Path,
    export: &Path,
    report: &mut TasksReport,
) -> Result<(), RunError> {
    let shown = export.display().to_string();
    let text = std::fs::read_to_string(export).map_err(|e| RunError::at(shown.clone(), e))?;
    let tasks: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(t)) => t,
        Ok(_) => {
            return Err(RunError::Config(format!(
                "{shown}:1: not a Label Studio JSON export (a list of tasks; export as JSON, not JSON_MIN or CSV)"
            )));
        }
        Err(e) => return Err(RunError::Config(format!("{shown}:{}: {e}", e.line()))),
    };
    let all = super::people::judgeables(release, predictions)?;
    let mut reader = Reader {
        by_key: all
            .answers
            .iter()
            .map(|j| ((j.item_id.as_str(), j.model.as_str()), j))
            .collect(),
        items: &all.items,
        models: &all.models,
        read: PeopleRead {
            export: shown,
            ..Default::default()
        },
        hits: BTreeMap::new(),
        ratings: BTreeMap::new(),
        people: BTreeSet::new(),
    };
    for t in &tasks {
        reader.task(t);
    }
    for t in &mut report.tasks {
        let judge = |i: usize, m: &str, k: Option<usize>| t.verdicts.get(&(i, m.to_string(), k, 0));
        let mut got: BTreeMap<String, JudgeAgreement> = BTreeMap::new();
        for ((_, metric), units) in reader.hits.iter().filter(|((x, _), _)| *x == t.task) {
            let units: Vec<Unit<bool>> = units
                .iter()
                .map(|((i, k), people)| Unit {
                    judge: match judge(*i, metric, *k) {
                        Some(Verdict::Hit(h)) => Some(*h),
                        _ => None,
                    },
                    people: people.clone(),
                })
                .collect();
            got.insert(metric.clone(), hit_agreement(&units));
        }
        for ((_, metric), units) in reader.ratings.iter().filter(|((x, _), _)| *x == t.task) {
            let units: Vec<Unit<u8>> = units
                .iter()
                .map(|((i, _), people)| Unit {
                    judge: match judge(*i, "ratings", None) {
                        Some(Verdict::Ratings(r)) => r.get(metric).copied(),
                        _ => None,
                    },
                    people: people.clone(),
                })
                .collect();
            got.insert(metric.clone(), rating_agreement(&units));
        }
        t.people_agreement = got;
    }
    reader.read.people = reader.people.into_iter().collect();
    report.people = Some(reader.read);
    Ok(())
}

/// The problems the text shows; the JSON report has them all.
const SHOWN: usize = 20;

/// What the export held, for the judge's block of the report.
pub(super) fn render_read(p: Option<&PeopleRead>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    let mut s = format!(
        "people's judgments from {}: {} people ({}); {} annotation(s) of {} task(s), {} cancelled (kept out); {} judgment(s){}; {} problem(s), kept out{}\n",
        p.export,
        p.people.len(),
        p.people.join(", "),
        p.annotations,
        p.tasks,
        p.cancelled,
        p.judgments,
        if p.replaced > 0 {
            format!(
                " ({} replaced by a later annotation of the same person)",
                p.replaced
            )
        } else {
            String::new()
        },
        p.problems.len(),
        if p.problems.is_empty() { "" } else { ":" }
    );
    for q in p.problems.iter().take(SHOWN) {
        let mut about = vec![];
        if let Some(i) = &q.item_id {
            about.push(format!("item {i}"));
        }
        if let Some(m) = &q.model {
            about.push(format!("model {m}"));
        }
        if let Some(w) = &q.person {
            about.push(format!("by {w}"));
        }
        s += &format!(
            "  {}: task {} ({}): {}: {}\n",
            p.export,
            q.task_id.map_or("?".into(), |i| i.to_string()),
            about.join(", "),
            q.field,
            q.reason
        );
    }
    if p.problems.len() > SHOWN {
        s += &format!(
            "  … and {} more (all in --json)\n",
            p.problems.len() - SHOWN
        );
    }
    s
}

fn value(a: &crate::benchmark::review::judging::Agreement) -> String {
    match a.value {
        Some(v) => format!("{v:.3} (n {})", a.n),
        None => format!("undefined (n {}: under two units, or no spread)", a.n),
    }
}

/// A task's agreement with people, one block per metric, under its self-agreement lines.
pub(super) fn render_agreement(task: &str, by_metric: &BTreeMap<String, JudgeAgreement>) -> String {
    let mut s = String::new();
    for (m, g) in by_metric {
        let (scale, consensus) = if g.consensus == "majority" {
            ("hit / miss", "the people's majority")
        } else {
            ("0–5", "the people's mean")
        };
        s += &format!(
            "  {task}: {m}: the judge agrees with people ({} on {scale}, over the judgments both made):\n",
            g.measure
        );
        for (p, a) in &g.per_person {
            s += &format!("      judge vs {p}: {}\n", value(a));
        }
        let ties = if g.ties > 0 {
            format!("; {} tie(s) without a majority left out", g.ties)
        } else {
            String::new()
        };
        s += &format!(
            "      judge vs {consensus}: {}{ties}\n",
            value(&g.with_consensus)
        );
        s += &format!(
            "      people among themselves: {}\n",
            value(&g.among_people)
        );
        if g.unjudged_by_judge > 0 {
            s += &format!(
                "      {} of {} judgment(s) people made the judge left unjudged: not compared\n",
                g.unjudged_by_judge, g.judged_by_people
            );
        }
    }
    s
}
