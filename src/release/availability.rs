//! Whether a release's videos can still be had, and taking one out of it.
//!
//! `manifest.parquet` (written by `vidcurate release`) lists every released video once:
//! `video_id`, `split`, `url`, `media_sha256` (SHA-256 of the media file the run used, null when
//! the run no longer had it) and `duration_secs` (the probe's container duration, else what the
//! source reported). `vidcurate rehydrate` fetches the URLs again and compares; `vidcurate
//! takedown` removes videos from every file of the folder. Parquet, not CSV: the columns keep
//! their types (a float duration, a null checksum is null and not an empty string) and every
//! reader the release already needs opens it.

use crate::error::RunError;
use crate::error::io;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::store::run::RunView;
use crate::store::shards::text_column;
use arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod card;
mod without_rows;
pub use card::{card_with_removals, card_with_sizes};
use without_rows::{without_rows_jsonl, without_rows_parquet, without_rows_tsv};

/// The manifest's file name inside a release folder.
pub const MANIFEST_FILE: &str = "manifest.parquet";
/// Every removal, one JSON object a line: `video_id`, `date`, `reason`.
pub const TAKEDOWNS_FILE: &str = "takedowns.jsonl";

/// One video of a release as the manifest lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ManifestRow {
    pub video_id: String,
    pub split: String,
    pub url: Option<String>,
    pub media_sha256: Option<String>,
    pub duration_secs: Option<f64>,
}

/// What `write_manifest` wrote, for the card.
#[derive(Debug, Clone, Default)]
pub struct ManifestWritten {
    pub videos: usize,
    /// Videos whose media file the run no longer had: their `media_sha256` is null.
    pub without_media: usize,
    pub without_url: usize,
    pub without_duration: usize,
}

/// Each video's value of a column of the run's table of `stage_id` (as text), or nothing when
/// the run has no such stage or column.
async fn column_of(
    run: &RunView,
    stage_id: Option<&str>,
    column: &str,
) -> Result<HashMap<String, String>, RunError> {
    let Some(st) = stage_id.and_then(|id| run.manifest.stages.iter().find(|s| s.id == id)) else {
        return Ok(HashMap::new());
    };
    // Two columns of the table, not all of them: this runs once per column.
    Ok(super::first_values(&run.store, st, column)
        .await?
        .unwrap_or_default())
}

/// The id of the run's last stage of `kind` (the one whose output later stages used).
fn last_of_kind<'a>(run: &'a RunView, kind: &str) -> Option<&'a str> {
    run.manifest
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == kind)
        .map(|s| s.id.as_str())
}

/// SHA-256 of a file, on the blocking pool; None when it is not there.
async fn sha256_of(path: std::path::PathBuf) -> Result<Option<String>, RunError> {
    let shown = path.display().to_string();
    match tokio::task::spawn_blocking(move || super::integrity::sha256_file(&path)).await {
        Ok(Ok(s)) => Ok(Some(s)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Ok(Err(e)) => Err(RunError::io(shown, e)),
        Err(e) => Err(RunError::Internal(format!("hashing {shown}: {e}"))),
    }
}

/// SHA-256 of the media at `path` (relative to the run, or absolute for a local source), None
/// when the run no longer has it. An object-store run's media are fetched to a temporary file.
async fn media_sha256(run: &RunView, path: &str) -> Result<Option<String>, RunError> {
    if Path::new(path).is_absolute() {
        return sha256_of(path.into()).await;
    }
    if let Some(local) = run.store.local_path(path) {
        return sha256_of(local).await;
    }
    let tmp = tempfile::NamedTempFile::new().map_err(|e| RunError::io("temporary file", e))?;
    match run.store.get_file(path, tmp.path()).await {
        Ok(()) => sha256_of(tmp.path().to_path_buf()).await,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(run.store.io_error(path, e)),
    }
}

/// `media_sha256` of every distinct path, each hashed once (videos downloaded to the same bytes
/// share one content-addressed file) and as many at once as there are cores: a release of
/// thousands of videos hashes gigabytes, and one at a time left a core idle.
async fn media_sha256s<'a>(
    run: &RunView,
    paths: impl Iterator<Item = &'a String>,
) -> Result<HashMap<&'a str, Option<String>>, RunError> {
    use futures::StreamExt;
    let mut distinct: Vec<&str> = paths.map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    futures::stream::iter(distinct)
        .map(|p| async move { Ok((p, media_sha256(run, p).await?)) })
        .buffer_unordered(cores)
        .collect::<Vec<Result<_, RunError>>>()
        .await
        .into_iter()
        .collect()
}

