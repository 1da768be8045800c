//! `annotate import` of task-item reviews: every review read back as a draft of the
//! reference, checked, merged with the stored ones and decided.

use super::{from_frames, list_control};
use crate::annotation::columns::Probe;
use crate::annotation::{Rule, strings};
use crate::benchmark::formats::Format;
use crate::benchmark::review::tasks::*;
use crate::benchmark::review::{DECISIONS, decide, merge_reviews};
use crate::benchmark::task::Task;
use crate::error::RunError;
use crate::record::BenchItem;
use crate::stages::items::{DraftContext, check_draft, fill_reference, run_tasks};
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The results of one annotation by control: the texts (one per entry), the choices, the
/// number, the time ranges in seconds.
#[derive(Default)]
struct Controls {
    texts: BTreeMap<String, Vec<String>>,
    choices: BTreeMap<String, Vec<String>>,
    number: Option<Value>,
    ranges: Option<Vec<[f64; 2]>>,
}

fn controls(result: &[Value], fps: f64) -> Controls {
    let mut c = Controls::default();
    for r in result {
        let name = r["from_name"].as_str().unwrap_or_default().to_string();
        let v = &r["value"];
        match r["type"].as_str().unwrap_or_default() {
            "textarea" => c.texts.entry(name).or_default().extend(strings(&v["text"])),
            "choices" => {
                c.choices.insert(name, strings(&v["choices"]));
            }
            "number" => c.number = Some(v["number"].clone()),
            "timelinelabels" => {
                let out = c.ranges.get_or_insert_with(Vec::new);
                for range in v["ranges"].as_array().into_iter().flatten() {
                    if let (Some(s), Some(e)) = (range["start"].as_f64(), range["end"].as_f64()) {
                        out.push(from_frames(s, e, fps));
                    }
                }
            }
            _ => {}
        }
    }
    c
}

/// A range within one frame of one of the item's own keeps that one: the timeline cannot say
/// more, and an untouched range must not read as an edit.
fn snap(r: [f64; 2], made: &BenchItem, fps: f64) -> [f64; 2] {
    let near = |a: f64, b: f64| (a - b).abs() <= 1.0 / fps + 1e-9;
    made.answer_starts
        .iter()
        .zip(&made.answer_ends)
        .find(|(s, e)| near(r[0], **s) && near(r[1], **e))
        .map_or(r, |(s, e)| [*s, *e])
}

/// The control a draft problem is about.
fn control_of(format: Format, message: &str, fields: &[String]) -> String {
    if let Some(f) = fields.iter().find(|f| message.contains(&format!("`{f}`"))) {
        return list_control(f);
    }
    match format {
        Format::SingleChoice | Format::MultipleChoice => "answer",
        Format::Count => "answer_count",
        Format::TimeRanges => "ranges",
        _ => "answer_text",
    }
    .into()
}

/// The review's reference as the drafting stage's JSON: a control the reviewer left out keeps
/// the item's value (Label Studio omits untouched controls).
fn as_draft(task: &Task, made: &BenchItem, c: &Controls, fps: f64) -> Value {
    let mut v = json!({"rationale": made.rationale});
    let text = |name: &str, made: &str| {
        c.texts
            .get(name)
            .map(|t| t.join("\n").trim().to_string())
            .unwrap_or_else(|| made.to_string())
    };
    match task.format {
        Format::SingleChoice => {
            v["answer"] = match c.choices.get("answer") {
                Some(ls) if ls.len() == 1 => json!(ls[0]),
                Some(ls) => json!(ls.join(", ")),
                None => json!(made.answer),
            }
        }
        Format::MultipleChoice => {
            v["answer"] = match c.choices.get("answer") {
                Some(ls) => json!(ls),
                None => json!(made.answer.split(',').collect::<Vec<_>>()),
            }
        }
        Format::Count => v["answer"] = c.number.clone().unwrap_or(json!(made.answer_count)),
        Format::TimeRanges => {
            let r: Vec<[f64; 2]> = match &c.ranges {
                Some(r) => r.iter().map(|x| snap(*x, made, fps)).collect(),
                None => made.reference().ranges(),
            };
            v["answer"] = json!(r);
        }
        Format::OpenText => {
            let t = text("answer_text", &made.answer_text);
            v["answer"] = json!(t);
            for f in &task.file.reference.fields {
                v[f.as_str()] = json!(t);
            }
        }
        Format::TaggedReasoning => {
            let t = text("answer_text", &made.answer_text);
            v["answer"] = json!(format!(
                "<think>{t}</think><result>{}</result>",
                made.answer_label
            ));
        }
        Format::ReferenceList => {}
    }
    if matches!(task.format, Format::ReferenceList | Format::TaggedReasoning) {
        for (i, f) in task.file.reference.fields.iter().enumerate() {
            let items: Vec<String> = match c.texts.get(&list_control(f)) {
                Some(t) => t
                    .iter()
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect(),
                None => made.reference_items.get(i).cloned().unwrap_or_default(),
            };
            v[f.as_str()] = json!(items);
        }
    }
    v
}

