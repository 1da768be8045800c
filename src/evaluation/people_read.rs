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
use super::people_report::{PeopleRead, Problem};
use super::tasks::TasksReport;
use crate::benchmark::review::judging::{JudgeAgreement, Unit, hit_agreement, rating_agreement};
use crate::error::RunError;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// (task, metric) → (item index, element) → person → hit; the same for ratings, element None.
type People<V> = BTreeMap<(String, String), BTreeMap<(usize, Option<usize>), BTreeMap<String, V>>>;

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

/// One control's single choice in one annotation, and where and by whom it was made.
struct Control<'c> {
    name: &'c str,
    choice: &'c str,
    at: &'c At<'c>,
    person: &'c str,
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
            let person = crate::benchmark::review::annotator_of(a);
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
        let c = Control {
            name,
            choice,
            at,
            person,
        };
        if let Some(k) = name
            .strip_prefix("hit_")
            .and_then(|k| k.parse::<usize>().ok())
        {
            self.hit(&c, k, j, slots);
        } else if RATINGS.contains(&name) {
            self.rating(&c, j);
        } else {
            let why = "no control of the judging project (hit_K or a rating)".to_string();
            self.problem(at, who, name, why);
        }
    }

    /// A `hit_K` control's hit or miss on the answer's reference element K.
    fn hit(&mut self, c: &Control, k: usize, j: &Judgeable, slots: &[Option<(String, usize)>]) {
        let (at, who, name) = (c.at, Some(c.person), c.name);
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
        let hit = match c.choice {
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
            .insert(c.person.into(), hit);
        self.kept(had.is_some(), c.person);
    }

    /// A rating control's 0–5 on the answer.
    fn rating(&mut self, c: &Control, j: &Judgeable) {
        let (at, who, name, choice) = (c.at, Some(c.person), c.name, c.choice);
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
            .insert(c.person.into(), v);
        self.kept(had.is_some(), c.person);
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
    scope: &super::split::Scope,
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
    let all = super::people::judgeables(release, predictions, scope)?;
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
