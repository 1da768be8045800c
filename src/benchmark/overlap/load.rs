//! What `overlap` compares, read from disk: a release folder (its videos with their ids, splits
//! and frame hashes; its multiple-choice questions and its drafted task items), or a list of
//! video ids (a text file of YouTube ids or URLs, or a CSV or Parquet file with a `video_id`
//! column). Anything else is refused (exit 2) with what was expected.

use super::ids::{video_key, youtube_id};
use super::phash::frame_hashes_bytes;
use crate::error::{RunError, io};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use std::path::{Path, PathBuf};

/// What `--against` takes, for the messages that refuse something else.
pub const EXPECTED: &str = "a release folder (with data/*.parquet), a text file of YouTube ids or URLs (one a line, # comments), or a .csv/.parquet file with a video_id column";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Release,
    IdList,
}

#[derive(Debug, Clone)]
pub struct Video {
    pub id: String,
    /// What ids are compared by (`ids::video_key`).
    pub key: String,
    pub split: Option<String>,
    /// One entry per frame that is not flat (its `phash::VIEWS`' hashes, the whole frame
    /// first); empty for an id list or a release without frames.
    pub hashes: Vec<Vec<u64>>,
}

#[derive(Debug, Clone)]
pub struct Item {
    pub item_id: String,
    pub video_id: String,
    pub split: Option<String>,
    /// The question and its options (sorted), one a line: what near-duplicates are judged on.
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct Collection {
    /// The path as given.
    pub name: String,
    pub kind: Kind,
    pub videos: Vec<Video>,
    pub items: Vec<Item>,
}

fn bad(msg: String) -> RunError {
    RunError::Config(msg)
}

/// Reads a release folder or an id list. `frames`: hash the release's frames (the slow part).
pub fn open(path: &Path, frames: bool) -> Result<Collection, RunError> {
    let name = path.display().to_string();
    if path.is_dir() {
        let files = parquet_files(&path.join("data"))?;
        if files.is_empty() {
            return Err(bad(format!(
                "{name}: a folder without data/*.parquet, so not a release; expected {EXPECTED}"
            )));
        }
        let mut videos = vec![];
        for f in &files {
            read_videos(path, f, frames, &mut videos)?;
        }
        let mut items = vec![];
        for f in parquet_files(&path.join("questions"))? {
            read_items(&f, None, &mut items)?;
        }
        read_task_items(path, &mut items)?;
        return Ok(Collection {
            name,
            kind: Kind::Release,
            videos,
            items,
        });
    }
    if !path.exists() {
        return Err(bad(format!(
            "{name}: no such file or folder; expected {EXPECTED}"
        )));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let videos = match ext.as_str() {
        "csv" => csv_ids(path)?,
        "parquet" => parquet_ids(path)?,
        _ => text_ids(path)?,
    };
    Ok(Collection {
        name,
        kind: Kind::IdList,
        videos,
        items: vec![],
    })
}

fn parquet_files(dir: &Path) -> Result<Vec<PathBuf>, RunError> {
    // A config the release does not have is no file to compare.
    Ok(crate::store::parquet_files_in(dir).unwrap_or_default())
}

/// The batches of a Parquet file, a few rows at a time (frames as bytes can be large).
fn batches(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    let shown = path.display().to_string();
    let f = std::fs::File::open(path).map_err(io(path))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .map(|b| b.with_batch_size(64))
        .and_then(|b| b.build())
        .map_err(|e| bad(format!("{shown}: not a Parquet file: {e}")))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("{shown}: {e}")))
}

/// A column as text (null → none), or none when the batch has no such column.
fn text(b: &RecordBatch, name: &str) -> Option<Vec<Option<String>>> {
    nullable_strings(b.column_by_name(name)?)
}

/// An array's values as text (null → none), or none when it cannot be cast to text.
fn nullable_strings(a: &ArrayRef) -> Option<Vec<Option<String>>> {
    // A text column is read as it is: evaluation calls this once per item's list, and even an
    // identity cast copies the array's data description each time (10 % of a 1M-item score).
    let cast;
    let s = if a.data_type() == &DataType::Utf8 {
        a.as_string::<i32>()
    } else {
        cast = arrow::compute::cast(a, &DataType::Utf8).ok()?;
        cast.as_string::<i32>()
    };
    Some(
        (0..s.len())
            .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
            .collect(),
    )
}

fn required(b: &RecordBatch, name: &str, file: &Path) -> Result<Vec<Option<String>>, RunError> {
    text(b, name).ok_or_else(|| {
        let cols: Vec<&str> = b
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        bad(format!(
            "{}: no `{name}` column (columns: {}); expected {EXPECTED}",
            file.display(),
            cols.join(", ")
        ))
    })
}

