//! What `--people EXPORT.json` read and how the judge agreed with people: the report's types
//! and their text, apart from the reading (`people_read`) so the task report can show them.

use crate::benchmark::review::judging::JudgeAgreement;
use serde::Serialize;
use std::collections::BTreeMap;

/// The problems the text shows; the JSON report has them all.
const SHOWN: usize = 20;

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