/// One annotation as a review of `made`. Errs with (control, reason).
pub(super) fn review_of(
    task: &Task,
    made: &BenchItem,
    result: &[Value],
    media: (f64, Option<f64>),
    who: &str,
    video: &str,
) -> Result<TaskReview, Vec<(String, String)>> {
    let (fps, duration) = media;
    let c = controls(result, fps);
    let one = |k: &str| c.choices.get(k).and_then(|v| v.first()).cloned();
    let decision = one("decision").unwrap_or_default();
    let reason = c
        .texts
        .get("reject_reason")
        .map(|t| t.join(" ").trim().to_string())
        .unwrap_or_default();
    let mut reference = made.reference();
    if !DECISIONS.contains(&decision.as_str()) {
        return Err(vec![(
            "decision".into(),
            format!("{decision:?} is not one of accept, edit, reject"),
        )]);
    }
    if decision == "reject" {
        if reason.is_empty() {
            return Err(vec![(
                "reject_reason".into(),
                "missing: a rejection says why".into(),
            )]);
        }
    } else {
        let draft = as_draft(task, made, &c, fps);
        let cx = DraftContext {
            options: &made.options,
            duration_secs: duration,
            label: None,
        };
        if let Err(p) = check_draft(task, &draft, &cx) {
            let field = control_of(task.format, &p.message, &task.file.reference.fields);
            return Err(vec![(field, format!("{} ({})", p.message, p.code))]);
        }
        let mut row = made.clone();
        row.set_reference(ReferenceColumns::default());
        fill_reference(&mut row, task, &draft.to_string(), &made.options, duration);
        reference = row.reference();
    }
    let mut r = TaskReview {
        item_id: made.item_id.clone(),
        video_id: video.to_string(),
        task: task.file.name.clone(),
        format: task.format.name().to_string(),
        annotator: who.to_string(),
        decision,
        reject_reason: reason,
        ..Default::default()
    };
    r.set_reference(reference);
    Ok(r)
}

/// Imports a Label Studio export of task-item reviews: checks every review, merges with the
/// stored ones, decides each item under `rule`, and stores the table and the report.
pub(in crate::annotation) async fn import_tasks(
    store: &Arc<dyn Store>,
    m: &Manifest,
    exported: &[Value],
    rule: &Rule,
    minor_at: f64,
) -> Result<TaskImportReport, RunError> {
    let stages = run_tasks(m)?;
    let made = made_items(store, &stages).await?;
    let probe = Probe::read(store, m).await?;
    let mut report = TaskImportReport {
        rule: rule.name(),
        minor_at,
        ..Default::default()
    };
    let mut fresh = vec![];
    for t in exported {
        fresh.extend(reviews_of_task(
            t,
            &stages,
            &made,
            &probe,
            minor_at,
            &mut report,
        ));
    }
    let (rows, changed) = merge_reviews(read_task_reviews(store).await?, fresh);
    report.changed = changed;
    report.reviews = rows.len();
    let decided = decide(&rows, rule, &mut report.pending);
    let senior = match rule {
        Rule::Reviewer(s) => Some(s.as_str()),
        _ => None,
    };
    for (_, _, task) in &stages {
        let name = &task.file.name;
        let d: Vec<&TaskReview> = decided.iter().filter(|r| &r.task == name).collect();
        let r: Vec<&TaskReview> = rows.iter().filter(|r| &r.task == name).collect();
        if !r.is_empty() {
            report
                .tasks
                .push(task_shares(name, task.format, &d, &r, senior));
        }
    }
    let all: Vec<TaskReview> = rows.into_iter().chain(decided).collect();
    crate::benchmark::review::store_reviews(store, (TASKS, TASKS, TASKS_REPORT), &all, &report)
        .await?;
    Ok(report)
}

