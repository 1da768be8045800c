//! `annotate import`: a Label Studio export (or the filled-in CSV) checked field by field, one
//! row per video and annotator plus the adjudicated row, into `annotations/` through the run's
//! store. What is kept out is reported with its task id and field.

use super::columns::Probe;
use super::*;
use crate::benchmark::review::{ANNOTATIONS, Reviewed, merge_reviews};
use crate::error::{RunError, io};
use crate::runtime::chain::SOURCE_STAGE_ID;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// Why one annotation was kept out.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub task_id: Option<i64>,
    pub video_id: Option<String>,
    pub annotator: Option<String>,
    pub field: String,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
pub struct ImportReport {
    /// Annotation rows stored (one per video and annotator), after merging with earlier imports.
    pub annotations: usize,
    /// New or replaced rows in this import (0 when the same export is imported again).
    pub changed: usize,
    pub adjudicated: usize,
    pub cancelled: usize,
    pub problems: Vec<Problem>,
    /// Videos whose annotators tied on the label (not adjudicated).
    pub ties: Vec<String>,
    /// Cohen's kappa (two annotators) or Fleiss' kappa (more) on the label, over videos every
    /// annotator of the pair/set labelled; None with fewer than two annotators on any video.
    pub kappa: Option<f64>,
    pub kappa_kind: Option<String>,
    /// Mean IoU of the risk-signal spans over pairs of annotators of one video.
    pub span_iou: Option<f64>,
    pub span_pairs: usize,
}

pub(super) fn seconds(frame: f64, fps: f64) -> f64 {
    // Label Studio's timeline counts frames from 1.
    ((frame - 1.0).max(0.0)) / fps
}

/// The 8 fields of one Label Studio annotation result list.
pub(super) fn fields_of(result: &[Value], fps: f64) -> BTreeMap<String, Value> {
    let mut f = BTreeMap::new();
    for r in result {
        let name = r["from_name"].as_str().unwrap_or_default();
        let v = &r["value"];
        match r["type"].as_str().unwrap_or_default() {
            "timelinelabels" => {
                let label = v["timelinelabels"][0].as_str().unwrap_or_default();
                if let Some(range) = v["ranges"].as_array().and_then(|a| a.first()) {
                    let (s, e) = (range["start"].as_f64(), range["end"].as_f64());
                    if let (Some(s), Some(e)) = (s, e) {
                        f.insert(format!("{label}_start"), json!(seconds(s, fps)));
                        // The end frame is included: the span ends when it does.
                        f.insert(format!("{label}_end"), json!(seconds(e + 1.0, fps)));
                    }
                }
            }
            "textarea" => {
                f.insert(name.to_string(), json!(strings(&v["text"]).join(" ")));
            }
            "choices" => {
                f.insert(name.to_string(), v["choices"][0].clone());
            }
            _ => {}
        }
    }
    f
}

