//! `release --harness`: the release's questions as the evaluation harnesses people run, so a
//! model is scored without porting code.
//!
//! - `lmms-eval` writes `harness/lmms_eval/`: one task per level, an all-items task and a
//!   CircularEval task, a group over them, and one `utils.py` (`lmms.rs`).
//! - `vlmevalkit` writes `harness/vlmevalkit/<Name>_<split>.tsv` and `<Name>_<split>_CIRC.tsv`
//!   per split, a custom multiple-choice image dataset with the frames as images
//!   (`vlmevalkit.rs`).
//!
//! Splits: every lmms-eval task lists each split's files under its own name and scores
//! `test_split: test` alone (`validation_split` when the release has one; the train split only
//! as `fewshot_split`), as `vidcurate evaluate` scores the test split by default; a release
//! without a test split lists every file as `test`. A level or task with no test item gets no
//! lmms-eval task. A file's split is its name's (`release::split_files`).
//!
//! A benchmark-task release (MVFNDB's tasks, `tasks/tasks.json`) gets one lmms-eval task per
//! task, each scored by its format's own metrics (`tasks.rs`), and a VLMEvalKit TSV per
//! single-choice task.
//!
//! Reads the release folder as written (its `questions/`, `tasks/` and `data/` Parquet and the
//! frames), after checking every file against the checksums in `croissant.json`: an export of a
//! folder someone edited would score a benchmark that is not the released one. Afterwards the
//! checksum list is refreshed so that it covers the harness files too. A folder without
//! `croissant.json` (made before it existed, or by hand) has nothing to check against and is
//! exported with a warning. Calls nothing.
//!
//! `takedown` calls `refresh_exports` after it removed videos, so an export never lists a
//! level, a task or an item the release no longer holds.

mod lmms;
mod tasks;
mod vlmevalkit;

use crate::error::RunError;
use crate::release::integrity::IntegrityError;
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

/// One released multiple-choice item as the exports read it: a `questions` row, or a row of a
/// single-choice task (its `category` as the level).
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct Item {
    pub video_id: String,
    pub item_id: String,
    #[serde(default)]
    pub level: String,
    pub question: String,
    pub options: Vec<String>,
    /// The correct option's letter (A for the first of `options`).
    pub answer: String,
    #[serde(default)]
    pub split: String,
}

/// Writes each harness's files into `release/harness/`; returns the files written.
pub fn export(release: &Path, harnesses: &[Harness]) -> Result<Vec<PathBuf>, RunError> {
    if harnesses.is_empty() {
        return Ok(vec![]);
    }
    match crate::release::integrity::verify(release) {
        Ok(()) => {}
        Err(IntegrityError::NoCroissant(p)) => tracing::warn!(
            "{}: no croissant.json, so the release's files cannot be checked before the export",
            p.display()
        ),
        Err(e) => {
            return Err(RunError::Config(format!(
                "{e} (the harness exports read the released files)"
            )));
        }
    }
    let name = task_name(release);
    let test = has_test(release)?;
    let questions = read_items(release)?;
    let task_set = tasks::read(release)?;
    if questions.is_empty() && task_set.is_empty() {
        return Err(RunError::Config(format!(
            "{}: no items to export: the harness exports need the questions config (a run with a \
             questions stage) or benchmark tasks (tasks/tasks.json)",
            release.display()
        )));
    }
    // Every export's refusal before any writes: a second one failing must not leave the first
    // written and the folder's checksums stale.
    if harnesses.contains(&Harness::Vlmevalkit) && !questions.is_empty() {
        vlmevalkit::check(release, &questions)?;
    }
    let mut written = vec![];
    let mut done = vec![];
    for h in harnesses {
        if done.contains(h) {
            continue;
        }
        done.push(*h);
        h.remove(release)?;
        match h {
            Harness::LmmsEval => {
                // lmms-eval scores the test split: its levels are those the test items have.
                let scored: Vec<Item> = questions
                    .iter()
                    .filter(|i| !test || i.split == "test")
                    .cloned()
                    .collect();
                if !scored.is_empty() {
                    written.extend(lmms::write(release, &name, &scored, test)?);
                }
                written.extend(tasks::write_lmms(release, &name, &task_set, test)?);
                written.push(lmms::write_utils(release, &name, &scored, &task_set)?);
            }
            Harness::Vlmevalkit => {
                if !questions.is_empty() {
                    written.extend(vlmevalkit::write(release, &name, &questions)?);
                }
                written.extend(tasks::write_vlmevalkit(release, &name, &task_set)?);
            }
        }
    }
    crate::release::integrity::refresh_listed(release).map_err(|e| {
        RunError::Config(format!("{e} (refreshing the checksums after the export)"))
    })?;
    Ok(written)
}

impl Harness {
    /// The folder of the release this harness's files live in.
    pub fn folder(self) -> &'static str {
        match self {
            Harness::LmmsEval => "harness/lmms_eval",
            Harness::Vlmevalkit => "harness/vlmevalkit",
        }
    }

    /// Removes this harness's folder of the release, if it has one.
    fn remove(self, release: &Path) -> Result<(), RunError> {
        let dir = release.join(self.folder());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(crate::error::io(&dir))?;
        }
        Ok(())
    }
}

/// The harness exports the release has: those whose folder exists, and those `croissant.json`
/// lists files of (a takedown cut short while it wrote an export again leaves the listing).
pub fn exported(release: &Path) -> Vec<Harness> {
    let listed = crate::release::integrity::listed(release).unwrap_or_default();
    [Harness::LmmsEval, Harness::Vlmevalkit]
        .into_iter()
        .filter(|h| {
            let prefix = format!("{}/", h.folder());
            release.join(h.folder()).is_dir() || listed.iter().any(|f| f.starts_with(&prefix))
        })
        .collect()
}

