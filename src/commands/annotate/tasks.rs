//! The review of benchmark task items by people (MVFNDB's ten tasks, every answer format;
//! two reviewers and a senior as for question items), through Label Studio.
//!
//! `annotate export --task NAME|all` reads each `items` stage's kept items with their task file
//! (checked against the items' fingerprint), the media URLs, fps and durations as `annotate
//! export` makes them; it writes `OUT/<task>/label_config.xml` (the format's controls: options
//! to choose, a number, ranges on the video's timeline, the text, one entry per reference
//! element) and `OUT/<task>/tasks.json` (one task per item, the reference as a pre-annotation).
//! `annotate import` of such a project's JSON export reads every review back as a draft of the
//! reference and checks it with the same parser the drafting stage uses (a count below 0,
//! a reversed range, an empty list are kept out, naming task, reviewer and control), decides
//! each item under the rule, and stores `annotations/tasks.parquet` and
//! `annotations/tasks_report.json` (`benchmark::review::tasks`). Calls nothing; caches nothing.

use super::Rule;
use crate::benchmark::formats::{Format, option_label};
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

/// Marks an exported task as a task-item review (what `annotate import` recognises).
pub const KIND_KEY: &str = "review_kind";
const KIND: &str = "task_item";

/// A video as a task shows it: media URL, title, fps, duration.
pub(super) struct Media {
    pub url: String,
    pub title: String,
    pub fps: f64,
    pub duration: Option<f64>,
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The Label Studio control of a reference list field.
fn list_control(field: &str) -> String {
    format!("ref_{field}")
}

/// The label config of `task`'s review: the video, the question and what the item shows, the
/// decision, the format's controls, the reason of a rejection.
pub fn label_config(task: &Task, options: usize) -> String {
    let choices = |vals: &[String]| {
        vals.iter()
            .map(|v| format!("    <Choice value=\"{}\"/>\n", xml(v)))
            .collect::<String>()
    };
    let mut x = String::from(
        "<View>\n  <Header value=\"$title\"/>\n  <Video name=\"video\" value=\"$video\" frameRate=\"$fps\" sync=\"timeline\"/>\n  <Header value=\"$question\"/>\n  <Text name=\"shown\" value=\"$shown\"/>\n  <Header value=\"Decision: accept the reference as is, edit it below, or reject the item with a reason\"/>\n  <Choices name=\"decision\" toName=\"video\" choice=\"single\" required=\"true\">\n",
    );
    x += &choices(&DECISIONS.map(String::from));
    x += "  </Choices>\n";
    let text = |name: &str, head: &str, rows: u32, one: bool| {
        format!(
            "  <Header value=\"{}\"/>\n  <TextArea name=\"{name}\" toName=\"video\" rows=\"{rows}\"{} editable=\"true\"/>\n",
            xml(head),
            if one { " maxSubmissions=\"1\"" } else { "" }
        )
    };
    match task.format {
        Format::SingleChoice | Format::MultipleChoice => {
            let kind = if task.format == Format::SingleChoice {
                "single"
            } else {
                "multiple"
            };
            x += &format!(
                "  <Header value=\"Correct option{}\"/>\n  <Choices name=\"answer\" toName=\"video\" choice=\"{kind}\">\n",
                if kind == "multiple" {
                    "s (every one that applies)"
                } else {
                    ""
                }
            );
            x += &choices(
                &(0..options)
                    .map(|i| option_label(i, options))
                    .collect::<Vec<_>>(),
            );
            x += "  </Choices>\n";
        }
        Format::Count => {
            x += "  <Header value=\"The count\"/>\n  <Number name=\"answer_count\" toName=\"video\" min=\"0\"/>\n";
        }
        Format::TimeRanges => {
            x += "  <Header value=\"Every time range of the reference, on the timeline\"/>\n  <TimelineLabels name=\"ranges\" toName=\"video\">\n    <Label value=\"reference\" background=\"#3070d0\"/>\n  </TimelineLabels>\n";
        }
        Format::OpenText => x += &text("answer_text", "The reference text", 3, true),
        Format::TaggedReasoning => {
            x += &text(
                "answer_text",
                "The reasoning (the label is the dataset's)",
                4,
                true,
            )
        }
        Format::ReferenceList => {}
    }
    if matches!(task.format, Format::ReferenceList | Format::TaggedReasoning) {
        for f in &task.file.reference.fields {
            x += &text(
                &list_control(f),
                &format!("{f}: one element per entry"),
                1,
                false,
            );
        }
    }
    x += "  <Header value=\"Why rejected\"/>\n  <TextArea name=\"reject_reason\" toName=\"video\" rows=\"1\" maxSubmissions=\"1\" editable=\"true\"/>\n</View>\n";
    x
}

/// Label Studio's timeline counts frames from 1 and includes the end frame.
fn to_frames(secs: [f64; 2], fps: f64) -> (f64, f64) {
    (
        (secs[0] * fps).round() + 1.0,
        (secs[1] * fps).round().max(1.0),
    )
}

fn from_frames(start: f64, end: f64, fps: f64) -> [f64; 2] {
    [((start - 1.0).max(0.0)) / fps, end / fps]
}

fn textarea(name: &str, texts: &[String]) -> Value {
    json!({"from_name": name, "to_name": "video", "type": "textarea", "value": {"text": texts}})
}

/// The item's reference as Label Studio results: what the reviewer starts from.
fn as_results(task: &Task, it: &BenchItem, fps: f64) -> Vec<Value> {
    let mut r = vec![];
    match task.format {
        Format::SingleChoice | Format::MultipleChoice => {
            let labels: Vec<&str> = it.answer.split(',').filter(|l| !l.is_empty()).collect();
            r.push(json!({"from_name": "answer", "to_name": "video", "type": "choices", "value": {"choices": labels}}));
        }
        Format::Count => {
            if let Some(c) = it.answer_count {
                r.push(json!({"from_name": "answer_count", "to_name": "video", "type": "number", "value": {"number": c}}));
            }
        }
        Format::TimeRanges => {
            for (i, (s, e)) in it.answer_starts.iter().zip(&it.answer_ends).enumerate() {
                let (a, b) = to_frames([*s, *e], fps);
                r.push(json!({"id": format!("range{i}"), "from_name": "ranges", "to_name": "video", "type": "timelinelabels",
                    "value": {"ranges": [{"start": a, "end": b}], "timelinelabels": ["reference"]}}));
            }
        }
        Format::OpenText | Format::TaggedReasoning => {
            r.push(textarea("answer_text", &[it.answer_text.clone()]))
        }
        Format::ReferenceList => {}
    }
    if matches!(task.format, Format::ReferenceList | Format::TaggedReasoning) {
        for (f, items) in it.reference_fields.iter().zip(&it.reference_items) {
            r.push(textarea(&list_control(f), items));
        }
    }
    r
}

/// What the task shows besides the controls: the options, the label, the rationale, where a
/// derived reference came from.
fn shown(it: &BenchItem) -> String {
    let mut s = vec![];
    for (i, o) in it.options.iter().enumerate() {
        s.push(format!("{}. {o}", option_label(i, it.options.len())));
    }
    if !it.answer_label.is_empty() {
        s.push(format!("label: {}", it.answer_label));
    }
    if !it.target_text.is_empty() {
        s.push(format!("on-screen text asked about: {}", it.target_text));
    }
    if !it.rationale.is_empty() {
        s.push(format!("rationale: {}", it.rationale));
    }
    if !it.from_columns.is_empty() {
        s.push(format!("derived from {}", it.from_columns.join(", ")));
    }
    if it.for_review {
        s.push("a derived draft: confirm or correct it".into());
    }
    s.join("\n")
}

/// The run's items stages named by `names` (`all`: every one), with their tasks.
fn chosen(m: &Manifest, names: &[String]) -> Result<Vec<(String, String, Task)>, RunError> {
    let all = run_tasks(m)?;
    if all.is_empty() {
        return Err(RunError::Config(
            "the run has no items stage: there are no task items to review".into(),
        ));
    }
    if names.iter().any(|n| n == "all") {
        return Ok(all);
    }
    let known: Vec<String> = all.iter().map(|(_, _, t)| t.file.name.clone()).collect();
    for n in names {
        if !known.contains(n) {
            return Err(RunError::Config(format!(
                "--task {n}: the run has no items stage of that task (it has {}, or all)",
                known.join(", ")
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|(_, _, t)| names.contains(&t.file.name))
        .collect())
}

/// Writes one project per task, `out/<task>/`; returns the tasks and their item counts.
pub(super) async fn export_tasks(
    store: &Arc<dyn Store>,
    m: &Manifest,
    names: &[String],
    videos: &[String],
    media: &dyn Fn(&str) -> Media,
    out: &std::path::Path,
) -> Result<Vec<(String, usize)>, RunError> {
    let mut done = vec![];
    for (stage, fingerprint, task) in chosen(m, names)? {
        let items: HashMap<String, Vec<BenchItem>> = read_table(store, &stage, &fingerprint, true)
            .await?
            .rows()?;
        let mut tasks = vec![];
        let mut options = task.file.options.len();
        for v in videos {
            for it in items.get(v).into_iter().flatten().filter(|i| i.kept) {
                options = options.max(it.options.len());
                let md = media(v);
                tasks.push(json!({
                    "data": {
                        KIND_KEY: KIND, "item_id": it.item_id, "task": task.file.name,
                        "stage": stage, "format": task.format.name(), "video_id": v,
                        "video": md.url, "title": md.title, "fps": md.fps,
                        "duration_secs": md.duration, "question": it.question,
                        "shown": shown(it),
                    },
                    "predictions": [{"model_version": format!("vidcurate-{}", it.origin), "result": as_results(&task, it, md.fps)}],
                }));
            }
        }
        let dir = out.join(&task.file.name);
        let write = |name: &str, bytes: Vec<u8>| {
            let p = dir.join(name);
            crate::store::write_file(&p, &bytes)
                .map_err(|e| RunError::io(p.display().to_string(), e))
        };
        write(
            "tasks.json",
            serde_json::to_vec_pretty(&tasks).unwrap_or_default(),
        )?;
        write(
            "label_config.xml",
            label_config(&task, options).into_bytes(),
        )?;
        done.push((task.file.name.clone(), tasks.len()));
    }
    Ok(done)
}

/// Whether an export's tasks are task-item reviews.
pub(super) fn is_task_export(tasks: &[Value]) -> bool {
    tasks
        .first()
        .is_some_and(|t| t["data"][KIND_KEY].as_str() == Some(KIND))
}

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
        let strings = |a: &Value| -> Vec<String> {
            a.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
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
                None => made
                    .answer_starts
                    .iter()
                    .zip(&made.answer_ends)
                    .map(|(s, e)| [*s, *e])
                    .collect(),
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
    let mut reference = ReferenceColumns::of(made);
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
        ReferenceColumns::default().apply(&mut row);
        fill_reference(&mut row, task, &draft.to_string(), &made.options, duration);
        reference = ReferenceColumns::of(&row);
    }
    let mut r = TaskReview {
        item_id: made.item_id.clone(),
        video_id: video.to_string(),
        task: task.file.name.clone(),
        format: task.format.name().to_string(),
        annotator: who.to_string(),
        task_id: None,
        annotation_id: None,
        updated_at: None,
        decision,
        answer: String::new(),
        answer_choices: vec![],
        answer_count: None,
        answer_starts: vec![],
        answer_ends: vec![],
        answer_text: String::new(),
        answer_label: String::new(),
        reference_fields: vec![],
        reference_items: vec![],
        reject_reason: reason,
        edit_class: String::new(),
        decided_by: None,
    };
    r.set_reference(reference);
    Ok(r)
}

/// Imports a Label Studio export of task-item reviews: checks every review, merges with the
/// stored ones, decides each item under `rule`, and stores the table and the report.
pub(super) async fn import_tasks(
    store: &Arc<dyn Store>,
    m: &Manifest,
    exported: &[Value],
    rule: &Rule,
    minor_at: f64,
) -> Result<TaskImportReport, RunError> {
    let stages = run_tasks(m)?;
    let mut made: HashMap<String, (String, BenchItem, usize)> = HashMap::new();
    for (i, (stage, fingerprint, _)) in stages.iter().enumerate() {
        let items: HashMap<String, Vec<BenchItem>> =
            read_table(store, stage, fingerprint, true).await?.rows()?;
        for (v, rows) in items {
            for r in rows {
                made.insert(r.item_id.clone(), (v.clone(), r, i));
            }
        }
    }
    let probe = super::export::column_by_video(
        store,
        m,
        crate::stages::probe::KIND.name,
        &["fps", "duration_secs"],
    )
    .await?;
    let mut report = TaskImportReport {
        rule: rule.name(),
        minor_at,
        ..Default::default()
    };
    let mut fresh = vec![];
    for t in exported {
        let task_id = t["id"].as_i64();
        let problem =
            |item: Option<&str>, who: Option<&str>, field: &str, reason: String| TaskProblem {
                task_id,
                item_id: item.map(String::from),
                annotator: who.map(String::from),
                field: field.into(),
                reason,
            };
        let id = t["data"]["item_id"].as_str().unwrap_or_default();
        let Some((video, item, stage)) = made.get(id) else {
            report.problems.push(problem(
                Some(id),
                None,
                "data.item_id",
                "unknown item: not in this run's items tables".into(),
            ));
            continue;
        };
        let task = &stages[*stage].2;
        let p = probe.get(video);
        let fps = p
            .and_then(|r| r[0].as_deref()?.parse().ok())
            .or_else(|| t["data"]["fps"].as_f64())
            .unwrap_or(24.0);
        let duration: Option<f64> = p.and_then(|r| r[1].as_deref()?.parse().ok());
        let made_ref = ReferenceColumns::of(item);
        for a in t["annotations"].as_array().into_iter().flatten() {
            let who = super::import::annotator_of(a);
            if a["was_cancelled"].as_bool() == Some(true) {
                report.cancelled += 1;
                continue;
            }
            let result = a["result"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            match review_of(task, item, result, (fps, duration), &who, video) {
                Ok(mut r) => {
                    r.task_id = task_id;
                    r.annotation_id = a["id"].as_i64();
                    r.updated_at = a["updated_at"]
                        .as_str()
                        .or(a["created_at"].as_str())
                        .map(String::from);
                    r.edit_class = edit_class(task.format, &made_ref, &r, minor_at).into();
                    fresh.push(r);
                }
                Err(ps) => {
                    for (field, reason) in ps {
                        report
                            .problems
                            .push(problem(Some(id), Some(&who), &field, reason));
                    }
                }
            }
        }
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
    crate::benchmark::review::store_reviews(store, (TASKS, TASKS_REPORT), &all, &report).await?;
    Ok(report)
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
