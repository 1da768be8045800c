//! `vidcurate annotate export|import`: the human annotation round trip of RiskCue §3.3 (A.3,
//! A.9; SPEC §6) through Label Studio, or a spreadsheet.
//!
//! Export reads: the run's manifest, its tables under the pipeline's own thresholds (the
//! selected videos), the source, probe (fps, duration), committee (tally), quality and OCR
//! tables for pre-annotations. Export writes, into `--out`: `tasks.json` (Label Studio's import
//! format), `label_config.xml` (the 8 fields) and `tasks.csv`.
//! Import reads: a Label Studio JSON export (or the CSV filled in) and the run's probe table.
//! Import writes, through the run's store: `annotations/annotations.parquet` (one row per video
//! and annotator, plus the adjudicated row) and `annotations/report.json` (what was kept out and
//! why, and the agreement). Calls nothing; caches nothing.

use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::stages;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::{read_table, table_batches, text_column};
use arrow::array::{Array, StringArray};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What `annotate export` is asked for.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportOptions {
    /// The folder to write tasks.json, label_config.xml and tasks.csv into.
    #[arg(long)]
    pub out: PathBuf,
    /// Where Label Studio loads the videos from: PREFIX/<file name> for a local source's file,
    /// PREFIX/<path in the run> for downloaded media (serve that folder over HTTP).
    #[arg(long)]
    pub media_url: String,
    /// Only the videos of this split (`vidcurate split --name`), else every selected video.
    #[arg(long)]
    pub split: Option<String>,
    /// Only the videos whose source row passes these conditions (as `analyze --where`:
    /// `column op value` joined by `and`, op one of = != < <= > >=, or `column in (a, b)`),
    /// e.g. "domain = flood and label in (yes, unsure)".
    #[arg(long = "where", value_name = "EXPR")]
    pub filter: Option<String>,
}

/// How one video's annotations are decided when several annotators labelled it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// The one annotator (with several, the most recent annotation).
    Single,
    /// The label most annotators chose; the spans and texts of the first of them. A tie is not
    /// adjudicated (listed in the report).
    Majority,
    /// This annotator's annotation wins; majority where they did not annotate.
    Reviewer(String),
}

impl std::str::FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "single" => Ok(Rule::Single),
            "majority" => Ok(Rule::Majority),
            _ => match s.strip_prefix("reviewer:") {
                Some(name) if !name.is_empty() => Ok(Rule::Reviewer(name.to_string())),
                _ => Err(format!(
                    "{s:?}: expected single, majority or reviewer:NAME (e.g. reviewer:lead@lab.org)"
                )),
            },
        }
    }
}

/// One annotation of one video: RiskCue's 8 fields (times in seconds).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Annotation {
    pub video_id: String,
    /// Who annotated (Label Studio's user email or id; `adjudicated` for the decided row).
    pub annotator: String,
    pub task_id: Option<i64>,
    pub annotation_id: Option<i64>,
    pub updated_at: Option<String>,
    pub risk_signal_start: Option<f64>,
    pub risk_signal_end: Option<f64>,
    pub risk_visual_indicators: Option<String>,
    /// "First, …; Then, …; Afterwards, …" as the annotator wrote the three parts.
    pub risk_signal_description: Option<String>,
    pub accident_start: Option<f64>,
    pub accident_end: Option<f64>,
    pub accident_description: Option<String>,
    /// "yes" or "no".
    pub risk_label: String,
    /// The adjudicated row: the rule and the annotators it was decided from.
    pub decided_by: Option<String>,
}