/// Writes `manifest.parquet` into the release folder `out`: one row per video of the split, in
/// the release's split order. The media path is the download stage's (else the source's file).
pub async fn write_manifest(
    run: &RunView,
    order: &[String],
    by_split: &BTreeMap<String, Vec<String>>,
    out: &Path,
) -> Result<ManifestWritten, RunError> {
    let download = last_of_kind(run, "download");
    let probe = last_of_kind(run, "probe");
    let source_url = column_of(run, Some(SOURCE_STAGE_ID), "url").await?;
    let source_path = column_of(run, Some(SOURCE_STAGE_ID), "path").await?;
    let source_secs = column_of(run, Some(SOURCE_STAGE_ID), "duration_secs").await?;
    let dl_url = column_of(run, download, "url").await?;
    let dl_path = column_of(run, download, "path").await?;
    let probed_secs = column_of(run, probe, "duration_secs").await?;
    let media_of = |id: &String| dl_path.get(id).or_else(|| source_path.get(id));
    let ids = || {
        order
            .iter()
            .flat_map(|s| by_split.get(s).into_iter().flatten())
    };
    let hashes = media_sha256s(run, ids().filter_map(media_of)).await?;
    let mut rows = vec![];
    let mut w = ManifestWritten::default();
    for split in order {
        for id in by_split.get(split).into_iter().flatten() {
            let media_sha256 = media_of(id).and_then(|p| hashes[p.as_str()].clone());
            let duration_secs = probed_secs
                .get(id)
                .or_else(|| source_secs.get(id))
                .and_then(|s| s.parse::<f64>().ok());
            let url = source_url.get(id).or_else(|| dl_url.get(id)).cloned();
            w.without_media += media_sha256.is_none() as usize;
            w.without_url += url.is_none() as usize;
            w.without_duration += duration_secs.is_none() as usize;
            rows.push(ManifestRow {
                video_id: id.clone(),
                split: split.clone(),
                url,
                media_sha256,
                duration_secs,
            });
        }
    }
    w.videos = rows.len();
    let path = out.join(MANIFEST_FILE);
    let bytes = crate::store::shards::encode_table(&manifest_batch(&rows)?)?;
    crate::store::write_file(&path, &bytes).map_err(io(&path))?;
    Ok(w)
}

