//! The `dataset` source's settings, and their checks beyond the types: each error names the
//! pipeline file's line and key.

use crate::config::{ConfigError, Seg, key_at};
use crate::stages::BuildCx;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which dataset's files the source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Fakesv,
    Multihateclip,
}

/// How FakeSV's rows are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitBy {
    #[default]
    Temporal,
    EventFolds,
    /// The dataset's published id lists: `split_files`, else `fold_files` with `test_fold`.
    Files,
}

/// One file, or several.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Files {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

impl Files {
    pub(super) fn list(&self) -> Vec<PathBuf> {
        match self {
            Files::One(p) => vec![p.clone()],
            Files::Many(v) => v.clone(),
        }
    }
}

/// Settings of `[source] type = "dataset"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// Always "dataset".
    #[serde(rename = "type")]
    pub kind: String,
    /// `fakesv` (FakeSV's `data.json`, JSON Lines) or `multihateclip` (MultiHateClip's TSVs).
    pub format: Format,
    /// The annotation file (FakeSV: `data.json`) or files (MultiHateClip: one TSV per split,
    /// e.g. `["train.tsv", "valid.tsv", "test.tsv"]`), relative to the pipeline file.
    pub annotations: Files,
    /// MultiHateClip: the split of each file, keyed as written in `annotations` [default: the
    /// file's stem].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub splits: BTreeMap<String, String>,
    /// The dataset's label values → ours; a row with another label is rejected
    /// (`unknown_label`). [default FakeSV: 真 → real, 假 → fake, 辟谣 → debunk; MultiHateClip:
    /// Hateful, Offensive, Normal as they are]
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// A folder of the videos, each `<id>.<ext>` (relative to the pipeline file). Give this or
    /// `media_url`.
    #[serde(default)]
    pub media_dir: Option<PathBuf>,
    /// `media_dir`: the extensions tried, in order [default ["mp4"]].
    #[serde(default)]
    pub media_extensions: Option<Vec<String>>,
    /// An http(s) URL with `{id}` where the video id goes (e.g.
    /// "https://www.youtube.com/watch?v={id}"): records carry only the URL, and the pipeline
    /// needs a `download` stage before `probe`. Give this or `media_dir`.
    #[serde(default)]
    pub media_url: Option<String>,
    /// FakeSV: `temporal` (by publish time; needs `publish_time`, which FakeSV's full release
    /// has and its public `data.json` has not), `event_folds`, or `files` (the published id
    /// lists: `split_files`, else `fold_files`) [default temporal; files with `split_files`].
    #[serde(default)]
    pub split_by: Option<SplitBy>,
    /// FakeSV temporal split: the splits' names, earliest first [default ["train", "valid",
    /// "test"]].
    #[serde(default)]
    pub split_names: Option<Vec<String>>,
    /// FakeSV temporal split: each split's share, in the order of `split_names` (any positive
    /// scale) [default [70, 15, 15]].
    #[serde(default)]
    pub split_shares: Option<Vec<f64>>,
    /// FakeSV: the number of event folds [default 5; with `fold_files`, their number].
    #[serde(default)]
    pub folds: Option<u32>,
    /// FakeSV, split by folds: the fold whose videos are `test` [default 1].
    #[serde(default)]
    pub test_fold: Option<u32>,
    /// FakeSV, `split_by = "files"`: each split's published id list (one id a line), relative
    /// to the pipeline file, e.g. `{ train = "data-split/temporal/vid_time3_train.txt", ... }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub split_files: BTreeMap<String, PathBuf>,
    /// FakeSV: the published fold lists, fold 1 first (e.g. `data-split/event/vid_fold_1.txt`
    /// ... `_5.txt`): the `fold` column comes from them instead of the computed event folds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fold_files: Vec<PathBuf>,
    /// MultiHateClip: its `text.json` (title, description, transcript and an LLM's label per
    /// video id), joined to the rows by id.
    #[serde(default)]
    pub text: Option<PathBuf>,
}

/// Where the records' media are.
#[derive(Debug, Clone)]
pub(super) enum Media {
    Dir { dir: PathBuf, exts: Vec<String> },
    Url(String),
}

/// FakeSV's split settings, defaults filled in.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) split_by: SplitBy,
    pub(super) names: Vec<String>,
    pub(super) shares: Vec<f64>,
    pub(super) folds: u32,
    pub(super) test_fold: u32,
    /// `split_files`, resolved: (split name, file).
    pub(super) split_lists: Vec<(String, PathBuf)>,
    /// `fold_files`, resolved, fold 1 first.
    pub(super) fold_lists: Vec<PathBuf>,
}

