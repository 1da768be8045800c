//! The benchmark item table of a run: one line per `items` stage (task) with its format and
//! origin, the videos and items, kept, rejected (by reason), for people to review, and how many
//! judgments the drafted ones took; and each item's decision. `vidcurate items` prints it,
//! `rethreshold --set STAGE.min_score=…` stores the decisions under new thresholds.
//!
//! Reads the committed rows of every `items` stage (current fingerprints) through the run
//! reader. Drafted items are decided again from their stored rounds under the pipeline's own
//! `select` or the override values (`rounds::reselect`), so the table follows a new threshold
//! with no call; an item whose loop stopped before the rounds a stricter threshold needs is
//! counted apart (a run refines it). Writes nothing; calls nothing.

use crate::benchmark::rounds::{LoopRule, Reselected, reselect, rounds_of};
use crate::error::RunError;
use crate::record::BenchItem;
use crate::stages::selection::Override;
use crate::store::run::RunView;
use crate::store::shards::read_table;
use std::collections::{BTreeMap, HashMap};

/// One task's line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskLine {
    pub stage: String,
    pub task: String,
    pub format: String,
    pub origin: String,
    pub videos: usize,
    pub items: usize,
    pub kept: usize,
    pub rejected: usize,
    pub for_review: usize,
    /// Drafted items a stricter threshold would refine further (a run, not this table).
    pub needs_rounds: usize,
    /// Judgments per drafted item, summed (for the mean).
    pub judgments: usize,
    pub reasons: BTreeMap<String, usize>,
}

/// One item's decision under the thresholds the table was made with.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ItemDecision {
    pub stage: String,
    pub task: String,
    pub video_id: String,
    pub item_id: String,
    pub kept: bool,
    /// Why it is not kept (a format's code, `judged_below`, `needs_rounds`); empty if kept.
    pub reason: String,
}

/// The item table of a run's `items` stages under their pipeline `select` values with
/// `overrides` (`STAGE.KEY=VALUE`, STAGE an items stage), and every item's decision.
pub async fn table(
    run: &RunView,
    overrides: &[Override],
) -> Result<(Vec<TaskLine>, Vec<ItemDecision>), RunError> {
    let selects = run.selects();
    let mut decisions = vec![];
    let mut out = vec![];
    for s in run
        .manifest
        .stages
        .iter()
        .filter(|s| s.kind == super::KIND.name)
    {
        let mut select = selects.get(&s.id).cloned().unwrap_or_default();
        for o in overrides.iter().filter(|o| o.stage == s.id) {
            select.insert(o.key.clone(), o.value.clone());
        }
        let rule: LoopRule = toml::Value::Table(select)
            .try_into()
            .map_err(|e| RunError::Config(format!("{}: select: {e}", s.id)))?;
        crate::stages::Thresholds::check(&rule)
            .map_err(|e| RunError::Config(format!("{}.{}: {}", s.id, e.key, e.message)))?;
        let rows: HashMap<String, Vec<BenchItem>> =
            read_table(&run.store, &s.id, &s.fingerprint, true)
                .await?
                .rows()?;
        out.push(line(&s.id, &rows, &rule, &mut decisions));
    }
    if let Some(o) = overrides
        .iter()
        .find(|o| !out.iter().any(|l| l.stage == o.stage))
    {
        return Err(RunError::Config(format!(
            "--set {}.{}: the run has no items stage {:?}",
            o.stage, o.key, o.stage
        )));
    }
    Ok((out, decisions))
}

