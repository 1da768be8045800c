//! `local` source: a folder of video files, or a CSV/JSONL manifest.
//!
//! Reads: the folder or manifest. Writes: the `source` table (path, size) and the records' extra
//! columns: every manifest column other than the path and id columns (label, domain, language...)
//! is carried through to every output table. Calls: nothing external. Caches: each file's BLAKE3
//! by its stat (`store::media_digests`), so an unchanged corpus is not read again. Video id: the
//! manifest's id column, else the first 16 hex digits of the file's BLAKE3 (so renaming a file
//! keeps its id and its finished work). Rejects: manifest lines without a path, missing files,
//! files changed while read, URLs (fetched by a download stage, not by this source), duplicate
//! ids.

mod manifest;

use crate::config::{ConfigError, Seg};
use crate::error::{RunError, StageError};
use crate::record::{Extras, MediaFile, Slot, SourceInfo, VideoRecord};
use crate::runtime::stage::{Source, SourceReject, SourceStream, StageContext};
use crate::stages::{BuildCx, yes};
use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Settings of `[source] type = "local"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalConfig {
    /// Always "local".
    #[serde(rename = "type")]
    pub kind: String,
    /// A folder of video files (relative to the pipeline file). Give this or `manifest`.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// A `.csv` or `.jsonl` manifest (relative to the pipeline file); paths in it are relative
    /// to the manifest.
    #[serde(default)]
    pub manifest: Option<PathBuf>,
    /// Folder mode: file extensions to take (case-insensitive).
    #[serde(default = "default_exts")]
    pub extensions: Vec<String>,
    /// Folder mode: descend into sub-folders.
    #[serde(default = "yes")]
    pub recursive: bool,
    /// Manifest column holding the media path (or URL).
    #[serde(default = "default_path_col")]
    pub path_column: String,
    /// Manifest column holding the video id (optional column).
    #[serde(default = "default_id_col")]
    pub id_column: String,
    /// Accept http(s) URLs in the path column, to be fetched by a `download` stage (which the
    /// pipeline then needs before `probe`). Without it, URLs are rejected as `url_not_local`.
    #[serde(default)]
    pub urls: bool,
}

fn default_exts() -> Vec<String> {
    [
        "mp4", "mkv", "webm", "mov", "avi", "m4v", "mpg", "mpeg", "ts", "flv", "3gp", "wmv", "ogv",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
fn default_path_col() -> String {
    "path".into()
}
fn default_id_col() -> String {
    "id".into()
}

/// One listed entry before hashing (the `dataset` source makes them too, and shares the rest).
#[derive(Debug, Clone, Default)]
pub(crate) struct Entry {
    /// Where it was listed (file:line), for messages and ids of broken lines.
    pub(crate) origin: String,
    /// Manifest line (folder mode: position in the listing, from 1): what a duplicate names.
    pub(crate) line: u32,
    pub(crate) id: Option<String>,
    pub(crate) path: Option<PathBuf>,
    pub(crate) url: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) extra: Vec<Option<String>>,
    pub(crate) problem: Option<StageError>,
    /// The file's content digest, once identified.
    pub(crate) known: Option<crate::store::media_digests::Known>,
}

impl Entry {
    /// A manifest line that could not be read: a `bad_manifest_line` reject naming it.
    fn broken(origin: String, line: u32, n_extra: usize, err: impl std::fmt::Display) -> Self {
        let problem = StageError::data("bad_manifest_line", format!("{origin}: {err}"));
        Self {
            origin,
            line,
            extra: vec![None; n_extra],
            problem: Some(problem),
            ..Default::default()
        }
    }
}

/// What `open` learned of a manifest, so that `run` reads it again line by line instead of
/// holding every entry (a 100,000-line manifest would otherwise be ~50 MB of entries).
#[derive(Debug, Clone, Default)]
struct Layout {
    file: PathBuf,
    csv: bool,
    /// CSV: the path column, the id column and the other columns, by index.
    pcol: usize,
    icol: Option<usize>,
    extra_cols: Vec<usize>,
    /// The manifest's extra columns in order (JSONL: every key seen in the file).
    names: Vec<String>,
    /// Positions of `title` and `description` among `names`: they fill the source columns of
    /// those names instead of being extras.
    title: Option<usize>,
    description: Option<usize>,
}

pub struct LocalSource {
    cfg: LocalConfig,
    dir: Option<PathBuf>,
    manifest: Option<PathBuf>,
    /// Folder mode: the files found.
    entries: Vec<Entry>,
    /// Manifest mode.
    layout: Option<Layout>,
    total: u64,
    extras: Extras,
}

pub fn build(
    table: &toml::Table,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError> {
    let cfg: LocalConfig = bcx.src.typed(table, at)?;
    let dir = cfg.dir.as_deref().map(|p| bcx.resolve(p));
    let manifest = cfg.manifest.as_deref().map(|p| bcx.resolve(p));
    if dir.is_some() == manifest.is_some() {
        return Err(bcx.src.error_at(
            at,
            "give exactly one of `dir` (a folder of videos) or `manifest` (CSV or JSONL)",
        ));
    }
    if let Some(m) = &manifest
        && !matches!(manifest_ext(m).as_str(), "csv" | "jsonl" | "ndjson")
    {
        return Err(bcx.src.error_at(
            &crate::config::key_at(at, "manifest"),
            format!("{}: a manifest must end in .csv or .jsonl", m.display()),
        ));
    }
    let json = serde_json::to_value(&cfg).unwrap_or_default();
    Ok((
        Box::new(LocalSource {
            cfg,
            dir,
            manifest,
            entries: vec![],
            layout: None,
            total: 0,
            extras: Arc::new(vec![]),
        }),
        json,
    ))
}

/// A manifest's extension, lowercased: what tells CSV from JSONL.
fn manifest_ext(m: &Path) -> String {
    m.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn walk(
    dir: &Path,
    recursive: bool,
    exts: &[String],
    out: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            if recursive {
                walk(&p, recursive, exts, out)?;
            }
        } else if exts.is_empty()
            || p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| exts.iter().any(|w| w.eq_ignore_ascii_case(x)))
        {
            out.push(p);
        }
    }
    Ok(())
}

pub(crate) fn json_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

type Entries = Box<dyn Iterator<Item = Entry> + Send>;

/// The source table's column names, which no extra column may take.
pub(crate) fn source_columns() -> Result<Vec<String>, RunError> {
    let fields = crate::store::shards::fields_of::<SourceInfo>()?;
    Ok(fields.iter().map(|f| f.name().clone()).collect())
}

#[async_trait]
impl Source for LocalSource {
    fn provides(&self) -> &'static [Slot] {
        if self.cfg.urls {
            // Some records may have only a URL: a download stage must come first.
            &[Slot::Source]
        } else {
            &[Slot::Source, Slot::Media]
        }
    }
    async fn open(&mut self, _cx: &StageContext) -> Result<(), RunError> {
        if let Some(dir) = self.dir.clone() {
            if !dir.is_dir() {
                return Err(RunError::Config(format!(
                    "source dir {}: not a folder",
                    dir.display()
                )));
            }
            let mut files = vec![];
            walk(&dir, self.cfg.recursive, &self.cfg.extensions, &mut files)
                .map_err(|e| RunError::Config(format!("source dir {}: {e}", dir.display())))?;
            self.entries = files
                .into_iter()
                .zip(1u32..)
                .map(|(p, line)| Entry {
                    origin: p.display().to_string(),
                    line,
                    path: Some(p),
                    ..Default::default()
                })
                .collect();
        } else if let Some(m) = self.manifest.clone() {
            if !m.is_file() {
                return Err(RunError::Config(format!(
                    "source manifest {}: no such file",
                    m.display()
                )));
            }
            let (mut layout, total) = if manifest_ext(&m) == "csv" {
                Layout::csv(&self.cfg, &m)?
            } else {
                Layout::jsonl(&self.cfg, &m)?
            };
            self.extras = Arc::new(layout.take_metadata_columns()?);
            self.total = total;
            self.layout = Some(layout);
        }
        Ok(())
    }

    fn extras(&self) -> Extras {
        self.extras.clone()
    }

    fn total(&self) -> Option<u64> {
        Some(match self.layout {
            Some(_) => self.total,
            None => self.entries.len() as u64,
        })
    }

    fn run(self: Box<Self>, cx: StageContext) -> SourceStream {
        let (cpu, digests) = (cx.cpu.clone(), cx.media_digests.clone());
        // Hash in parallel, keep the listing order, then drop duplicates in order.
        let this = *self;
        let from_manifest = this.layout.is_some();
        let entries: Entries = match this.layout {
            Some(l) => match l.entries(this.cfg) {
                Ok(it) => it,
                // The manifest went away between open and run.
                Err(e) => return futures::stream::iter([Err(e)]).boxed(),
            },
            None => Box::new(this.entries.into_iter()),
        };
        let hashed =
            futures::stream::iter(entries).map(move |e| identify(cpu.clone(), digests.clone(), e));
        // Id hash → where it was first listed: 12 bytes a video, whatever the manifest holds.
        let mut seen: HashMap<u64, u32> = HashMap::new();
        hashed
            .buffered(cx.cpu.threads().max(2))
            .map(move |e| source_item(e, &mut seen, from_manifest))
            .map(Ok)
            .boxed()
    }
}

/// Gives an entry with a file its content digest (kept, when the file's stat is unchanged since:
/// `StageContext::media_digests`; else read on the CPU pool) and, when listed
/// without an id, its content id: the first 16 hex digits of that BLAKE3. A file that is missing,
/// unreadable, or changed while it was read becomes the entry's problem, naming where it was
/// listed. Entries with a problem or only a URL are left as they are.
pub(crate) async fn identify(
    cpu: crate::runtime::stage::CpuPool,
    digests: crate::store::media_digests::MediaDigests,
    e: Entry,
) -> Entry {
    let mut e = e;
    let Some(path) = e.path.clone().filter(|_| e.problem.is_none()) else {
        return e;
    };
    // One key per file, however it was written in the listing.
    let path = path.canonicalize().unwrap_or(path);
    e.path = Some(path.clone());
    let known = match digests.kept(&path) {
        Ok(Some(k)) => Ok(k),
        Ok(None) => cpu.run(move || digests.read(&path)).await,
        Err(e) => Err(e),
    };
    match known {
        Ok(known) => {
            e.id.get_or_insert_with(|| known.blake3[..16].to_string());
            e.known = Some(known);
        }
        Err(err) => {
            let detail = match err.reason.as_str() {
                "missing_file" => format!(
                    "{}: {} does not exist or is not a file",
                    e.origin,
                    e.path.as_deref().unwrap_or(Path::new("")).display()
                ),
                _ => format!("{}: {}", e.origin, err.detail),
            };
            e.problem = Some(StageError { detail, ..err });
        }
    }
    e
}

/// An identified entry as the source's item: a reject for a problem or an id listed before
/// (`seen`: id key → where it was first listed), else its record.
pub(crate) fn source_item(
    e: Entry,
    seen: &mut HashMap<u64, u32>,
    from_manifest: bool,
) -> Result<VideoRecord, SourceReject> {
    let id = e.id.clone().unwrap_or_else(|| e.origin.clone());
    if let Some(problem) = e.problem {
        return Err(SourceReject {
            video_id: id,
            extra: e.extra,
            error: problem,
        });
    }
    let key = crate::record::id_key(&id);
    if let Some(first) = seen.get(&key) {
        let first = if from_manifest {
            format!("line {first}")
        } else {
            format!("file {first} of the folder listing")
        };
        return Err(SourceReject {
            video_id: id.clone(),
            extra: e.extra,
            error: StageError::data("duplicate_id", format!("{}: same id as {first}", e.origin)),
        });
    }
    seen.insert(key, e.line);
    Ok(record_of(id, e))
}

/// The record of an entry without a problem: a URL as listed, or a local file by its absolute
/// path (which is also its media).
fn record_of(id: String, e: Entry) -> VideoRecord {
    let mut info = SourceInfo {
        title: e.title,
        description: e.description,
        ..Default::default()
    };
    if let Some(url) = e.url {
        info.url = Some(url);
        return VideoRecord::new(id, info, e.extra);
    }
    let path = e.path.expect("no problem implies a path or a URL");
    let known = e.known.expect("an identified file has its digest");
    let path = path.display().to_string();
    (info.path, info.size_bytes) = (Some(path.clone()), Some(known.size));
    let mut rec = VideoRecord::new(id, info, e.extra);
    rec.media = Some(MediaFile {
        path,
        size_bytes: known.size,
        blake3: Some(known.blake3),
        hashed: known.hashed,
    });
    rec
}
