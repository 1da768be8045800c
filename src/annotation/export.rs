//! `annotate export`: the selected videos as Label Studio tasks (with the committee's label as a
//! pre-annotation and the OCR text as a hint), the label config and a spreadsheet. Reads the
//! run's tables under the pipeline's own thresholds; writes into `--out`.

pub(super) use super::columns::column_by_video;
use super::*;
use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::stages;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::{read_table, text_column};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The OCR lines of every video, each distinct line once in frame order (a hint for annotators).
pub(super) async fn ocr_lines(
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
pub(super) async fn passing(
    store: &Arc<dyn Store>,
    m: &Manifest,
    expr: &str,
) -> Result<std::collections::HashSet<String>, RunError> {
    let filter = crate::store::filter::Filter::parse(expr)?;
    let fp = crate::runtime::chain::source_fingerprint(&m);
    let view = read_table(store, SOURCE_STAGE_ID, &fp, true).await?;
    let mut keep = std::collections::HashSet::new();
    for b in &view.batches {
        let passed = filter.apply_to(b, "the source table")?;
        if let Some(ids) = text_column(&passed, "video_id") {
            keep.extend((0..passed.num_rows()).map(|i| ids.value(i).to_string()));
        }
    }
    Ok(keep)
}

/// Writes tasks.json, label_config.xml and tasks.csv for the selected videos.
pub async fn export(run_dir: &Path, opts: &ExportOptions) -> Result<usize, RunError> {
    let (videos, store, m) = selected(run_dir, opts).await?;
    let cols = TaskColumns::read(&store, &m).await?;
    let prefix = opts.media_url.trim_end_matches('/');
    if opts.items {
        let media = |v: &str| {
            let (_, f) = cols.task(v, prefix);
            (f[1].clone(), f[2].clone())
        };
        return super::items::export_items(&store, &m, &videos, &media, &opts.out).await;
    }
    let csv_err = |e: csv::Error| RunError::Internal(e.to_string());
    let mut tasks = vec![];
    let mut csv = csv::Writer::from_writer(vec![]);
    csv.write_record(CSV_HEADER).map_err(csv_err)?;
    for v in &videos {
        let (task, fields) = cols.task(v, prefix);
        tasks.push(task);
        let mut row: Vec<&str> = fields.iter().map(String::as_str).collect();
        row.extend(std::iter::repeat_n("", CSV_HEADER.len() - row.len()));
        csv.write_record(&row).map_err(csv_err)?;
    }
    let csv = csv
        .into_inner()
        .map_err(|e| RunError::Internal(e.to_string()))?;
    write_export(&opts.out, &tasks, LABEL_CONFIG, Some(csv))?;
    Ok(tasks.len())
}

/// The selected videos of the run (the pipeline's thresholds), in `--split` and passing
/// `--where`, with the run's store and manifest.
async fn selected(
    run_dir: &Path,
    opts: &ExportOptions,
) -> Result<(Vec<String>, Arc<dyn Store>, Manifest), RunError> {
    let run = crate::store::run::RunView::open(run_dir).await?;
    let (mut videos, _) = crate::stages::selection::pipeline_selection(&run).await?;
    let (store, m) = (run.store, run.manifest);
    if let Some(split) = &opts.split {
        let keep = crate::stages::selection::read_split(&store, split).await?.0;
        videos.retain(|v| keep.contains_key(v));
    }
    if let Some(expr) = &opts.filter {
        let keep = passing(&store, &m, expr).await?;
        videos.retain(|v| keep.contains(v));
    }
    Ok((videos, store, m))
}

/// `annotate export --task`: the review projects of benchmark task items, one per task.
pub async fn export_tasks(
    run_dir: &Path,
    opts: &ExportOptions,
) -> Result<Vec<(String, usize)>, RunError> {
    let (videos, store, m) = selected(run_dir, opts).await?;
    let cols = TaskColumns::read(&store, &m).await?;
    let prefix = opts.media_url.trim_end_matches('/');
    let media = |v: &str| {
        let (_, f) = cols.task(v, prefix);
        super::tasks::Media {
            url: f[1].clone(),
            title: f[2].clone(),
            fps: f[3].parse().unwrap_or(24.0),
            duration: f[4].parse().ok(),
        }
    };
    super::tasks::export_tasks(&store, &m, &opts.tasks, &videos, &media, &opts.out).await
}

/// The columns of `tasks.csv`: the video's fields, then the 8 annotation fields left empty.
pub(super) const CSV_HEADER: [&str; 15] = [
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

/// Per video, what its task shows: title and media, probe, the committee's tally, the
/// quality rubric's count of passes and the OCR text.
pub(super) struct TaskColumns {
    pub(super) source: HashMap<String, Vec<Option<String>>>,
    pub(super) download: HashMap<String, Vec<Option<String>>>,
    pub(super) probe: super::columns::Probe,
    pub(super) tally: HashMap<String, Vec<Option<String>>>,
    pub(super) quality: HashMap<String, Vec<Option<String>>>,
    pub(super) ocr: HashMap<String, String>,
}

impl TaskColumns {
    async fn read(store: &Arc<dyn Store>, m: &Manifest) -> Result<Self, RunError> {
        let col = |kind: &'static str, cols: &'static [&'static str]| {
            column_by_video(store, m, kind, cols)
        };
        Ok(Self {
            source: col(SOURCE_STAGE_ID, &["title", "path", "url"]).await?,
            download: col(stages::download::KIND.name, &["path"]).await?,
            probe: super::columns::Probe::read(store, m).await?,
            tally: col(stages::committee::KIND.name, &["yes_votes", "no_votes"]).await?,
            quality: col(stages::quality::KIND.name, &["twos"]).await?,
            ocr: ocr_lines(store, m).await?,
        })
    }

    /// Video `v`'s Label Studio task (the committee's label as a pre-annotation), and its
    /// fields for the CSV: id, media URL, title, fps, duration.
    fn task(&self, v: &str, prefix: &str) -> (Value, [String; 5]) {
        let src = self.source.get(v);
        let get = |m: &HashMap<String, Vec<Option<String>>>, i: usize| {
            m.get(v).and_then(|r| r.get(i).cloned().flatten())
        };
        let media = get(&self.download, 0).or_else(|| {
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
        let (fps, duration) = self.probe.of(v, None);
        let title = src
            .and_then(|r| r[0].clone())
            .unwrap_or_else(|| v.to_string());
        let mut data = json!({
            "video": url, "video_id": v, "title": title, "fps": fps,
            "ocr_hint": self.ocr.get(v).cloned().unwrap_or_default(),
        });
        if let Some(d) = duration {
            data["duration_secs"] = json!(d);
        }
        let mut hint = vec![];
        if let (Some(y), Some(n)) = (get(&self.tally, 0), get(&self.tally, 1)) {
            let (y, n) = (y.parse::<u32>().unwrap_or(0), n.parse::<u32>().unwrap_or(0));
            data["committee"] = json!(format!("{y} of {} models say risk", y + n));
            let label = if y > n { "yes" } else { "no" };
            hint.push(json!({"from_name": "risk_label", "to_name": "video", "type": "choices", "value": {"choices": [label]}}));
        }
        if let Some(t) = get(&self.quality, 0) {
            data["quality_twos"] = json!(t);
        }
        let mut task = json!({ "data": data });
        if !hint.is_empty() {
            task["predictions"] =
                json!([{ "model_version": "vidcurate-committee", "result": hint }]);
        }
        let dur = duration.map(|d| d.to_string()).unwrap_or_default();
        (task, [v.to_string(), url, title, format!("{fps}"), dur])
    }
}