fn manifest_batch(rows: &[ManifestRow]) -> Result<RecordBatch, RunError> {
    let text = |f: &dyn Fn(&ManifestRow) -> Option<&str>| -> Arc<dyn Array> {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let schema = Schema::new(vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
        Field::new("url", DataType::Utf8, true),
        Field::new("media_sha256", DataType::Utf8, true),
        Field::new("duration_secs", DataType::Float64, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            text(&|r| Some(&r.video_id)),
            text(&|r| Some(&r.split)),
            text(&|r| r.url.as_deref()),
            text(&|r| r.media_sha256.as_deref()),
            Arc::new(
                rows.iter()
                    .map(|r| r.duration_secs)
                    .collect::<Float64Array>(),
            ),
        ],
    )
    .map_err(|e| RunError::Internal(format!("{MANIFEST_FILE}: {e}")))
}

/// The release's manifest. A folder without one is bad input, said with what was expected.
pub fn read_manifest(release: &Path) -> Result<Vec<ManifestRow>, RunError> {
    let path = release.join(MANIFEST_FILE);
    if !path.exists() {
        return Err(RunError::Config(format!(
            "{}: no {MANIFEST_FILE}: expected a folder written by `vidcurate release` (which lists every video's video_id, split, url, media_sha256 and duration_secs there); release the run again to add one",
            release.display()
        )));
    }
    let (_, batches) = super::read_parquet(&path)?;
    let mut out = vec![];
    for b in &batches {
        let col = |name: &str| {
            text_column(b, name).ok_or_else(|| {
                RunError::Config(format!(
                    "{}: no column `{name}` (expected video_id, split, url, media_sha256, duration_secs)",
                    path.display()
                ))
            })
        };
        let (ids, splits, urls, shas, secs) = (
            col("video_id")?,
            col("split")?,
            col("url")?,
            col("media_sha256")?,
            col("duration_secs")?,
        );
        let opt = |a: &StringArray, i: usize| (!a.is_null(i)).then(|| a.value(i).to_string());
        for i in 0..b.num_rows() {
            out.push(ManifestRow {
                video_id: ids.value(i).to_string(),
                split: splits.value(i).to_string(),
                url: opt(&urls, i),
                media_sha256: opt(&shas, i),
                duration_secs: opt(&secs, i).and_then(|s| s.parse().ok()),
            });
        }
    }
    Ok(out)
}

// --- takedown ---------------------------------------------------------------------------------

/// What a takedown did.
#[derive(Debug, Default)]
pub struct TakedownReport {
    /// Ids recorded as removed now.
    pub recorded: Vec<String>,
    /// Ids already recorded by an earlier takedown (their files are checked again).
    pub already: Vec<String>,
    /// Files rewritten without the videos' rows, relative to the release.
    pub rewritten: Vec<String>,
    pub rows_removed: usize,
    pub frame_folders_removed: usize,
    /// Harness exports written again from the files left, and those removed for want of items.
    pub harness_written: Vec<super::harness::Harness>,
    pub harness_removed: Vec<super::harness::Harness>,
}

/// Removes the videos `ids` from every file of the release folder: rows of every Parquet file
/// with a `video_id` column (data, perturbations, questions, tasks, the manifest), lines of
/// TSV and JSONL exports, the `frames/<id>/` folders; then updates the card's split sizes,
/// records the removal (card and `takedowns.jsonl`), refreshes `croissant.json`'s checksums
/// and writes the harness exports the release has again from what is left.
///
/// Every new file is computed before any is written, and each is written beside its target and
/// renamed over it, so an unknown id or an unreadable file changes nothing, and a crash leaves
/// files that are each whole; running the takedown again finishes it (it is idempotent).
pub fn takedown(
    release: &Path,
    ids: &[String],
    reason: Option<&str>,
    date: &str,
) -> Result<TakedownReport, RunError> {
    let recorded = recorded_ids(release)?;
    let known = release_ids(release)?;
    // Before anything changes: which exports to write again at the end.
    let exports = super::harness::exported(release);
    all_known(release, ids, &known, &recorded)?;
    let gone: BTreeSet<String> = ids.iter().cloned().collect();
    let mut report = TakedownReport::default();
    let (mut writes, rows_now) = files_without(release, &gone, &mut report)?;
    for id in &gone {
        if recorded.contains(id) {
            report.already.push(id.clone());
        } else {
            report.recorded.push(id.clone());
        }
    }
    let readme = release.join("README.md");
    if readme.exists() {
        let card = std::fs::read_to_string(&readme).map_err(io(&readme))?;
        let mut new = card_with_sizes(&card, &rows_now);
        new = card_with_removals(&new, &report.recorded, date, reason);
        if new != card {
            report.rewritten.push("README.md".into());
            writes.push((readme, new.into_bytes()));
        }
    }
    for (path, bytes) in &writes {
        crate::store::write_file(path, bytes).map_err(io(path))?;
    }
    for id in &gone {
        let dir = release.join("frames").join(id);
        if dir.is_dir() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
            report.frame_folders_removed += 1;
        }
    }
    // Last: a crash before this line leaves the id unrecorded, so a rerun does it all again.
    append_takedowns(release, &report.recorded, date, reason)?;
    super::integrity::refresh_listed(release).map_err(|e| RunError::Config(e.to_string()))?;
    // The exports are made again from what is left: a level or a task may have lost its last
    // item, and an lmms-eval task without documents cannot run.
    (report.harness_written, report.harness_removed) =
        super::harness::refresh_exports(release, &exports)?;
    Ok(report)
}