/// One row of a list column, as a plain array.
fn list_row(col: &ArrayRef, row: usize) -> Option<ArrayRef> {
    if col.is_null(row) {
        return None;
    }
    match col.data_type() {
        DataType::List(_) => Some(col.as_list::<i32>().value(row)),
        DataType::LargeList(_) => Some(col.as_list::<i64>().value(row)),
        _ => None,
    }
}

/// An array's non-null values as text (none when it cannot be cast to text).
pub(crate) fn strings(a: &ArrayRef) -> Vec<String> {
    nullable_strings(a)
        .into_iter()
        .flatten()
        .flatten()
        .collect()
}

/// Where a frame's JPEG is: a file of the release, or bytes in the row.
enum Frame {
    File(PathBuf),
    Bytes(Vec<u8>),
}

/// The frames of one row: relative paths (`--frames paths`) or image structs (`bytes`).
fn frames_of(col: &ArrayRef, row: usize, root: &Path) -> Vec<Frame> {
    let Some(v) = list_row(col, row) else {
        return vec![];
    };
    if let DataType::Struct(_) = v.data_type() {
        let s = v.as_struct();
        let bytes = s
            .column_by_name("bytes")
            .and_then(|c| arrow::compute::cast(c, &DataType::Binary).ok());
        let paths = s.column_by_name("path").and_then(nullable_strings);
        return (0..s.len())
            .filter_map(|i| {
                if let Some(b) = bytes.as_ref().map(|b| b.as_binary::<i32>())
                    && b.is_valid(i)
                {
                    return Some(Frame::Bytes(b.value(i).to_vec()));
                }
                let p = paths.as_ref()?.get(i)?.clone()?;
                Some(Frame::File(root.join(p)))
            })
            .collect();
    }
    strings(&v)
        .into_iter()
        .map(|p| Frame::File(root.join(p)))
        .collect()
}

fn read_videos(
    root: &Path,
    file: &Path,
    frames: bool,
    out: &mut Vec<Video>,
) -> Result<(), RunError> {
    // `data/<split>-NNNNN-of-NNNNN.parquet`: the split, when the rows do not say it.
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let from_name = stem.split('-').next().map(str::to_string);
    for b in batches(file)? {
        let ids = required(&b, crate::record::COL_VIDEO_ID, file)?;
        let splits = text(&b, "split");
        let urls = ["url", "webpage_url", "source_url"]
            .iter()
            .find_map(|c| text(&b, c));
        let frame_col = b.column_by_name("frames").filter(|_| frames);
        let mut work = vec![];
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else {
                return Err(bad(format!("{}: row with a null video_id", file.display())));
            };
            let url = urls.as_ref().and_then(|u| u[i].as_deref());
            out.push(Video {
                split: splits
                    .as_ref()
                    .and_then(|s| s[i].clone())
                    .or_else(|| from_name.clone()),
                ..id_video(id, url)
            });
            if let Some(c) = frame_col {
                work.push((out.len() - 1, frames_of(c, i, root)));
            }
        }
        for (v, hashes) in hash_all(work)? {
            out[v].hashes = hashes;
        }
    }
    Ok(())
}

/// A video (its position) and its frames' hashes.
type Hashed = (usize, Vec<Vec<u64>>);

/// The hashes of every video's frames, on every core (decoding the JPEGs is the cost).
fn hash_all(work: Vec<(usize, Vec<Frame>)>) -> Result<Vec<Hashed>, RunError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = |(v, frames): &(usize, Vec<Frame>)| -> Result<Hashed, RunError> {
        let mut hashes = vec![];
        for (k, f) in frames.iter().enumerate() {
            let (data, at) = match f {
                Frame::Bytes(b) => (std::borrow::Cow::Borrowed(b), format!("frame {k}")),
                Frame::File(p) => (
                    std::borrow::Cow::Owned(std::fs::read(p).map_err(|e| {
                        bad(format!("{}: a frame the release lists: {e}", p.display()))
                    })?),
                    p.display().to_string(),
                ),
            };
            let h =
                frame_hashes_bytes(&data).map_err(|e| bad(format!("{at}: not an image: {e}")))?;
            if !h.is_empty() {
                hashes.push(h);
            }
        }
        Ok((*v, hashes))
    };
    let per = work.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = work
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(one).collect::<Result<Vec<_>, _>>()))
            .collect();
        let mut out = vec![];
        for h in handles {
            let part = h
                .join()
                .map_err(|p| RunError::Internal(crate::error::panic_message(p.as_ref())))??;
            out.extend(part);
        }
        Ok(out)
    })
}