/// The label config for the 8 fields: spans on the video's timeline, texts, the yes/no label.
pub const LABEL_CONFIG: &str = r##"<View>
  <Header value="$title"/>
  <Video name="video" value="$video" frameRate="$fps" sync="timeline"/>
  <Header value="Mark the risk signal and the accident on the timeline"/>
  <TimelineLabels name="spans" toName="video">
    <Label value="risk_signal" background="#f0a030"/>
    <Label value="accident" background="#d03030"/>
  </TimelineLabels>
  <Header value="On-screen text the pipeline read (a hint)"/>
  <Text name="ocr" value="$ocr_hint"/>
  <Header value="Risk visual indicators"/>
  <TextArea name="risk_visual_indicators" toName="video" rows="2" maxSubmissions="1" editable="true"/>
  <Header value="Risk signal description: first, then, afterwards"/>
  <TextArea name="risk_signal_first" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="First, ..."/>
  <TextArea name="risk_signal_then" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="Then, ..."/>
  <TextArea name="risk_signal_afterwards" toName="video" rows="1" maxSubmissions="1" editable="true" placeholder="Afterwards, ..."/>
  <Header value="Accident description"/>
  <TextArea name="accident_description" toName="video" rows="2" maxSubmissions="1" editable="true"/>
  <Header value="Risk label"/>
  <Choices name="risk_label" toName="video" choice="single" required="true">
    <Choice value="yes"/>
    <Choice value="no"/>
  </Choices>
</View>
"##;

/// Every value of one column of a stage's table, by video (the first row of each).
async fn column_by_video(
    store: &Arc<dyn Store>,
    m: &Manifest,
    kind: &str,
    columns: &[&str],
) -> Result<HashMap<String, Vec<Option<String>>>, RunError> {
    let mut out = HashMap::new();
    let Some(st) = m
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == kind || (kind == SOURCE_STAGE_ID && s.id == SOURCE_STAGE_ID))
    else {
        return Ok(out);
    };
    let view = read_table(store, &st.id, &st.fingerprint, true).await?;
    for b in &view.batches {
        let Some(ids) = text_column(b, "video_id") else {
            continue;
        };
        let cols: Vec<Option<StringArray>> = columns.iter().map(|c| text_column(b, c)).collect();
        for i in 0..b.num_rows() {
            out.entry(ids.value(i).to_string()).or_insert_with(|| {
                cols.iter()
                    .map(|c| {
                        c.as_ref()
                            .filter(|c| !c.is_null(i))
                            .map(|c| c.value(i).to_string())
                    })
                    .collect()
            });
        }
    }
    Ok(out)
}

/// The OCR lines of every video, each distinct line once in frame order (a hint for annotators).
async fn ocr_lines(
    store: &Arc<dyn Store>,
    m: &Manifest,
) -> Result<HashMap<String, String>, RunError> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    if let Some(st) = m
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == stages::ocr::KIND.name)
    {
        let view = read_table(store, &st.id, &st.fingerprint, true).await?;
        for b in &view.batches {
            let (Some(ids), Some(texts)) = (text_column(b, "video_id"), text_column(b, "text"))
            else {
                continue;
            };
            for i in 0..b.num_rows() {
                let lines = out.entry(ids.value(i).to_string()).or_default();
                let t = texts.value(i).to_string();
                if !lines.contains(&t) {
                    lines.push(t);
                }
            }
        }
    }
    Ok(out.into_iter().map(|(k, v)| (k, v.join(" | "))).collect())
}

/// The source videos whose rows pass `--where`.
async fn passing(
    store: &Arc<dyn Store>,
    m: &Manifest,
    expr: &str,
) -> Result<std::collections::HashSet<String>, RunError> {
    let filter = crate::commands::analyze::filter::Filter::parse(expr).map_err(RunError::Config)?;
    let fp = m
        .stages
        .iter()
        .find(|s| s.id == SOURCE_STAGE_ID)
        .map(|s| s.fingerprint.clone())
        .unwrap_or_else(|| crate::runtime::chain::SOURCE_FINGERPRINT.to_string());
    let view = read_table(store, SOURCE_STAGE_ID, &fp, true).await?;
    let mut keep = std::collections::HashSet::new();
    for b in &view.batches {
        let Some(passed) = filter.apply(b).map_err(RunError::Config)? else {
            return Err(RunError::Config(format!(
                "--where {expr:?}: the source table has no column {}",
                filter.columns().join(" or ")
            )));
        };
        if let Some(ids) = text_column(&passed, "video_id") {
            keep.extend((0..passed.num_rows()).map(|i| ids.value(i).to_string()));
        }
    }
    Ok(keep)
}

