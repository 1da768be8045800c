//! The task report as text.

use super::{TaskReport, TasksReport};
use crate::evaluation::judge::JudgeInfo;
use crate::evaluation::people_report;

/// The report as text: one line per task and metric, grouped by category, then `--by`.
pub fn render(r: &TasksReport) -> String {
    let mut s = r.split.line();
    s += &format!(
        "{} predictions; standard errors clustered by video; unread and missing answers are wrong and stay in the denominator\n\n",
        r.predictions
    );
    s += &format!(
        "{:<14} {:<6} {:<17} {:>6} {:<26} {:>9} {:>8} {:>13}\n",
        "category", "task", "format", "items", "metric", "value", "se", "read/unread/-"
    );
    let mut cats: Vec<&str> = r.tasks.iter().map(|t| t.category.as_str()).collect();
    cats.dedup();
    let mut seen = std::collections::BTreeSet::new();
    for c in cats.into_iter().filter(|c| seen.insert(*c)) {
        for t in r.tasks.iter().filter(|t| t.category == c) {
            s += &task_lines(c, t);
        }
    }
    let unread: Vec<String> = r
        .tasks
        .iter()
        .filter(|t| !t.unread_codes.is_empty())
        .map(|t| {
            let codes: Vec<String> = t
                .unread_codes
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            format!("{}: {}", t.task, codes.join(", "))
        })
        .collect();
    if !unread.is_empty() {
        s += &format!("\nunread answers by reason: {}\n", unread.join("; "));
    }
    if let Some(j) = &r.judge {
        s += &judging(r, j);
    }
    if r.tasks.iter().any(|t| !t.not_scored.is_empty()) {
        s += "\n`judge`: a judged metric (hit rates, factual consistency, theme relevance, completeness): give `--judge FILE` to score it; no number is guessed for it.\n";
    }
    if let Some(col) = &r.by_column {
        s += &format!("\nby {col}:\n");
        for t in &r.tasks {
            for (g, ms) in &t.by {
                for (m, v) in ms {
                    s += &format!(
                        "  {:<6} {:<16} {:<20} {:.4} ± {:.4} (n {})\n",
                        t.task, g, m, v.mean, v.se, v.n
                    );
                }
            }
        }
    }
    s
}

/// One task's rows of the table (category `c`): its metrics, Macro-F1, and those left to a
/// judge.
fn task_lines(c: &str, t: &TaskReport) -> String {
    let mut s = String::new();
    let counts = format!("{}/{}/{}", t.read, t.unread, t.missing);
    let mut lines: Vec<(String, String, String)> = t
        .metrics
        .iter()
        .map(|(m, v)| (m.clone(), format!("{:.4}", v.mean), format!("{:.4}", v.se)))
        .collect();
    if let Some(f) = t.macro_f1 {
        lines.push(("macro_f1".into(), format!("{f:.4}"), "-".into()));
    }
    for m in &t.not_scored {
        lines.push((m.clone(), "judge".into(), "-".into()));
    }
    for (m, v, se) in lines {
        s += &format!(
            "{:<14} {:<6} {:<17} {:>6} {:<26} {:>9} {:>8} {:>13}\n",
            c, t.task, t.format, t.items, m, v, se, counts
        );
    }
    s
}

/// Who judged and how, what people's export gave, and per task what stayed unjudged and how
/// far the judge agrees with itself and with people.
fn judging(r: &TasksReport, j: &JudgeInfo) -> String {
    let mut s = format!(
        "\njudged by {} on {} (prompts {}, temperature {}, {} sample(s)); calls {}\n",
        j.model,
        j.service,
        j.prompts,
        j.temperature,
        j.samples,
        r.tasks.iter().map(|t| t.judge_calls).sum::<usize>()
    );
    s += &people_report::render_read(r.people.as_ref());
    for t in &r.tasks {
        for (why, n) in &t.unjudged {
            s += &format!(
                "  {}: {n} judgment(s) unjudged ({why}): left out, never scored 0 or 1\n",
                t.task
            );
        }
        for (m, n) in &t.unjudged_items {
            s += &format!(
                "  {}: {m}: {n} item(s) with no judged element, left out of the mean\n",
                t.task
            );
        }
        for (m, a) in &t.self_agreement {
            let kind = if m.starts_with("hit_rate.") {
                "Cohen's kappa"
            } else {
                "Krippendorff's alpha"
            };
            s += &format!(
                "  {}: {m}: the judge agrees with itself over two samples: {kind} {a:.3}\n",
                t.task
            );
        }
        s += &people_report::render_agreement(&t.task, &t.people_agreement);
    }
    s
}