fn read_items(file: &Path, template: Option<&str>, out: &mut Vec<Item>) -> Result<(), RunError> {
    let norm = crate::benchmark::text::norm;
    for b in batches(file)? {
        let items = required(&b, "item_id", file)?;
        let videos = required(&b, crate::record::COL_VIDEO_ID, file)?;
        let questions = required(&b, "question", file)?;
        let splits = text(&b, "split");
        let options = b.column_by_name("options");
        for i in 0..b.num_rows() {
            let (Some(item), Some(video), Some(q)) = (&items[i], &videos[i], &questions[i]) else {
                continue;
            };
            // A task's own question (filled in with the item's text or not) says nothing of
            // the item: only drafted questions are compared.
            if template.is_some_and(|t| t.contains('{') || norm(t) == norm(q)) {
                continue;
            }
            // Options in a fixed order: releases shuffle them per item.
            let mut opts = options
                .and_then(|c| list_row(c, i))
                .map(|a| strings(&a))
                .unwrap_or_default();
            opts.sort();
            let mut text = q.clone();
            for o in opts {
                text.push('\n');
                text.push_str(&o);
            }
            out.push(Item {
                item_id: item.clone(),
                video_id: video.clone(),
                split: splits.as_ref().and_then(|s| s[i].clone()),
                text,
            });
        }
    }
    Ok(())
}

/// The drafted items of the task configs (`tasks/tasks.json` names them and their question).
fn read_task_items(root: &Path, out: &mut Vec<Item>) -> Result<(), RunError> {
    let path = root.join("tasks/tasks.json");
    let Ok(data) = std::fs::read(&path) else {
        return Ok(());
    };
    let infos: Vec<serde_json::Value> = serde_json::from_slice(&data)
        .map_err(|e| bad(format!("{}: not a task list: {e}", path.display())))?;
    for info in infos {
        let (Some(name), Some(q)) = (info["name"].as_str(), info["question"].as_str()) else {
            return Err(bad(format!(
                "{}: an entry without name or question",
                path.display()
            )));
        };
        for f in parquet_files(&root.join("tasks").join(name))? {
            read_items(&f, Some(q), out)?;
        }
    }
    Ok(())
}

fn id_video(v: &str, url: Option<&str>) -> Video {
    Video {
        id: v.to_string(),
        key: video_key(v, url),
        split: None,
        hashes: vec![],
    }
}

fn csv_ids(path: &Path) -> Result<Vec<Video>, RunError> {
    let shown = path.display().to_string();
    let mut r = csv::Reader::from_path(path).map_err(|e| bad(format!("{shown}: {e}")))?;
    let headers = r
        .headers()
        .map_err(|e| bad(format!("{shown}: {e}")))?
        .clone();
    let col = |n: &str| headers.iter().position(|h| h.trim() == n);
    let Some(at) = col(crate::record::COL_VIDEO_ID) else {
        return Err(bad(format!(
            "{shown}: no video_id column in the header ({}); expected {EXPECTED}",
            headers.iter().collect::<Vec<_>>().join(", ")
        )));
    };
    let url = col("url");
    let mut out = vec![];
    for (n, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| bad(format!("{shown}:{}: {e}", n + 2)))?;
        let v = rec.get(at).unwrap_or("").trim();
        if v.is_empty() {
            return Err(bad(format!("{shown}:{}: empty video_id", n + 2)));
        }
        out.push(id_video(v, url.and_then(|u| rec.get(u))));
    }
    Ok(out)
}

fn parquet_ids(path: &Path) -> Result<Vec<Video>, RunError> {
    let mut out = vec![];
    for b in batches(path)? {
        let ids = required(&b, crate::record::COL_VIDEO_ID, path)?;
        let urls = text(&b, "url");
        for (i, v) in ids.iter().enumerate() {
            if let Some(v) = v {
                out.push(id_video(v, urls.as_ref().and_then(|u| u[i].as_deref())));
            }
        }
    }
    Ok(out)
}

fn text_ids(path: &Path) -> Result<Vec<Video>, RunError> {
    let shown = path.display().to_string();
    let data = std::fs::read(path).map_err(io(path))?;
    let text = String::from_utf8(data)
        .map_err(|_| bad(format!("{shown}: not a text file; expected {EXPECTED}")))?;
    let mut out = vec![];
    for (n, line) in text.lines().enumerate() {
        // A comment is a whole line, or starts after a space (a URL may hold `#t=`).
        let line = line.split(" #").next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(id) = youtube_id(line) else {
            let shown_line: String = line.chars().take(60).collect();
            return Err(bad(format!(
                "{shown}:{}: {shown_line:?} is neither a YouTube id (11 characters of A-Z, a-z, 0-9, - and _) nor a YouTube URL; expected {EXPECTED}",
                n + 1
            )));
        };
        out.push(id_video(&id, None));
    }
    Ok(out)
}