/// Writes tasks.json, label_config.xml and tasks.csv for the selected videos.
pub async fn export(run_dir: &Path, opts: &ExportOptions) -> Result<usize, RunError> {
    let (store, mut videos, _) = crate::commands::rethreshold::pipeline_selection(run_dir).await?;
    let (_, m) = crate::commands::rethreshold::open_run(run_dir).await?;
    if let Some(split) = &opts.split {
        let keep = crate::commands::split::read_split(&store, split).await?.0;
        videos.retain(|v| keep.contains_key(v));
    }
    if let Some(expr) = &opts.filter {
        let keep = passing(&store, &m, expr).await?;
        videos.retain(|v| keep.contains(v));
    }
    let source = column_by_video(&store, &m, SOURCE_STAGE_ID, &["title", "path", "url"]).await?;
    let download = column_by_video(&store, &m, stages::download::KIND.name, &["path"]).await?;
    let probe = column_by_video(
        &store,
        &m,
        stages::probe::KIND.name,
        &["fps", "duration_secs"],
    )
    .await?;
    let tally = column_by_video(
        &store,
        &m,
        stages::committee::KIND.name,
        &["yes_votes", "no_votes"],
    )
    .await?;
    let quality = column_by_video(&store, &m, stages::quality::KIND.name, &["twos"]).await?;
    let ocr = ocr_lines(&store, &m).await?;
    let prefix = opts.media_url.trim_end_matches('/');
    let mut tasks = vec![];
    let mut csv = csv::Writer::from_writer(vec![]);
    let header = [
        "video_id",
        "video",
        "title",
        "fps",
        "duration_secs",
        "risk_signal_start",
        "risk_signal_end",
        "risk_visual_indicators",
        "risk_signal_first",
        "risk_signal_then",
        "risk_signal_afterwards",
        "accident_start",
        "accident_end",
        "accident_description",
        "risk_label",
    ];
    csv.write_record(header)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    for v in &videos {
        let src = source.get(v);
        let get = |m: &HashMap<String, Vec<Option<String>>>, i: usize| {
            m.get(v).and_then(|r| r.get(i).cloned().flatten())
        };
        let media = get(&download, 0).or_else(|| {
            src.and_then(|r| r[1].clone()).and_then(|p| {
                Path::new(&p)
                    .file_name()
                    .map(|f| f.to_string_lossy().to_string())
            })
        });
        let url = match media {
            Some(m) => format!("{prefix}/{m}"),
            None => src.and_then(|r| r[2].clone()).unwrap_or_default(),
        };
        let fps: f64 = get(&probe, 0).and_then(|f| f.parse().ok()).unwrap_or(24.0);
        let duration: Option<f64> = get(&probe, 1).and_then(|f| f.parse().ok());
        let title = src.and_then(|r| r[0].clone()).unwrap_or_else(|| v.clone());
        let mut data = json!({
            "video": url, "video_id": v, "title": title, "fps": fps,
            "ocr_hint": ocr.get(v).cloned().unwrap_or_default(),
        });
        if let Some(d) = duration {
            data["duration_secs"] = json!(d);
        }
        let mut hint = vec![];
        if let (Some(y), Some(n)) = (get(&tally, 0), get(&tally, 1)) {
            data["committee"] = json!(format!(
                "{y} of {} models say risk",
                y.parse::<u32>().unwrap_or(0) + n.parse::<u32>().unwrap_or(0)
            ));
            let label = if y.parse::<u32>().unwrap_or(0) > n.parse::<u32>().unwrap_or(0) {
                "yes"
            } else {
                "no"
            };
            hint.push(json!({"from_name": "risk_label", "to_name": "video", "type": "choices", "value": {"choices": [label]}}));
        }
        if let Some(t) = get(&quality, 0) {
            data["quality_twos"] = json!(t);
        }
        let mut task = json!({ "data": data });
        if !hint.is_empty() {
            task["predictions"] =
                json!([{ "model_version": "vidcurate-committee", "result": hint }]);
        }
        tasks.push(task);
        let fps_s = format!("{fps}");
        let dur_s = duration.map(|d| d.to_string()).unwrap_or_default();
        let mut row = vec![
            v.as_str(),
            url.as_str(),
            title.as_str(),
            fps_s.as_str(),
            dur_s.as_str(),
        ];
        row.extend(std::iter::repeat_n("", header.len() - row.len()));
        csv.write_record(&row)
            .map_err(|e| RunError::Internal(e.to_string()))?;
    }
    let out = &opts.out;
    let io = |p: &Path, e| RunError::io(p.display().to_string(), e);
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let write = |name: &str, data: Vec<u8>| {
        let p = out.join(name);
        std::fs::write(&p, data).map_err(|e| io(&p, e))
    };
    write(
        "tasks.json",
        serde_json::to_vec_pretty(&tasks).unwrap_or_default(),
    )?;
    write("label_config.xml", LABEL_CONFIG.as_bytes().to_vec())?;
    write(
        "tasks.csv",
        csv.into_inner()
            .map_err(|e| RunError::Internal(e.to_string()))?,
    )?;
    Ok(tasks.len())
}

