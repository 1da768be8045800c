//! `release --harness`: the release's questions as the evaluation harnesses people run, so a
//! model is scored without porting code.
//!
//! - `lmms-eval` writes `harness/lmms_eval/`: one task per level, an all-items task and a
//!   CircularEval task, a group over them, and one `utils.py` (`lmms.rs`).
//! - `vlmevalkit` writes `harness/vlmevalkit/<Name>.tsv` and `<Name>_CIRC.tsv`, a custom
//!   multiple-choice image dataset with the frames as images (`vlmevalkit.rs`).
//!
//! Reads the release folder as written (its `questions/` and `data/` Parquet and the frames),
//! after checking every file against the checksums in `croissant.json`: an export of a folder
//! someone edited would score a benchmark that is not the released one. Afterwards the checksum
//! list is refreshed so that it covers the harness files too. Calls nothing.

mod lmms;
mod vlmevalkit;

use super::questions::ReleasedItem;
use crate::error::RunError;
use arrow::array::{Array, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An evaluation harness a release can be exported for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Harness {
    /// lmms-eval (0.7): a task folder for `lmms_eval --include_path`.
    #[value(name = "lmms-eval")]
    LmmsEval,
    /// VLMEvalKit: a custom multiple-choice TSV (and its CircularEval copy) for `LMUData/`.
    Vlmevalkit,
}

/// Writes each harness's files into `release/harness/`; returns the files written.
pub fn export(release: &Path, harnesses: &[Harness]) -> Result<Vec<PathBuf>, RunError> {
    if harnesses.is_empty() {
        return Ok(vec![]);
    }
    crate::release::integrity::verify(release).map_err(|e| {
        RunError::Config(format!("{e} (the harness exports read the released files)"))
    })?;
    let items = read_items(release)?;
    let name = task_name(release);
    let mut written = vec![];
    let mut done = vec![];
    for h in harnesses {
        if done.contains(h) {
            continue;
        }
        done.push(*h);
        written.extend(match h {
            Harness::LmmsEval => lmms::write(release, &name, &items)?,
            Harness::Vlmevalkit => vlmevalkit::write(release, &name, &items)?,
        });
    }
    crate::release::integrity::refresh(release).map_err(|e| {
        RunError::Config(format!("{e} (refreshing the checksums after the export)"))
    })?;
    Ok(written)
}

/// The release folder's name as a task name: lower-case letters, digits and `_`, starting with
/// a letter (lmms-eval task names and VLMEvalKit dataset names are both looked up by it).
pub fn task_name(release: &Path) -> String {
    let raw = release
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let s = ident(&raw);
    if s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s
    } else {
        format!("vc_{s}")
    }
}

/// `s` as lower-case ASCII letters, digits and single underscores.
pub fn ident(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

fn parquet_files(dir: &Path, hint: &str) -> Result<Vec<PathBuf>, RunError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| RunError::Config(format!("{}: {e} ({hint})", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    Ok(files)
}

/// A released Parquet file's rows (one reader for every command that opens a release).
fn batches(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    crate::release::availability::read_parquet(path).map(|(_, b)| b)
}

/// The released items in file order (splits sorted by name, as `evaluate` reads them).
fn read_items(release: &Path) -> Result<Vec<ReleasedItem>, RunError> {
    let hint = "the harness exports need the questions config: a run with a questions stage";
    let mut items = vec![];
    for f in parquet_files(&release.join("questions"), hint)? {
        for b in batches(&f)? {
            let rows: Vec<ReleasedItem> = serde_arrow::from_record_batch(&b)
                .map_err(|e| RunError::Config(format!("{}: {e}", f.display())))?;
            items.extend(rows);
        }
    }
    if items.is_empty() {
        return Err(RunError::Config(format!(
            "{}: no items to export",
            release.join("questions").display()
        )));
    }
    Ok(items)
}

/// One frame of a video: its path in the release and, when the rows carry them, its bytes.
pub(crate) struct Frame {
    pub path: String,
    pub bytes: Option<Vec<u8>>,
}

/// video → its frames, from the release's `data/` rows (`--frames paths` or `bytes`).
pub(crate) fn read_frames(release: &Path) -> Result<HashMap<String, Vec<Frame>>, RunError> {
    let mut out = HashMap::new();
    for f in parquet_files(&release.join("data"), "not a release folder?")? {
        for b in batches(&f)? {
            let ids = crate::store::shards::text_column(&b, "video_id")
                .ok_or_else(|| RunError::Config(format!("{}: no video_id", f.display())))?;
            let Some(col) = b.column_by_name("frames") else {
                continue;
            };
            let list = col.as_any().downcast_ref::<ListArray>().ok_or_else(|| {
                RunError::Config(format!("{}: `frames` is not a list", f.display()))
            })?;
            for i in 0..b.num_rows() {
                let v = list.value(i);
                out.insert(ids.value(i).to_string(), frames_of(v.as_ref()));
            }
        }
    }
    Ok(out)
}

fn frames_of(v: &dyn Array) -> Vec<Frame> {
    if let Some(paths) = v.as_any().downcast_ref::<StringArray>() {
        return (0..paths.len())
            .map(|k| Frame {
                path: paths.value(k).to_string(),
                bytes: None,
            })
            .collect();
    }
    let Some(s) = v.as_any().downcast_ref::<StructArray>() else {
        return vec![];
    };
    let bytes = s
        .column_by_name("bytes")
        .and_then(|c| c.as_any().downcast_ref::<BinaryArray>());
    let paths = s
        .column_by_name("path")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>());
    (0..s.len())
        .map(|k| Frame {
            path: paths.map(|p| p.value(k).to_string()).unwrap_or_default(),
            bytes: bytes.map(|b| b.value(k).to_vec()),
        })
        .collect()
}

pub(crate) fn write_text(path: &Path, text: &str) -> Result<PathBuf, RunError> {
    let io = |e| RunError::io(path.display().to_string(), e);
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(io)?;
    std::fs::write(path, text).map_err(io)?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_identifiers() {
        assert_eq!(ident("My Release-2026 (v1)"), "my_release_2026_v1");
        assert_eq!(ident("__x__"), "x");
    }
}