fn line(
    stage: &str,
    rows: &HashMap<String, Vec<BenchItem>>,
    rule: &LoopRule,
    decisions: &mut Vec<ItemDecision>,
) -> TaskLine {
    let mut l = TaskLine {
        stage: stage.to_string(),
        videos: rows.len(),
        ..Default::default()
    };
    let mut videos: Vec<&String> = rows.keys().collect();
    videos.sort();
    for (video, r) in videos
        .into_iter()
        .flat_map(|v| rows[v].iter().map(move |r| (v, r)))
    {
        (l.task, l.format, l.origin) = (r.task.clone(), r.format.clone(), r.origin.clone());
        l.items += 1;
        l.for_review += usize::from(r.for_review);
        let mut kept = r.kept;
        let mut reason = r
            .reject_codes
            .first()
            .cloned()
            .unwrap_or_else(|| "rejected".into());
        let rounds = rounds_of(r);
        let judged = rounds.iter().filter(|x| x.judgment.is_some()).count();
        l.judgments += judged;
        if judged > 0 {
            match reselect(&rounds, rule) {
                Reselected::Keep { .. } => kept = true,
                Reselected::Reject { .. } => (kept, reason) = (false, "judged_below".into()),
                Reselected::NeedsRounds => {
                    l.needs_rounds += 1;
                    (kept, reason) = (false, "needs_rounds".into());
                }
            }
        }
        decisions.push(ItemDecision {
            stage: stage.to_string(),
            task: r.task.clone(),
            video_id: video.clone(),
            item_id: r.item_id.clone(),
            kept,
            reason: if kept { String::new() } else { reason.clone() },
        });
        if kept {
            l.kept += 1;
        } else {
            l.rejected += 1;
            *l.reasons.entry(reason).or_default() += 1;
        }
    }
    l
}

fn reasons(l: &TaskLine) -> String {
    l.reasons
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mean_judgments(l: &TaskLine) -> String {
    let drafted = if l.origin == "drafted" { l.items } else { 0 };
    if drafted == 0 {
        "-".into()
    } else {
        format!("{:.2}", l.judgments as f64 / drafted as f64)
    }
}

/// Column names and one line's cells, shared by the printed table and the CSV.
const HEAD: [&str; 12] = [
    "stage",
    "task",
    "format",
    "origin",
    "videos",
    "items",
    "kept",
    "rejected",
    "for review",
    "needs rounds",
    "judgments per item",
    "rejected by reason",
];

fn cells(l: &TaskLine) -> [String; 12] {
    [
        l.stage.clone(),
        l.task.clone(),
        l.format.clone(),
        l.origin.clone(),
        l.videos.to_string(),
        l.items.to_string(),
        l.kept.to_string(),
        l.rejected.to_string(),
        l.for_review.to_string(),
        l.needs_rounds.to_string(),
        mean_judgments(l),
        reasons(l),
    ]
}

/// The table as printed (Markdown, so it pastes into a card or a README): every column but the
/// stage id and the needs-rounds count, which the note under it gives.
pub fn render(t: &[TaskLine]) -> String {
    let shown: Vec<usize> = (1..12).filter(|i| *i != 9).collect();
    let row = |c: &[String]| {
        format!(
            "| {} |\n",
            shown
                .iter()
                .map(|i| c[*i].as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        )
    };
    let head: Vec<String> = HEAD.iter().map(|h| h.to_string()).collect();
    let mut s = row(&head);
    s += &format!(
        "|{}\n",
        shown
            .iter()
            .map(|i| if *i < 4 || *i == 11 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for l in t {
        s += &row(&cells(l));
    }
    let needs: usize = t.iter().map(|l| l.needs_rounds).sum();
    if needs > 0 {
        s += &format!(
            "\n{needs} drafted item(s) stopped before the rounds this threshold asks for: a run (not this table) refines them.\n"
        );
    }
    s
}

pub fn csv(t: &[TaskLine]) -> String {
    let quote = |c: &str| {
        if c.contains([',', '"']) {
            format!("\"{}\"", c.replace('"', "\"\""))
        } else {
            c.to_string()
        }
    };
    let mut s = HEAD
        .iter()
        .map(|h| h.replace(' ', "_"))
        .collect::<Vec<_>>()
        .join(",")
        + "\n";
    for l in t {
        s += &(cells(l)
            .iter()
            .map(|c| quote(c))
            .collect::<Vec<_>>()
            .join(",")
            + "\n");
    }
    s
}