/// Writes the exports `present` (what `exported` said before the release was edited) again
/// from the release's files as they are now: after a takedown a level or a task may have no
/// item left. Returns the harnesses written, and those removed because nothing is left.
pub fn refresh_exports(
    release: &Path,
    present: &[Harness],
) -> Result<(Vec<Harness>, Vec<Harness>), RunError> {
    if present.is_empty() {
        return Ok((vec![], vec![]));
    }
    if read_items(release)?.is_empty() && tasks::read(release)?.is_empty() {
        for h in present {
            h.remove(release)?;
        }
        crate::release::integrity::refresh_listed(release)
            .map_err(|e| RunError::Config(e.to_string()))?;
        return Ok((vec![], present.to_vec()));
    }
    export(release, present)?;
    Ok((present.to_vec(), vec![]))
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
    crate::store::parquet_files_in(dir)
        .map_err(|e| RunError::Config(format!("{}: {e} ({hint})", dir.display())))
}

/// A released Parquet file's rows (one reader for every command that opens a release).
fn batches(path: &Path) -> Result<Vec<RecordBatch>, RunError> {
    crate::release::read_parquet(path).map(|(_, b)| b)
}

/// Whether the release has a test split: then the lmms-eval tasks score it alone.
fn has_test(release: &Path) -> Result<bool, RunError> {
    Ok(crate::release::split_files::release_splits(release)?
        .iter()
        .any(|s| s == "test"))
}

/// The released questions in file order (splits sorted by name, as `evaluate` reads them);
/// none when the release has no questions config.
fn read_items(release: &Path) -> Result<Vec<Item>, RunError> {
    let dir = release.join("questions");
    if !dir.is_dir() {
        return Ok(vec![]);
    }
    let mut items = vec![];
    for f in parquet_files(&dir, "the questions config")? {
        items.extend(items_of(&f)?);
    }
    Ok(items)
}

/// A file's rows as `Item`s, each in the split the file's name gives (what `datasets` and the
/// lmms-eval tasks read), else the one its `split` column gives.
fn items_of(f: &Path) -> Result<Vec<Item>, RunError> {
    let mut items = rows_of::<Item>(f)?;
    if let Some(s) = crate::release::split_files::split_of(f) {
        for it in &mut items {
            it.split = s.to_string();
        }
    }
    Ok(items)
}

/// A task YAML's data: each split's files of `files` (release-relative, in order) under its
/// own name, `test_split: test`, `validation_split` when there are validation files, and the
/// train files as `fewshot_split` only, so lmms-eval scores the test items alone. Without a
/// test split (`test` false) every file is listed as `test`: all there is to score, as
/// `evaluate` then scores every split.
pub(crate) fn dataset_yaml(files: &[String], test: bool) -> String {
    let list =
        |fs: Vec<&String>| -> String { fs.iter().map(|f| format!("\n      - {f}")).collect() };
    if !test {
        return format!(
            "# The release has no test split: every file is scored as `test` (as `vidcurate evaluate`\n\
             # scores every split then).\ndataset_kwargs:\n  data_files:\n    test:{}\ntest_split: test",
            list(files.iter().collect())
        );
    }
    let of = |s: &str| -> Vec<&String> {
        files
            .iter()
            .filter(|f| crate::release::split_files::split_of(Path::new(f.as_str())) == Some(s))
            .collect()
    };
    let mut y = format!(
        "dataset_kwargs:\n  data_files:\n    test:{}",
        list(of("test"))
    );
    let mut keys = "# Scored: the test split alone (as `vidcurate evaluate` scores it by default).\ntest_split: test".to_string();
    for (split, key) in [
        ("validation", "validation_split"),
        ("train", "fewshot_split"),
    ] {
        let fs = of(split);
        if fs.is_empty() {
            continue;
        }
        y += &format!("\n    {split}:{}", list(fs));
        if split == "train" {
            keys += "\n# The train split: few-shot examples only (--num_fewshot), never scored.";
        }
        keys += &format!("\n{key}: {split}");
    }
    y + "\n" + &keys
}

/// One entry of a task YAML's `metric_list`, aggregated by `utils.py`'s function `agg`.
fn metric_yaml(metric: &str, agg: &str, higher_is_better: bool) -> String {
    format!(
        "  - metric: {metric}\n    aggregation: !function utils.{agg}\n    higher_is_better: {higher_is_better}\n"
    )
}

/// The distinct values of `key` over `items` in the order they first appear: the levels in the
/// order `evaluate` reports them, the splits in the order the items come.
fn first_seen<'a>(items: &'a [Item], key: impl Fn(&'a Item) -> &'a str) -> Vec<&'a str> {
    let mut out: Vec<&str> = vec![];
    for it in items {
        if !out.contains(&key(it)) {
            out.push(key(it));
        }
    }
    out
}

/// A released Parquet file's rows as `T`.
fn rows_of<T: serde::de::DeserializeOwned>(f: &Path) -> Result<Vec<T>, RunError> {
    let mut out = vec![];
    for b in batches(f)? {
        let rows: Vec<T> = serde_arrow::from_record_batch(&b)
            .map_err(|e| RunError::Config(format!("{}: {e}", f.display())))?;
        out.extend(rows);
    }
    Ok(out)
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
    let io = || crate::error::io(path);
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(io())?;
    std::fs::write(path, text).map_err(io())?;
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