/// Why one annotation was kept out.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub task_id: Option<i64>,
    pub video_id: Option<String>,
    pub annotator: Option<String>,
    pub field: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
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

fn seconds(frame: f64, fps: f64) -> f64 {
    // Label Studio's timeline counts frames from 1.
    ((frame - 1.0).max(0.0)) / fps
}

/// The 8 fields of one Label Studio annotation result list.
fn fields_of(result: &[Value], fps: f64) -> BTreeMap<String, Value> {
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
                let t: Vec<&str> = v["text"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                    .unwrap_or_default();
                f.insert(name.to_string(), json!(t.join(" ")));
            }
            "choices" => {
                f.insert(name.to_string(), v["choices"][0].clone());
            }
            _ => {}
        }
    }
    f
}

fn describe(first: Option<&str>, then: Option<&str>, after: Option<&str>) -> Option<String> {
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
            task_id: None,
            annotation_id: None,
            updated_at: None,
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
            decided_by: None,
        }
    }
}

/// The annotation if it is valid; else its problems go to the report (`at` prefixes them).
fn keep_valid(
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
fn validate(a: &Annotation, duration: Option<f64>) -> Vec<(String, String)> {
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
fn from_label_studio(
    tasks: &[Value],
    probe: &HashMap<String, Vec<Option<String>>>,
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
        let p = probe.get(&video);
        let fps = p
            .and_then(|r| r[0].as_deref()?.parse().ok())
            .or_else(|| t["data"]["fps"].as_f64())
            .unwrap_or(24.0);
        let duration: Option<f64> = p.and_then(|r| r[1].as_deref()?.parse().ok());
        for a in t["annotations"].as_array().into_iter().flatten() {
            let annotator = match &a["completed_by"] {
                Value::Object(o) => o
                    .get("email")
                    .and_then(|e| e.as_str())
                    .map(String::from)
                    .or_else(|| o.get("id").map(|i| i.to_string())),
                Value::Null => None,
                other => Some(other.to_string()),
            }
            .unwrap_or_else(|| "unknown".into());
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
            ann.task_id = task_id;
            ann.annotation_id = a["id"].as_i64();
            ann.updated_at = a["updated_at"]
                .as_str()
                .or(a["created_at"].as_str())
                .map(String::from);
            out.extend(keep_valid(ann, duration, report, ""));
        }
    }
    out
}

/// Parses the CSV of `annotate export`, filled in (one annotator per file: `--annotator`).
fn from_csv(
    path: &Path,
    annotator: &str,
    probe: &HashMap<String, Vec<Option<String>>>,
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
        let duration: Option<f64> = probe
            .get(&video)
            .and_then(|r| r[1].as_deref()?.parse().ok());
        out.extend(keep_valid(
            ann,
            duration,
            report,
            &format!("{shown}:{line}: "),
        ));
    }
    Ok(out)
}

