//! What a release folder holds, as two versions are compared: each video's split and label
//! (`data/*.parquet`), each item's split, video and content (`questions/`, `tasks/<task>/`),
//! the version `croissant.json` states and the videos `takedowns.jsonl` took down. Reads only
//! the release's own files; writes and calls nothing.

use crate::error::RunError;
use crate::release::read_parquet;
use arrow::array::{Array, RecordBatch};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One released video.
#[derive(Debug, Clone, PartialEq)]
pub struct Video {
    pub split: String,
    pub label: Option<String>,
}

/// One released item (a question, a task's item).
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub video_id: String,
    pub split: String,
    /// A digest of every value of its row but the split: equal when nothing in it changed.
    pub content: String,
}

/// A release folder as a version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub version: Option<String>,
    pub videos: BTreeMap<String, Video>,
    /// `<config>/<item_id>` (`questions/q1`, `kep/kep-…`) → the item.
    pub items: BTreeMap<String, Item>,
    pub taken_down: BTreeSet<String>,
    /// A digest of the bytes of every data, questions and task file: what changed beyond the
    /// videos and items (a column added, metadata refreshed) shows here alone.
    pub files: String,
}

impl Snapshot {
    /// Reads the release at `dir`.
    pub fn read(dir: &Path) -> Result<Snapshot, RunError> {
        crate::release::check_folder(dir)?;
        let mut s = Snapshot {
            version: version_of(dir),
            taken_down: crate::release::availability::recorded_ids(dir)?,
            ..Default::default()
        };
        let mut files = blake3::Hasher::new();
        for batch in batches_in(&dir.join("data"), &mut files)? {
            let (ids, splits) = (text(&batch, "video_id"), text(&batch, "split"));
            let labels = text(&batch, "label");
            for i in 0..batch.num_rows() {
                let (Some(id), Some(split)) = (ids[i].clone(), splits[i].clone()) else {
                    continue;
                };
                let label = labels[i].clone();
                s.videos.insert(id, Video { split, label });
            }
        }
        s.read_items(&dir.join("questions"), "questions", &mut files)?;
        let tasks = dir.join("tasks");
        if tasks.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(&tasks)
                .map_err(crate::error::io(&tasks))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect();
            names.sort();
            for t in names {
                let name = t.file_name().map(|n| n.to_string_lossy().to_string());
                s.read_items(&t, &name.unwrap_or_default(), &mut files)?;
            }
        }
        s.files = files.finalize().to_hex()[..16].to_string();
        Ok(s)
    }

    fn read_items(
        &mut self,
        dir: &Path,
        config: &str,
        files: &mut blake3::Hasher,
    ) -> Result<(), RunError> {
        for batch in batches_in(dir, files)? {
            let ids = text(&batch, "item_id");
            let (videos, splits) = (text(&batch, "video_id"), text(&batch, "split"));
            let content = row_digests(&batch);
            for i in 0..batch.num_rows() {
                let Some(id) = ids[i].clone() else {
                    continue;
                };
                let item = Item {
                    video_id: videos[i].clone().unwrap_or_default(),
                    split: splits[i].clone().unwrap_or_default(),
                    content: content[i].clone(),
                };
                self.items.insert(format!("{config}/{id}"), item);
            }
        }
        Ok(())
    }
}

/// The version `croissant.json` states, if any.
fn version_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("croissant.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_string)
}

/// Every Parquet file directly in `dir`, read (none when there is no such folder); each
/// file's name and bytes go into `files`.
fn batches_in(dir: &Path, files: &mut blake3::Hasher) -> Result<Vec<RecordBatch>, RunError> {
    if !dir.is_dir() {
        return Ok(vec![]);
    }
    let mut out = vec![];
    for f in crate::store::parquet_files_in(dir).map_err(crate::error::io(dir))? {
        let bytes = std::fs::read(&f).map_err(crate::error::io(&f))?;
        let name = f.file_name().map(|n| n.to_string_lossy().to_string());
        files.update(name.unwrap_or_default().as_bytes());
        files
            .update(&(bytes.len() as u64).to_le_bytes())
            .update(&bytes);
        out.extend(read_parquet(&f)?.1);
    }
    Ok(out)
}

/// A column's values as text (all null when the column is missing).
pub(super) fn text(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let Some(col) = batch.column_by_name(name) else {
        return vec![None; batch.num_rows()];
    };
    let opts = FormatOptions::default();
    let Ok(f) = ArrayFormatter::try_new(col.as_ref(), &opts) else {
        return vec![None; batch.num_rows()];
    };
    (0..batch.num_rows())
        .map(|i| (!col.is_null(i)).then(|| f.value(i).to_string()))
        .collect()
}

/// Each row's digest over its columns (name and value) but `split`: an item's content.
fn row_digests(batch: &RecordBatch) -> Vec<String> {
    let schema = batch.schema();
    let columns: Vec<(String, Vec<Option<String>>)> = (schema.fields().iter())
        .filter(|f| f.name() != "split")
        .map(|f| (f.name().clone(), text(batch, f.name())))
        .collect();
    (0..batch.num_rows())
        .map(|i| {
            let mut h = blake3::Hasher::new();
            for (name, values) in &columns {
                h.update(name.as_bytes());
                match &values[i] {
                    Some(v) => h.update(&[1]).update(v.as_bytes()),
                    None => h.update(&[0]),
                };
            }
            h.finalize().to_hex()[..16].to_string()
        })
        .collect()
}