/// Errs naming the ids that are neither in the release nor recorded as taken down.
fn all_known(
    release: &Path,
    ids: &[String],
    known: &BTreeSet<String>,
    recorded: &BTreeSet<String>,
) -> Result<(), RunError> {
    let unknown: Vec<&String> = ids
        .iter()
        .filter(|id| !known.contains(*id) && !recorded.contains(*id))
        .collect();
    if !unknown.is_empty() {
        return Err(RunError::Config(format!(
            "{}: no video {} in this release (expected ids from {MANIFEST_FILE} or data/); nothing changed",
            release.display(),
            unknown
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// Every release file that holds rows of `gone`, as it is to be written without them (noted
/// in the report as rewritten, with the rows removed), and the rows each Parquet file keeps.
fn files_without(
    release: &Path,
    gone: &BTreeSet<String>,
    report: &mut TakedownReport,
) -> Result<(Vec<(PathBuf, Vec<u8>)>, HashMap<String, usize>), RunError> {
    let mut writes: Vec<(PathBuf, Vec<u8>)> = vec![];
    let mut rows_now: HashMap<String, usize> = HashMap::new();
    for rel in
        super::integrity::release_files(release).map_err(|e| RunError::Config(e.to_string()))?
    {
        let path = release.join(&rel);
        let new = match rel.rsplit('.').next() {
            Some("parquet") => {
                let (bytes, kept, removed) = without_rows_parquet(&path, gone)?;
                rows_now.insert(rel.clone(), kept);
                report.rows_removed += removed;
                bytes
            }
            Some("tsv") => without_rows_tsv(&path, gone)?,
            Some("jsonl") if rel != TAKEDOWNS_FILE => without_rows_jsonl(&path, gone)?,
            _ => None,
        };
        if let Some(bytes) = new {
            report.rewritten.push(rel);
            writes.push((path, bytes));
        }
    }
    Ok((writes, rows_now))
}

/// The path of the release's takedowns file, and its text (empty before the first takedown).
fn takedowns(release: &Path) -> Result<(PathBuf, String), RunError> {
    let path = release.join(TAKEDOWNS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok((path, t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((path, String::new())),
        Err(e) => Err(io(&path)(e)),
    }
}

/// The ids earlier takedowns recorded.
pub fn recorded_ids(release: &Path) -> Result<BTreeSet<String>, RunError> {
    let (path, text) = takedowns(release)?;
    let mut out = BTreeSet::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            RunError::Config(format!("{}:{}: not JSON: {e}", path.display(), n + 1))
        })?;
        let id = v["video_id"].as_str().ok_or_else(|| {
            RunError::Config(format!("{}:{}: no `video_id`", path.display(), n + 1))
        })?;
        out.insert(id.to_string());
    }
    Ok(out)
}

/// The videos a release holds: its manifest's and its data rows'.
fn release_ids(release: &Path) -> Result<BTreeSet<String>, RunError> {
    let mut out = BTreeSet::new();
    if release.join(MANIFEST_FILE).exists() {
        out.extend(read_manifest(release)?.into_iter().map(|r| r.video_id));
    }
    // Not store::parquet_files_in, which passes over an entry it cannot read: a takedown must
    // see every data file or stop.
    let data = release.join("data");
    if let Ok(rd) = std::fs::read_dir(&data) {
        for e in rd {
            let p = e.map_err(io(&data))?.path();
            if p.extension().is_some_and(|x| x == "parquet") {
                for b in super::read_parquet(&p)?.1 {
                    if let Some(ids) = text_column(&b, "video_id") {
                        out.extend(ids.iter().flatten().map(String::from));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn append_takedowns(
    release: &Path,
    ids: &[String],
    date: &str,
    reason: Option<&str>,
) -> Result<(), RunError> {
    if ids.is_empty() {
        return Ok(());
    }
    let (path, mut text) = takedowns(release)?;
    for id in ids {
        let line = serde_json::json!({"video_id": id, "date": date, "reason": reason});
        text += &format!("{line}\n");
    }
    crate::store::write_file(&path, text.as_bytes()).map_err(io(&path))
}
