//! `annotate export --task`: one Label Studio project per task, its label config and its
//! tasks with the items' references as pre-annotations.

use super::{KIND, KIND_KEY, Media, list_control, to_frames};
use crate::annotation::textarea;
use crate::benchmark::formats::{Format, option_label};
use crate::benchmark::review::{DECISIONS, xml, xml_choices as choices};
use crate::benchmark::task::Task;
use crate::error::RunError;
use crate::record::BenchItem;
use crate::stages::items::run_tasks;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The label config of `task`'s review: the video, the question and what the item shows, the
/// decision, the format's controls, the reason of a rejection.
pub fn label_config(task: &Task, options: usize) -> String {
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
            r.push(textarea("answer_text", &[&it.answer_text]))
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
pub(in crate::annotation) async fn export_tasks(
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
        let config = label_config(&task, options);
        crate::annotation::write_export(&out.join(&task.file.name), &tasks, &config, None)?;
        done.push((task.file.name.clone(), tasks.len()));
    }
    Ok(done)
}

/// Whether an export's tasks are task-item reviews.
pub(in crate::annotation) fn is_task_export(tasks: &[Value]) -> bool {
    tasks
        .first()
        .is_some_and(|t| t["data"][KIND_KEY].as_str() == Some(KIND))
}