/// Cohen's kappa of two raters' labels (same items).
pub fn cohen_kappa(a: &[&str], b: &[&str]) -> Option<f64> {
    let n = a.len() as f64;
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let po = a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / n;
    let mut cats: Vec<&str> = a.iter().chain(b).copied().collect();
    cats.sort_unstable();
    cats.dedup();
    let pe: f64 = cats
        .iter()
        .map(|c| {
            (a.iter().filter(|x| *x == c).count() as f64 / n)
                * (b.iter().filter(|x| *x == c).count() as f64 / n)
        })
        .sum();
    if (1.0 - pe).abs() < 1e-12 {
        return Some(if po == 1.0 { 1.0 } else { 0.0 });
    }
    Some((po - pe) / (1.0 - pe))
}

/// Fleiss' kappa: `counts[item][category]`, every item rated by the same number of raters.
pub fn fleiss_kappa(counts: &[Vec<f64>]) -> Option<f64> {
    let n_items = counts.len() as f64;
    let raters: f64 = counts.first()?.iter().sum();
    if raters < 2.0
        || counts
            .iter()
            .any(|c| (c.iter().sum::<f64>() - raters).abs() > 1e-9)
    {
        return None;
    }
    let k = counts[0].len();
    let p_j: Vec<f64> = (0..k)
        .map(|j| counts.iter().map(|c| c[j]).sum::<f64>() / (n_items * raters))
        .collect();
    let p_i: Vec<f64> = counts
        .iter()
        .map(|c| (c.iter().map(|x| x * x).sum::<f64>() - raters) / (raters * (raters - 1.0)))
        .collect();
    let p_bar = p_i.iter().sum::<f64>() / n_items;
    let pe: f64 = p_j.iter().map(|p| p * p).sum();
    if (1.0 - pe).abs() < 1e-12 {
        return Some(if (p_bar - 1.0).abs() < 1e-12 {
            1.0
        } else {
            0.0
        });
    }
    Some((p_bar - pe) / (1.0 - pe))
}

fn iou(a: (f64, f64), b: (f64, f64)) -> f64 {
    let inter = (a.1.min(b.1) - a.0.max(b.0)).max(0.0);
    let union = (a.1 - a.0) + (b.1 - b.0) - inter;
    if union <= 0.0 { 0.0 } else { inter / union }
}

/// Agreement over the videos with two or more annotators.
fn agreement(rows: &[Annotation], report: &mut ImportReport) {
    let mut by_video: BTreeMap<&str, Vec<&Annotation>> = BTreeMap::new();
    for r in rows {
        by_video.entry(r.video_id.as_str()).or_default().push(r);
    }
    let multi: Vec<&Vec<&Annotation>> = by_video.values().filter(|v| v.len() >= 2).collect();
    let mut annotators: Vec<&str> = multi
        .iter()
        .flat_map(|v| v.iter().map(|a| a.annotator.as_str()))
        .collect();
    annotators.sort_unstable();
    annotators.dedup();
    if annotators.len() == 2 {
        let (x, y) = (annotators[0], annotators[1]);
        let mut a = vec![];
        let mut b = vec![];
        for v in &multi {
            if let (Some(p), Some(q)) = (
                v.iter().find(|r| r.annotator == x),
                v.iter().find(|r| r.annotator == y),
            ) {
                a.push(p.risk_label.as_str());
                b.push(q.risk_label.as_str());
            }
        }
        report.kappa = cohen_kappa(&a, &b);
        report.kappa_kind = Some("cohen".into());
    } else if annotators.len() > 2 {
        let most = multi.iter().map(|v| v.len()).max().unwrap_or(0);
        let counts: Vec<Vec<f64>> = multi
            .iter()
            .filter(|v| v.len() == most)
            .map(|v| {
                let yes = v.iter().filter(|r| r.risk_label == "yes").count() as f64;
                vec![yes, v.len() as f64 - yes]
            })
            .collect();
        report.kappa = fleiss_kappa(&counts);
        report.kappa_kind = Some("fleiss".into());
    }
    let mut ious = vec![];
    for v in &multi {
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                if let (Some(s1), Some(e1), Some(s2), Some(e2)) = (
                    v[i].risk_signal_start,
                    v[i].risk_signal_end,
                    v[j].risk_signal_start,
                    v[j].risk_signal_end,
                ) {
                    ious.push(iou((s1, e1), (s2, e2)));
                }
            }
        }
    }
    report.span_pairs = ious.len();
    report.span_iou = (!ious.is_empty()).then(|| ious.iter().sum::<f64>() / ious.len() as f64);
}

