//! `vidcurate evaluate RELEASE PREDICTIONS` on a questions release: a model's answers to the
//! multiple-choice items, scored as HarmVideoBench reports them (accuracy per level and their
//! macro average, the headline) and more carefully than the common harnesses do:
//!
//! - every answer is parsed robustly ("B", "(B)", "Answer: b", "The answer is B because…",
//!   "答案：B", or the option's own text), and one that names no option, or several, counts as
//!   wrong and is reported: it never leaves the denominator (lmms-eval drops empty answers, which
//!   lifts the accuracy of a model that refuses);
//! - an item without a prediction counts as wrong and is reported;
//! - with predictions for rotated option orders (`rotation` r: letter i shows option (i + r) mod
//!   n), CircularEval: an item counts only if every rotation is answered right;
//! - standard errors are clustered by video (one video's items are correlated): for a mean over
//!   items, sqrt(G / (G - 1) · Σ_g e_g²) with e_g the video's summed influence, the macro average
//!   through the same formula with each item weighted 1 / (L · n_level);
//! - random chance (the mean of 1 / options) and, when the release carries the blind stage's
//!   counts, the blind baseline (a text-only model's mean accuracy over the same items).
//!
//! Reads: the release's `questions/*.parquet` (the split scored, `--split`) and the predictions
//! (CSV, JSONL or Parquet: `item_id`, `prediction` or `answer`, optional `rotation`). Writes: its
//! report only, or with `--rotations-out` the split's items' rotated variants to give a model.
//! Calls nothing.

mod items;
mod parse;

pub use items::{Released, read_items};
pub use parse::{parse_answer, rotated};

use super::split::{Scope, SplitScored};
use super::{Row, read_rows};
use crate::benchmark::score::clustered;
use crate::error::{RunError, io};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

/// One released item, as scoring needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub item_id: String,
    pub video_id: String,
    pub level: String,
    pub question: String,
    pub options: Vec<String>,
    /// The correct option's index.
    pub answer: usize,
    /// The `--by` column's value ("" without `--by`).
    pub group: String,
    /// The blind stage's right share of samples, when released.
    pub blind: Option<f64>,
}

/// A mean over items, its clustered standard error, and what went into it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Score {
    pub n: usize,
    pub correct: usize,
    /// Items whose answer named no option (or several).
    pub unparsed: usize,
    /// Items without a prediction (CircularEval: without every rotation).
    pub missing: usize,
    pub accuracy: f64,
    /// Clustered by video.
    pub se: f64,
    pub videos: usize,
}

/// Per level, the macro average over levels and the micro average over items.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Scores {
    pub levels: BTreeMap<String, Score>,
    pub macro_avg: f64,
    pub macro_se: f64,
    pub micro: Score,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct QuestionReport {
    /// The split scored.
    pub split: SplitScored,
    /// Levels in the release's order.
    pub level_order: Vec<String>,
    pub all: Scores,
    /// CircularEval, when the predictions give rotations.
    pub circular: Option<Scores>,
    /// Per value of `--by`.
    pub by: BTreeMap<String, Scores>,
    pub by_column: Option<String>,
    pub chance: f64,
    /// The blind stage's mean accuracy over the items (None: not released).
    pub blind: Option<f64>,
    /// Up to 10 answers that named no option, with where they were read.
    pub unparsed_examples: Vec<String>,
}

/// Means with standard errors clustered by video, per level and over levels.
pub fn scores(
    items: &[&Item],
    right: &HashMap<String, bool>,
    unparsed: &HashSet<String>,
    missing: &HashSet<String>,
    order: &[String],
) -> Scores {
    let y = |it: &Item| f64::from(u8::from(right.get(&it.item_id).copied().unwrap_or(false)));
    let score = |set: &[&Item]| -> Score {
        let n = set.len();
        let correct = set.iter().filter(|i| y(i) == 1.0).count();
        let mean = if n == 0 {
            0.0
        } else {
            correct as f64 / n as f64
        };
        let weights: Vec<(&str, f64)> = set
            .iter()
            .map(|i| (i.video_id.as_str(), (y(i) - mean) / n as f64))
            .collect();
        let (se, videos) = clustered(&weights);
        Score {
            n,
            correct,
            unparsed: set.iter().filter(|i| unparsed.contains(&i.item_id)).count(),
            missing: set.iter().filter(|i| missing.contains(&i.item_id)).count(),
            accuracy: mean,
            se,
            videos,
        }
    };
    let mut out = Scores {
        micro: score(items),
        ..Default::default()
    };
    let present: Vec<&String> = order
        .iter()
        .filter(|l| items.iter().any(|i| &i.level == *l))
        .collect();
    let mut influence = vec![];
    for l in &present {
        let set: Vec<&Item> = items.iter().copied().filter(|i| &i.level == *l).collect();
        let s = score(&set);
        let (nl, big_l) = (set.len() as f64, present.len() as f64);
        for it in &set {
            influence.push((it.video_id.as_str(), (y(it) - s.accuracy) / (big_l * nl)));
        }
        out.macro_avg += s.accuracy / big_l;
        out.levels.insert((*l).clone(), s);
    }
    out.macro_se = clustered(&influence).0;
    out
}

