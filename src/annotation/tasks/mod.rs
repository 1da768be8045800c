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

mod export;
mod import;

pub(super) use export::{export_tasks, is_task_export};
pub(super) use import::{import_tasks, render};

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

/// The Label Studio control of a reference list field.
fn list_control(field: &str) -> String {
    format!("ref_{field}")
}

/// Label Studio's timeline counts frames from 1 and includes the end frame.
fn to_frames(secs: [f64; 2], fps: f64) -> (f64, f64) {
    (
        (secs[0] * fps).round() + 1.0,
        (secs[1] * fps).round().max(1.0),
    )
}

/// A timeline range back in seconds (the inverse of `to_frames`).
fn from_frames(start: f64, end: f64, fps: f64) -> [f64; 2] {
    [((start - 1.0).max(0.0)) / fps, end / fps]
}