/// The decided row of each video under `rule`.
fn adjudicate(rows: &[Annotation], rule: &Rule, report: &mut ImportReport) -> Vec<Annotation> {
    let mut by_video: BTreeMap<&str, Vec<&Annotation>> = BTreeMap::new();
    for r in rows {
        by_video.entry(r.video_id.as_str()).or_default().push(r);
    }
    let mut out = vec![];
    for (video, anns) in by_video {
        let names = || {
            anns.iter()
                .map(|a| a.annotator.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let pick: Option<(&Annotation, String)> = match rule {
            Rule::Single => anns
                .iter()
                .max_by(|a, b| a.updated_at.cmp(&b.updated_at))
                .map(|a| (*a, format!("single: {}", a.annotator))),
            Rule::Reviewer(r) if anns.iter().any(|a| &a.annotator == r) => anns
                .iter()
                .find(|a| &a.annotator == r)
                .map(|a| (*a, format!("reviewer: {r}"))),
            _ => {
                let yes = anns.iter().filter(|a| a.risk_label == "yes").count();
                let no = anns.len() - yes;
                if yes == no {
                    report.ties.push(video.to_string());
                    None
                } else {
                    let label = if yes > no { "yes" } else { "no" };
                    anns.iter().find(|a| a.risk_label == label).map(|a| {
                        (
                            *a,
                            format!("majority {}-{} of {}", yes.max(no), yes.min(no), names()),
                        )
                    })
                }
            }
        };
        if let Some((a, how)) = pick {
            let mut d = a.clone();
            d.annotator = "adjudicated".into();
            d.decided_by = Some(how);
            out.push(d);
        }
    }
    out
}

const ANNOTATIONS: &str = "annotations/annotations.parquet";

/// Imports an export into the run's annotations table (merging with earlier imports).
pub async fn import(
    run_dir: &Path,
    export: &Path,
    rule: &Rule,
    csv_annotator: Option<&str>,
) -> Result<ImportReport, RunError> {
    let (store, m) = crate::commands::rethreshold::open_run(run_dir).await?;
    let probe = column_by_video(
        &store,
        &m,
        stages::probe::KIND.name,
        &["fps", "duration_secs"],
    )
    .await?;
    let known: std::collections::HashSet<String> =
        column_by_video(&store, &m, SOURCE_STAGE_ID, &["title"])
            .await?
            .into_keys()
            .collect();
    let mut report = ImportReport {
        annotations: 0,
        changed: 0,
        adjudicated: 0,
        cancelled: 0,
        problems: vec![],
        ties: vec![],
        kappa: None,
        kappa_kind: None,
        span_iou: None,
        span_pairs: 0,
    };
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
        let text = std::fs::read_to_string(export).map_err(|e| RunError::io(shown.clone(), e))?;
        let tasks: Vec<Value> = serde_json::from_str(&text).map_err(|e| {
            RunError::Config(format!(
                "{shown}: not a Label Studio JSON export (a list of tasks): {e}"
            ))
        })?;
        from_label_studio(&tasks, &probe, &known, &mut report)
    };
    // Earlier imports, without their decided rows: those are decided again.
    let mut rows: BTreeMap<(String, String), Annotation> = read_annotations(&store)
        .await?
        .into_iter()
        .filter(|a| a.annotator != "adjudicated")
        .map(|a| ((a.video_id.clone(), a.annotator.clone()), a))
        .collect();
    for a in fresh {
        let key = (a.video_id.clone(), a.annotator.clone());
        match rows.get(&key) {
            // The same annotation again, or an older one: nothing changes.
            Some(old) if old == &a || old.updated_at > a.updated_at => {}
            _ => {
                report.changed += 1;
                rows.insert(key, a);
            }
        }
    }
    let rows: Vec<Annotation> = rows.into_values().collect();
    agreement(&rows, &mut report);
    let decided = adjudicate(&rows, rule, &mut report);
    report.annotations = rows.len();
    report.adjudicated = decided.len();
    let all: Vec<Annotation> = rows.into_iter().chain(decided).collect();
    let fields = crate::store::shards::fields_of::<Annotation>()?;
    let batch = serde_arrow::to_record_batch(&fields, &all)
        .map_err(|e| RunError::Internal(format!("annotations: {e}")))?;
    store
        .put(ANNOTATIONS, crate::store::shards::encode_table(&batch)?)
        .await
        .map_err(|e| RunError::io(format!("{}/{ANNOTATIONS}", store.location()), e))?;
    let path = "annotations/report.json";
    store
        .put(path, serde_json::to_vec_pretty(&report).unwrap_or_default())
        .await
        .map_err(|e| RunError::io(format!("{}/{path}", store.location()), e))?;
    Ok(report)
}

/// The run's annotations (empty before the first import).
pub async fn read_annotations(store: &Arc<dyn Store>) -> Result<Vec<Annotation>, RunError> {
    let data = match store.get(ANNOTATIONS).await {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => {
            return Err(RunError::io(
                format!("{}/{ANNOTATIONS}", store.location()),
                e,
            ));
        }
    };
    let mut out = vec![];
    for b in table_batches(ANNOTATIONS, data)? {
        let rows: Vec<Annotation> = serde_arrow::from_record_batch(&b)
            .map_err(|e| RunError::Internal(format!("{ANNOTATIONS}: {e}")))?;
        out.extend(rows);
    }
    Ok(out)
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

/// Human annotation round trip (RiskCue's 8 fields) with Label Studio or a spreadsheet:
/// `annotate export` writes the tasks, `annotate import` reads the annotations back.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Write tasks.json (Label Studio import format, with the committee's label as a
    /// pre-annotation and the OCR text as a hint), label_config.xml (risk signal and accident
    /// spans on the video timeline, indicators, the first/then/afterwards description, the
    /// accident description, the yes/no risk label) and tasks.csv for the selected videos.
    #[command(
        after_help = "Example:\n  vidcurate annotate export data/runs/riskcue --out annot/ --media-url http://media.lab:8000\n  (create a Label Studio project with annot/label_config.xml, import annot/tasks.json)"
    )]
    Export {
        /// A run directory or object-store URL.
        run_dir: std::path::PathBuf,
        #[command(flatten)]
        opts: ExportOptions,
    },
    /// Read a Label Studio JSON export (or the filled-in tasks.csv) into
    /// RUN_DIR/annotations/annotations.parquet: one row per video and annotator plus the
    /// adjudicated row. Invalid annotations (end before start, times outside the video, a label
    /// not yes/no, a yes without a description, unknown tasks) are kept out with the task id and
    /// field; cancelled ones are counted. Importing the same export again changes nothing; a
    /// newer annotation of the same annotator replaces the older. Prints the agreement (Cohen's
    /// or Fleiss' kappa on the label, IoU of the risk-signal spans).
    Import {
        /// A run directory or object-store URL.
        run_dir: std::path::PathBuf,
        /// The export: Label Studio JSON, or the CSV from `annotate export` filled in.
        export: std::path::PathBuf,
        /// How a video with several annotators is decided: single, majority, reviewer:NAME.
        #[arg(long, default_value = "majority")]
        rule: Rule,
        /// Whose annotations a CSV holds.
        #[arg(long)]
        annotator: Option<String>,
    },
}