/// Scores the predictions file against the items of the split `scope` scores; predictions for
/// items of other splits are counted and left out.
pub fn evaluate(
    release: &Path,
    predictions: &Path,
    by: Option<&str>,
    scope: &Scope,
) -> Result<QuestionReport, RunError> {
    let Released {
        items,
        order,
        others,
    } = read_items(release, by, scope)?;
    let index: HashMap<&str, &Item> = items.iter().map(|i| (i.item_id.as_str(), i)).collect();
    let (rows, columns) = read_rows(predictions)?;
    let text_col = super::tasks::answer_column(predictions, &columns)?;
    let Answered {
        right,
        unparsed_at,
        rotations,
        other,
    } = read_answers(&rows, &index, &others, text_col)?;
    let all: Vec<&Item> = items.iter().collect();
    let plain: HashMap<String, bool> = items
        .iter()
        .map(|i| {
            (
                i.item_id.clone(),
                right.get(&(i.item_id.clone(), 0)).copied().unwrap_or(false),
            )
        })
        .collect();
    let missing: HashSet<String> = items
        .iter()
        .filter(|i| !right.contains_key(&(i.item_id.clone(), 0)))
        .map(|i| i.item_id.clone())
        .collect();
    let unparsed: HashSet<String> = unparsed_at
        .keys()
        .filter(|(_, r)| *r == 0)
        .map(|(i, _)| i.clone())
        .collect();
    let mut report = QuestionReport {
        split: scope.scored("items", items.len(), items.len() + others.len(), other),
        all: scores(&all, &plain, &unparsed, &missing, &order),
        level_order: order.clone(),
        by_column: by.map(str::to_string),
        chance: items
            .iter()
            .map(|i| 1.0 / i.options.len() as f64)
            .sum::<f64>()
            / items.len() as f64,
        ..Default::default()
    };
    let blind: Vec<f64> = items.iter().filter_map(|i| i.blind).collect();
    if !blind.is_empty() {
        report.blind = Some(blind.iter().sum::<f64>() / blind.len() as f64);
    }
    if rotations {
        report.circular = Some(circular_scores(&items, &right, &unparsed_at, &order));
    }
    if by.is_some() {
        report.by = group_scores(&items, &plain, &unparsed, &missing, &order);
    }
    let mut examples: Vec<&String> = unparsed_at.values().collect();
    examples.sort();
    report.unparsed_examples = examples.into_iter().take(10).cloned().collect();
    Ok(report)
}

/// An (item, rotation) of the predictions.
type Key = (String, usize);

/// What the predictions answered: (item, rotation) → right, where each unparsed answer was
/// read, whether any prediction names a rotation, and how many rows answered items of other
/// splits.
struct Answered {
    right: HashMap<Key, bool>,
    unparsed_at: HashMap<Key, String>,
    rotations: bool,
    other: usize,
}