/// The run's items by id: each one's video, the item and the index of its stage.
type MadeItems = HashMap<String, (String, BenchItem, usize)>;

/// Every item of the run's items stages (kept or not), by id.
async fn made_items(
    store: &Arc<dyn Store>,
    stages: &[(String, String, Task)],
) -> Result<MadeItems, RunError> {
    let mut made: MadeItems = HashMap::new();
    for (i, (stage, fingerprint, _)) in stages.iter().enumerate() {
        let items: HashMap<String, Vec<BenchItem>> =
            read_table(store, stage, fingerprint, true).await?.rows()?;
        for (v, rows) in items {
            for r in rows {
                made.insert(r.item_id.clone(), (v.clone(), r, i));
            }
        }
    }
    Ok(made)
}

/// The checked reviews of one exported task, classed against its item; what is kept out
/// (an unknown item, a review that does not check) goes to the report's problems, a
/// cancelled annotation to its count.
fn reviews_of_task(
    t: &Value,
    stages: &[(String, String, Task)],
    made: &MadeItems,
    probe: &Probe,
    minor_at: f64,
    report: &mut TaskImportReport,
) -> Vec<TaskReview> {
    let id = t["data"]["item_id"].as_str().unwrap_or_default();
    let Some((video, item, stage)) = made.get(id) else {
        report.problems.push(TaskProblem {
            task_id: t["id"].as_i64(),
            item_id: Some(id.into()),
            annotator: None,
            field: "data.item_id".into(),
            reason: "unknown item: not in this run's items tables".into(),
        });
        return vec![];
    };
    let task = &stages[*stage].2;
    let (fps, duration) = probe.of(video, t["data"]["fps"].as_f64());
    let made_ref = item.reference();
    let (cancelled, problems) = (&mut report.cancelled, &mut report.problems);
    crate::benchmark::review::task_reviews(t, id, cancelled, problems, |who, result| {
        let mut r = review_of(task, item, result, (fps, duration), who, video)?;
        r.edit_class = edit_class(task.format, &made_ref, &r, minor_at).into();
        Ok(r)
    })
}

/// The report as text: what was kept out, then one line per task.
pub fn render(r: &TaskImportReport) -> String {
    let decided: usize = r.tasks.iter().map(|t| t.decided).sum();
    let mut s = format!(
        "{} task reviews stored ({} new or replaced), {decided} items decided ({}), {} cancelled (kept out)\n",
        r.reviews, r.changed, r.rule, r.cancelled
    );
    s += &crate::benchmark::review::render_problems(&r.problems, &r.pending);
    s += &format!(
        "\n{:<6} {:<17} {:>7} {:>8} {:>6} {:>6} {:>8} {:>9} {:>14} {:>16}  {}\n",
        "task",
        "format",
        "decided",
        "accepted",
        "minor",
        "rewr.",
        "rejected",
        "retained",
        "decision kappa",
        "reference agr.",
        "measure"
    );
    let num = |x: Option<f64>, n: usize| x.map_or("-".into(), |k| format!("{k:.3} ({n})"));
    for t in &r.tasks {
        s += &format!(
            "{:<6} {:<17} {:>7} {:>8} {:>6} {:>6} {:>8} {:>8.1}% {:>14} {:>16}  {}\n",
            t.task,
            t.format,
            t.decided,
            t.accepted,
            t.minor_edit,
            t.rewritten,
            t.rejected,
            100.0 * t.retained,
            num(t.decision_kappa, t.decision_items),
            num(t.reference_agreement, t.reference_items),
            t.agreement_measure
        );
    }
    s += &format!(
        "(the agreement is the reviewers', without the senior, with the items compared in brackets: on accept / edit / reject, and on the reference of the items both kept; minor edit: the reference stays at least {:.2} alike)\n",
        r.minor_at
    );
    s
}