/// The settings as the source uses them, checked.
pub(super) struct Resolved {
    /// The annotation files and the split each gives (MultiHateClip).
    pub(super) files: Vec<(PathBuf, String)>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) media: Media,
    pub(super) plan: Plan,
    /// MultiHateClip's `text.json`, resolved.
    pub(super) text: Option<PathBuf>,
}

/// Checks the settings beyond their types (errors name the key) and fills in the defaults
/// (into `cfg` too, for the settings the run records).
pub(super) fn resolve(
    cfg: &mut DatasetConfig,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<Resolved, ConfigError> {
    let err = |key: &str, msg: String| bcx.src.error_at(&key_at(at, key), msg);
    let media = media_of(cfg, at, bcx)?;
    let written = cfg.annotations.list();
    if written.is_empty() {
        return Err(err("annotations", "names no file".into()));
    }
    let fakesv = cfg.format == Format::Fakesv;
    let only = |key: &str, given: bool, format: &str| match given {
        true => Err(err(key, format!("applies to format = \"{format}\" only"))),
        false => Ok(()),
    };
    if fakesv {
        if written.len() > 1 {
            return Err(err(
                "annotations",
                "FakeSV has one annotation file (data.json)".into(),
            ));
        }
        only("splits", !cfg.splits.is_empty(), "multihateclip")?;
        only("text", cfg.text.is_some(), "multihateclip")?;
    } else {
        only("split_by", cfg.split_by.is_some(), "fakesv")?;
        only("split_names", cfg.split_names.is_some(), "fakesv")?;
        only("split_shares", cfg.split_shares.is_some(), "fakesv")?;
        only("folds", cfg.folds.is_some(), "fakesv")?;
        only("test_fold", cfg.test_fold.is_some(), "fakesv")?;
        only("split_files", !cfg.split_files.is_empty(), "fakesv")?;
        only("fold_files", !cfg.fold_files.is_empty(), "fakesv")?;
    }
    let files = split_files(cfg, &written, at, bcx)?;
    let labels = cfg.labels.clone().unwrap_or_else(|| {
        super::default_labels(cfg.format)
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    });
    if labels.is_empty() || labels.values().any(|v| v.trim().is_empty()) {
        return Err(err(
            "labels",
            "give each dataset label a label of ours".into(),
        ));
    }
    let plan = split_plan(cfg, fakesv, at, bcx)?;
    cfg.labels = Some(labels.clone());
    let text = cfg.text.as_ref().map(|t| bcx.resolve(t));
    Ok(Resolved {
        files,
        labels,
        media,
        plan,
        text,
    })
}

/// Exactly one of `media_dir` and `media_url`, checked; fills the default extensions.
fn media_of(cfg: &mut DatasetConfig, at: &[Seg], bcx: &BuildCx) -> Result<Media, ConfigError> {
    let err = |key: &str, msg: &str| bcx.src.error_at(&key_at(at, key), msg);
    let both = "give exactly one of `media_dir` (a folder of <id>.<ext> files) or `media_url` (a URL template with {id})";
    match (&cfg.media_dir, &cfg.media_url) {
        (Some(_), Some(_)) => Err(err("media_url", both)),
        (None, None) => Err(bcx.src.error_at(at, both)),
        (Some(dir), None) => {
            let exts: Vec<String> = cfg
                .media_extensions
                .get_or_insert_with(|| vec!["mp4".into()])
                .iter()
                .map(|e| e.trim().trim_start_matches('.').to_string())
                .collect();
            if exts.is_empty() || exts.iter().any(|e| e.is_empty()) {
                return Err(err("media_extensions", "give one or more extensions"));
            }
            let dir = bcx.resolve(dir);
            Ok(Media::Dir { dir, exts })
        }
        (None, Some(url)) => {
            if cfg.media_extensions.is_some() {
                return Err(err("media_extensions", "applies to `media_dir` only"));
            }
            let l = url.to_ascii_lowercase();
            if !url.contains("{id}") || !(l.starts_with("http://") || l.starts_with("https://")) {
                return Err(err(
                    "media_url",
                    "must be an http(s) URL with {id} where the video id goes",
                ));
            }
            Ok(Media::Url(url.clone()))
        }
    }
}

/// The resolved annotation files with the split each gives (MultiHateClip: `splits`, else the
/// file's stem).
fn split_files(
    cfg: &DatasetConfig,
    written: &[PathBuf],
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    let shown: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    for (k, v) in &cfg.splits {
        let at = key_at(&key_at(at, "splits"), k);
        if !shown.contains(k) {
            let msg = format!("names no file of `annotations` ({})", shown.join(", "));
            return Err(bcx.src.error_at(&at, msg));
        }
        if v.trim().is_empty() {
            return Err(bcx.src.error_at(&at, "an empty split name"));
        }
    }
    Ok(written
        .iter()
        .zip(&shown)
        .map(|(p, s)| {
            let stem = p.file_stem().map(|s| s.to_string_lossy().to_string());
            let split = cfg.splits.get(s).cloned().or(stem).unwrap_or_default();
            (bcx.resolve(p), split)
        })
        .collect())
}

/// FakeSV's split settings checked, their defaults filled in (into `cfg` too, for the
/// settings the run records).
fn split_plan(
    cfg: &mut DatasetConfig,
    fakesv: bool,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<Plan, ConfigError> {
    let err = |key: &str, msg: String| bcx.src.error_at(&key_at(at, key), msg);
    let names = || ["train", "valid", "test"].map(String::from).to_vec();
    let by_default = match cfg.split_files.is_empty() {
        true => SplitBy::default(),
        false => SplitBy::Files,
    };
    let mut plan = Plan {
        split_by: cfg.split_by.unwrap_or(by_default),
        names: cfg.split_names.clone().unwrap_or_else(names),
        shares: cfg.split_shares.clone().unwrap_or(vec![70.0, 15.0, 15.0]),
        folds: cfg.folds.unwrap_or(5),
        test_fold: cfg.test_fold.unwrap_or(1),
        split_lists: vec![],
        fold_lists: vec![],
    };
    if !fakesv {
        return Ok(plan);
    }
    id_lists(cfg, &mut plan, at, bcx)?;
    let n = &plan.names;
    let distinct = n.iter().enumerate().all(|(i, x)| !n[..i].contains(x));
    if n.is_empty() || n.iter().any(|x| x.trim().is_empty()) || !distinct {
        return Err(err("split_names", "give distinct, non-empty names".into()));
    }
    let s = &plan.shares;
    if s.len() != n.len()
        || s.iter().any(|x| !x.is_finite() || *x < 0.0)
        || s.iter().sum::<f64>() <= 0.0
    {
        let msg = format!(
            "give {} shares (one per split name), none negative, not all zero",
            n.len()
        );
        return Err(err("split_shares", msg));
    }
    if plan.folds == 0 {
        return Err(err("folds", "must be at least 1".into()));
    }
    if !(1..=plan.folds).contains(&plan.test_fold) {
        return Err(err("test_fold", format!("must be 1..{}", plan.folds)));
    }
    cfg.split_by = Some(plan.split_by);
    cfg.split_names = Some(plan.names.clone());
    cfg.split_shares = Some(plan.shares.clone());
    cfg.folds = Some(plan.folds);
    cfg.test_fold = Some(plan.test_fold);
    Ok(plan)
}

/// The published id lists (`split_files`, `fold_files`) checked against `split_by` and
/// `folds`, resolved into the plan.
fn id_lists(
    cfg: &DatasetConfig,
    plan: &mut Plan,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(), ConfigError> {
    let err = |key: &str, msg: &str| bcx.src.error_at(&key_at(at, key), msg);
    let by_files = plan.split_by == SplitBy::Files;
    if !cfg.split_files.is_empty() && !by_files {
        return Err(err(
            "split_files",
            "applies to split_by = \"files\" (the default when split_files is given)",
        ));
    }
    if by_files && cfg.split_files.is_empty() && cfg.fold_files.is_empty() {
        return Err(err(
            "split_by",
            "\"files\" needs `split_files` (a list per split) or `fold_files` (a list per fold; test_fold is the test split)",
        ));
    }
    for (name, file) in &cfg.split_files {
        let at = key_at(&key_at(at, "split_files"), name);
        if name.trim().is_empty() || file.as_os_str().is_empty() {
            return Err(bcx.src.error_at(&at, "give a split name and a file"));
        }
    }
    if !cfg.fold_files.is_empty() {
        let n = cfg.fold_files.len() as u32;
        if cfg.folds.is_some_and(|f| f != n) {
            let msg = format!("the {n} fold_files are {n} folds; leave `folds` out");
            return Err(err("folds", &msg));
        }
        plan.folds = n;
    }
    plan.split_lists = (cfg.split_files.iter())
        .map(|(name, p)| (name.clone(), bcx.resolve(p)))
        .collect();
    plan.fold_lists = cfg.fold_files.iter().map(|p| bcx.resolve(p)).collect();
    Ok(())
}