/// Reads every prediction row against its item (a row for an item of another split, in
/// `others`, is counted and skipped); an unknown item, a bad rotation or a second prediction
/// for an (item, rotation) is an error naming its line.
fn read_answers(
    rows: &[Row],
    index: &HashMap<&str, &Item>,
    others: &HashSet<String>,
    text_col: &str,
) -> Result<Answered, RunError> {
    let mut right: HashMap<Key, bool> = HashMap::new();
    let mut seen: HashMap<Key, String> = HashMap::new();
    let mut unparsed_at: HashMap<Key, String> = HashMap::new();
    let mut rotations = false;
    let mut other = 0;
    for r in rows {
        let id = r
            .get("item_id")
            .ok_or_else(|| RunError::Config(format!("{}: no item_id", r.at)))?;
        if others.contains(id) {
            other += 1;
            continue;
        }
        let Some(item) = index.get(id) else {
            return Err(RunError::Config(format!(
                "{}: item_id {id:?} is not in the release",
                r.at
            )));
        };
        let n = item.options.len();
        let rot = match r.get("rotation").filter(|s| !s.is_empty()) {
            None => 0,
            Some(s) => {
                rotations = true;
                s.parse::<usize>().ok().filter(|&k| k < n).ok_or_else(|| {
                    RunError::Config(format!(
                        "{}: rotation {s:?} is not one of 0..{} (the item has {n} options)",
                        r.at,
                        n - 1
                    ))
                })?
            }
        };
        let key = (id.to_string(), rot);
        if let Some(first) = seen.insert(key.clone(), r.at.clone()) {
            return Err(RunError::Config(format!(
                "{}: a second prediction for item {id:?} (rotation {rot}), first at {first}",
                r.at
            )));
        }
        let answer = r.get(text_col).unwrap_or("");
        let shown = rotated(&item.options, rot);
        let ok = match parse_answer(answer, &shown) {
            Some(s) => (s + rot) % n == item.answer,
            None => {
                unparsed_at.insert(key.clone(), format!("{}: {answer:?}", r.at));
                false
            }
        };
        right.insert(key, ok);
    }
    Ok(Answered {
        right,
        unparsed_at,
        rotations,
        other,
    })
}

/// CircularEval: an item is right only if every rotation of it is, missing unless every
/// rotation was answered, unparsed if any rotation's answer was.
fn circular_scores(
    items: &[Item],
    right: &HashMap<Key, bool>,
    unparsed_at: &HashMap<Key, String>,
    order: &[String],
) -> Scores {
    let all: Vec<&Item> = items.iter().collect();
    let every = |i: &Item, f: &dyn Fn(&(String, usize)) -> bool| {
        (0..i.options.len()).all(|r| f(&(i.item_id.clone(), r)))
    };
    let c_right: HashMap<String, bool> = items
        .iter()
        .map(|i| {
            (
                i.item_id.clone(),
                every(i, &|k| right.get(k).copied().unwrap_or(false)),
            )
        })
        .collect();
    let c_missing: HashSet<String> = items
        .iter()
        .filter(|i| !every(i, &|k| right.contains_key(k)))
        .map(|i| i.item_id.clone())
        .collect();
    let c_unparsed: HashSet<String> = unparsed_at.keys().map(|(i, _)| i.clone()).collect();
    scores(&all, &c_right, &c_unparsed, &c_missing, order)
}

/// The scores per value of `--by`.
fn group_scores(
    items: &[Item],
    plain: &HashMap<String, bool>,
    unparsed: &HashSet<String>,
    missing: &HashSet<String>,
    order: &[String],
) -> BTreeMap<String, Scores> {
    let mut out = BTreeMap::new();
    let groups: BTreeSet<&str> = items.iter().map(|i| i.group.as_str()).collect();
    for g in groups {
        let set: Vec<&Item> = items.iter().filter(|i| i.group == g).collect();
        out.insert(g.to_string(), scores(&set, plain, unparsed, missing, order));
    }
    out
}

fn scores_table(s: &Scores, order: &[String], indent: &str) -> String {
    let mut t = format!(
        "{indent}{:<26} {:>6} {:>8} {:>9} {:>8} {:>9} {:>8}\n",
        "level", "items", "correct", "accuracy", "± se", "unparsed", "missing"
    );
    let line = |name: &str, x: &Score| {
        format!(
            "{indent}{name:<26} {:>6} {:>8} {:>9.4} {:>8.4} {:>9} {:>8}\n",
            x.n, x.correct, x.accuracy, x.se, x.unparsed, x.missing
        )
    };
    for l in order {
        if let Some(x) = s.levels.get(l) {
            t += &line(l, x);
        }
    }
    t += &format!(
        "{indent}{:<26} {:>6} {:>8} {:>9.4} {:>8.4}\n",
        "macro (mean of levels)", "", "", s.macro_avg, s.macro_se
    );
    t += &line("micro (all items)", &s.micro);
    t
}