pub fn run(cmd: Cmd) -> Result<crate::error::Exit, RunError> {
    let rt = super::tokio_runtime()?;
    match cmd {
        Cmd::Export { run_dir, opts } => {
            let n = rt.block_on(export(&run_dir, &opts))?;
            println!(
                "{n} tasks: {}/tasks.json, label_config.xml, tasks.csv",
                opts.out.display()
            );
        }
        Cmd::Import {
            run_dir,
            export,
            rule,
            annotator,
        } => {
            let r = rt.block_on(import(&run_dir, &export, &rule, annotator.as_deref()))?;
            print!("{}", render(&r));
        }
    }
    Ok(crate::error::Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kappas_of_known_tables() {
        // Cohen: 20 items, agreement 0.7, chance 0.5 -> 0.4.
        let a: Vec<&str> = [vec!["yes"; 10], vec!["no"; 10]].concat();
        let b: Vec<&str> = [vec!["yes"; 7], vec!["no"; 3], vec!["yes"; 3], vec!["no"; 7]].concat();
        assert!((cohen_kappa(&a, &b).unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(cohen_kappa(&["yes", "no"], &["yes", "no"]), Some(1.0));
        // Fleiss (Wikipedia's 10-item, 14-rater, 5-category example): 0.210.
        let t = vec![
            vec![0., 0., 0., 0., 14.],
            vec![0., 2., 6., 4., 2.],
            vec![0., 0., 3., 5., 6.],
            vec![0., 3., 9., 2., 0.],
            vec![2., 2., 8., 1., 1.],
            vec![7., 7., 0., 0., 0.],
            vec![3., 2., 6., 3., 0.],
            vec![2., 5., 3., 2., 2.],
            vec![6., 5., 2., 1., 0.],
            vec![0., 2., 2., 3., 7.],
        ];
        assert!((fleiss_kappa(&t).unwrap() - 0.2099).abs() < 1e-3);
    }

    #[test]
    fn timeline_frames_become_seconds_and_bad_fields_are_named() {
        let result: Vec<Value> = serde_json::from_value(json!([
            {"from_name": "spans", "type": "timelinelabels", "value": {"ranges": [{"start": 31, "end": 60}], "timelinelabels": ["risk_signal"]}},
            {"from_name": "risk_label", "type": "choices", "value": {"choices": ["yes"]}},
            {"from_name": "risk_signal_first", "type": "textarea", "value": {"text": ["a car swerves"]}}
        ]))
        .unwrap();
        let f = fields_of(&result, 30.0);
        assert_eq!(f["risk_signal_start"], json!(1.0));
        assert_eq!(f["risk_signal_end"], json!(2.0));
        assert_eq!(f["risk_label"], json!("yes"));
        let mut a = Annotation {
            video_id: "v".into(),
            annotator: "x".into(),
            task_id: None,
            annotation_id: None,
            updated_at: None,
            risk_signal_start: Some(3.0),
            risk_signal_end: Some(2.0),
            risk_visual_indicators: None,
            risk_signal_description: None,
            accident_start: Some(1.0),
            accident_end: Some(99.0),
            accident_description: None,
            risk_label: "yes".into(),
            decided_by: None,
        };
        let fields: Vec<String> = validate(&a, Some(10.0))
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(
            fields,
            ["risk_signal_end", "accident_end", "risk_signal_description"]
        );
        a.risk_label = "maybe".into();
        assert!(validate(&a, None).iter().any(|(f, _)| f == "risk_label"));
    }
}