pub(super) fn describe(
    first: Option<&str>,
    then: Option<&str>,
    after: Option<&str>,
) -> Option<String> {
    let parts: Vec<String> = [("First", first), ("Then", then), ("Afterwards", after)]
        .iter()
        .filter_map(|(k, v)| {
            v.filter(|t| !t.trim().is_empty())
                .map(|t| format!("{k}: {}", t.trim()))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

impl Annotation {
    /// The 8 fields read by name (`text` for texts and the label, `num` for times in seconds;
    /// the description from its three parts), for one video and annotator.
    fn from_fields(
        video: &str,
        annotator: &str,
        text: &dyn Fn(&str) -> Option<String>,
        num: &dyn Fn(&str) -> Option<f64>,
    ) -> Self {
        Annotation {
            video_id: video.to_string(),
            annotator: annotator.to_string(),
            risk_signal_start: num("risk_signal_start"),
            risk_signal_end: num("risk_signal_end"),
            risk_visual_indicators: text("risk_visual_indicators"),
            risk_signal_description: describe(
                text("risk_signal_first").as_deref(),
                text("risk_signal_then").as_deref(),
                text("risk_signal_afterwards").as_deref(),
            ),
            accident_start: num("accident_start"),
            accident_end: num("accident_end"),
            accident_description: text("accident_description"),
            risk_label: text("risk_label").unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// The annotation if it is valid; else its problems go to the report (`at` prefixes them).
pub(super) fn keep_valid(
    ann: Annotation,
    duration: Option<f64>,
    report: &mut ImportReport,
    at: &str,
) -> Option<Annotation> {
    let problems = validate(&ann, duration);
    if problems.is_empty() {
        return Some(ann);
    }
    for (field, reason) in problems {
        report.problems.push(Problem {
            task_id: ann.task_id,
            video_id: Some(ann.video_id.clone()),
            annotator: Some(ann.annotator.clone()),
            field,
            reason: format!("{at}{reason}"),
        });
    }
    None
}

/// Checks one annotation's fields; the problems name the field.
pub(super) fn validate(a: &Annotation, duration: Option<f64>) -> Vec<(String, String)> {
    let mut p = vec![];
    if a.risk_label != "yes" && a.risk_label != "no" {
        p.push((
            "risk_label".into(),
            format!("label {:?} is not yes or no", a.risk_label),
        ));
    }
    for (name, s, e) in [
        ("risk_signal", a.risk_signal_start, a.risk_signal_end),
        ("accident", a.accident_start, a.accident_end),
    ] {
        if let (Some(s), Some(e)) = (s, e)
            && e < s
        {
            p.push((
                format!("{name}_end"),
                format!("ends at {e:.2} s, before it starts ({s:.2} s)"),
            ));
        }
        if let Some(d) = duration {
            for (which, t) in [("start", s), ("end", e)] {
                if let Some(t) = t.filter(|t| *t < 0.0 || *t > d + 0.5) {
                    p.push((
                        format!("{name}_{which}"),
                        format!("{t:.2} s is outside the video (0 to {d:.2} s)"),
                    ));
                }
            }
        }
    }
    if a.risk_label == "yes" && a.risk_signal_description.is_none() {
        p.push((
            "risk_signal_description".into(),
            "missing, and the label is yes".into(),
        ));
    }
    p
}

/// Parses a Label Studio JSON export (a list of tasks with `annotations`).
pub(super) fn from_label_studio(
    tasks: &[Value],
    probe: &Probe,
    known: &std::collections::HashSet<String>,
    report: &mut ImportReport,
) -> Vec<Annotation> {
    let mut out = vec![];
    for t in tasks {
        let task_id = t["id"].as_i64();
        let Some(video) = t["data"]["video_id"].as_str().map(String::from) else {
            report.problems.push(Problem {
                task_id,
                video_id: None,
                annotator: None,
                field: "data.video_id".into(),
                reason: "the task has no video_id (not exported by vidcurate?)".into(),
            });
            continue;
        };
        if !known.contains(&video) {
            report.problems.push(Problem {
                task_id,
                video_id: Some(video.clone()),
                annotator: None,
                field: "data.video_id".into(),
                reason: "unknown video: not in this run".into(),
            });
            continue;
        }
        let (fps, duration) = probe.of(&video, t["data"]["fps"].as_f64());
        for a in t["annotations"].as_array().into_iter().flatten() {
            let annotator = crate::benchmark::review::annotator_of(a);
            if a["was_cancelled"].as_bool() == Some(true) {
                report.cancelled += 1;
                continue;
            }
            let f = fields_of(
                a["result"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                fps,
            );
            let s = |k: &str| {
                f.get(k)
                    .and_then(|v| v.as_str())
                    .map(String::from)
                    .filter(|t| !t.trim().is_empty())
            };
            let n = |k: &str| f.get(k).and_then(|v| v.as_f64());
            let mut ann = Annotation::from_fields(&video, &annotator, &s, &n);
            ann.stamp(task_id, a);
            out.extend(keep_valid(ann, duration, report, ""));
        }
    }
    out
}

/// Parses the CSV of `annotate export`, filled in (one annotator per file: `--annotator`).
pub(super) fn from_csv(
    path: &Path,
    annotator: &str,
    probe: &Probe,
    known: &std::collections::HashSet<String>,
    report: &mut ImportReport,
) -> Result<Vec<Annotation>, RunError> {
    let shown = path.display().to_string();
    let mut rdr =
        csv::Reader::from_path(path).map_err(|e| RunError::Config(format!("{shown}: {e}")))?;
    let headers = rdr
        .headers()
        .map_err(|e| RunError::Config(format!("{shown}: {e}")))?
        .clone();
    let mut out = vec![];
    for (n, r) in rdr.records().enumerate() {
        let line = n as i64 + 2;
        let r = r.map_err(|e| RunError::Config(format!("{shown}:{line}: {e}")))?;
        let get = |k: &str| {
            headers
                .iter()
                .position(|h| h == k)
                .and_then(|i| r.get(i))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
        };
        let Some(video) = get("video_id") else {
            continue;
        };
        if get("risk_label").is_none() {
            // Not annotated yet.
            continue;
        }
        if !known.contains(&video) {
            report.problems.push(Problem {
                task_id: Some(line),
                video_id: Some(video),
                annotator: Some(annotator.into()),
                field: "video_id".into(),
                reason: format!("{shown}:{line}: unknown video: not in this run"),
            });
            continue;
        }
        let num = |k: &str| get(k).and_then(|t| t.parse::<f64>().ok());
        let label = |k: &str| get(k).map(|l| l.to_ascii_lowercase());
        let text = |k: &str| if k == "risk_label" { label(k) } else { get(k) };
        let mut ann = Annotation::from_fields(&video, annotator, &text, &num);
        ann.task_id = Some(line);
        let duration = probe.of(&video, None).1;
        out.extend(keep_valid(
            ann,
            duration,
            report,
            &format!("{shown}:{line}: "),
        ));
    }
    Ok(out)
}

/// A Label Studio JSON export: its tasks.
pub(super) fn read_export(export: &Path) -> Result<Vec<Value>, RunError> {
    let shown = export.display().to_string();
    let text = std::fs::read_to_string(export).map_err(io(export))?;
    serde_json::from_str(&text).map_err(|e| {
        RunError::Config(format!(
            "{shown}: not a Label Studio JSON export (a list of tasks): {e}"
        ))
    })
}

/// Whether an export's tasks are item reviews (`annotate export --items`).
pub(super) fn is_item_export(tasks: &[Value]) -> bool {
    tasks
        .first()
        .is_some_and(|t| t["data"].get("item_id").is_some())
}

/// Imports an export into the run's annotations table (merging with earlier imports).
pub async fn import(
    run_dir: &Path,
    export: &Path,
    rule: &Rule,
    csv_annotator: Option<&str>,
) -> Result<ImportReport, RunError> {
    let run = crate::store::run::RunView::open(run_dir).await?;
    let (store, m) = (run.store, run.manifest);
    let probe = Probe::read(&store, &m).await?;
    let known: std::collections::HashSet<String> =
        column_by_video(&store, &m, SOURCE_STAGE_ID, &["title"])
            .await?
            .into_keys()
            .collect();
    let mut report = ImportReport::default();
    let shown = export.display().to_string();
    let is_csv = export
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let fresh = if is_csv {
        let who = csv_annotator.ok_or_else(|| {
            RunError::Config(format!(
                "{shown}: a CSV holds one annotator's work: say whose with --annotator NAME"
            ))
        })?;
        from_csv(export, who, &probe, &known, &mut report)?
    } else {
        let tasks = read_export(export)?;
        from_label_studio(&tasks, &probe, &known, &mut report)
    };
    let (rows, changed) = merge_reviews(read_annotations(&store).await?, fresh);
    report.changed = changed;
    agreement(&rows, &mut report);
    let decided = adjudicate(&rows, rule, &mut report);
    report.annotations = rows.len();
    report.adjudicated = decided.len();
    let all: Vec<Annotation> = rows.into_iter().chain(decided).collect();
    let paths = ("annotations", ANNOTATIONS, "annotations/report.json");
    crate::benchmark::review::store_reviews(&store, paths, &all, &report).await?;
    Ok(report)
}

/// The report as text.
pub fn render(r: &ImportReport) -> String {
    let mut s = format!(
        "{} annotations stored ({} new or replaced), {} videos adjudicated, {} cancelled or skipped (kept out)\n",
        r.annotations, r.changed, r.adjudicated, r.cancelled
    );
    for p in &r.problems {
        s += &format!(
            "kept out: task {} video {} annotator {}: {}: {}\n",
            p.task_id.map_or("-".into(), |t| t.to_string()),
            p.video_id.as_deref().unwrap_or("-"),
            p.annotator.as_deref().unwrap_or("-"),
            p.field,
            p.reason
        );
    }
    if !r.ties.is_empty() {
        s += &format!(
            "tied on the label (not adjudicated): {}\n",
            r.ties.join(", ")
        );
    }
    match (r.kappa, &r.kappa_kind) {
        (Some(k), Some(kind)) => s += &format!("agreement on the label: {kind} kappa {k:.3}\n"),
        _ => s += "agreement on the label: fewer than two annotators on any video\n",
    }
    if let Some(i) = r.span_iou {
        s += &format!(
            "risk-signal spans: mean IoU {i:.3} over {} pairs\n",
            r.span_pairs
        );
    }
    s
}