/// The report as printed.
pub fn render(r: &QuestionReport) -> String {
    let mut t = r.split.line();
    t += &format!(
        "{} items of {} videos; standard errors clustered by video\n",
        r.all.micro.n, r.all.micro.videos
    );
    t += &scores_table(&r.all, &r.level_order, "");
    t += &format!("random chance {:.4}", r.chance);
    match r.blind {
        Some(b) => t += &format!("; blind baseline {b:.4} (the blind stage's text-only answers)\n"),
        None => t += "; no blind baseline (the run had no blind stage)\n",
    }
    if let Some(c) = &r.circular {
        t += "\nCircularEval (an item counts only if every rotation of its options is answered right):\n";
        t += &scores_table(c, &r.level_order, "");
    }
    for (g, s) in &r.by {
        t += &format!("\n{} = {g}:\n", r.by_column.as_deref().unwrap_or("group"));
        t += &scores_table(s, &r.level_order, "  ");
    }
    if !r.unparsed_examples.is_empty() {
        t += "\nanswers that name no option (counted as wrong):\n";
        for e in &r.unparsed_examples {
            t += &format!("  {e}\n");
        }
    }
    t
}

/// The rotated variants of every item of the split `scope` scores as JSONL (item_id, rotation,
/// video_id, level, question, options as shown): what a model answers for CircularEval. The
/// answer is left out. Returns the lines written and what they cover.
pub fn write_rotations(
    release: &Path,
    out: &Path,
    scope: &Scope,
) -> Result<(usize, SplitScored), RunError> {
    let Released { items, others, .. } = read_items(release, None, scope)?;
    let mut s = String::new();
    let mut n = 0;
    for it in &items {
        for r in 0..it.options.len() {
            s += &serde_json::json!({
                "item_id": it.item_id, "rotation": r, "video_id": it.video_id,
                "level": it.level, "question": it.question, "options": rotated(&it.options, r),
            })
            .to_string();
            s.push('\n');
            n += 1;
        }
    }
    std::fs::write(out, s).map_err(io(out))?;
    Ok((
        n,
        scope.scored("items", items.len(), items.len() + others.len(), 0),
    ))
}

#[cfg(test)]
mod tests {
    use super::parse::tests::opts;
    use super::*;

    fn item(id: &str, video: &str, level: &str) -> Item {
        Item {
            item_id: id.into(),
            video_id: video.into(),
            level: level.into(),
            question: String::new(),
            options: opts(),
            answer: 0,
            group: String::new(),
            blind: None,
        }
    }

    #[test]
    fn clustered_errors_and_the_macro_average_by_hand() {
        // Videos v1 (2 items, both right), v2 (1 wrong, 1 right), v3 (1 wrong).
        let items = [
            item("a", "v1", "x"),
            item("b", "v1", "y"),
            item("c", "v2", "x"),
            item("d", "v2", "y"),
            item("e", "v3", "x"),
        ];
        let right: HashMap<String, bool> = [
            ("a", true),
            ("b", true),
            ("c", false),
            ("d", true),
            ("e", false),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into();
        let refs: Vec<&Item> = items.iter().collect();
        let s = scores(
            &refs,
            &right,
            &HashSet::new(),
            &HashSet::new(),
            &["x".into(), "y".into()],
        );
        assert!((s.micro.accuracy - 0.6).abs() < 1e-12);
        // e_g = Σ (y - 0.6) / 5: v1 0.8/5, v2 -0.2/5, v3 -0.6/5; G = 3.
        let ss: f64 = [0.8f64, -0.2, -0.6].iter().map(|e| (e / 5.0).powi(2)).sum();
        assert!((s.micro.se - (1.5 * ss).sqrt()).abs() < 1e-12);
        // Levels: x = 1/3, y = 1; macro 2/3.
        assert!((s.macro_avg - 2.0 / 3.0).abs() < 1e-12);
        // Influence: x items (y - 1/3) / (2 · 3), y items (y - 1) / (2 · 2) = 0.
        let e = [(2.0 / 3.0) / 6.0, (-1.0 / 3.0) / 6.0, (-1.0 / 3.0) / 6.0];
        let ss: f64 = e.iter().map(|x| x * x).sum();
        assert!((s.macro_se - (1.5 * ss).sqrt()).abs() < 1e-12);
        assert_eq!(s.levels["y"].se, 0.0);
    }
}
