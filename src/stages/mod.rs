//! The stage registry: every `type` a pipeline file may name, and how each is built.
//! Adding a stage: a new `stages/<name>.rs` with a `pub const KIND: StageKind` (name, about,
//! build; `reselect` if it has thresholds; `keys`, its settings types, which the generated
//! reference lists), a `mod` line and one line in `STAGE_KINDS`; a new
//! `Slot` in `record.rs` if it fills one. A kind without thresholds implements `PlainStage` on
//! its settings and names `build_plain::<ItsConfig>` as its build. Sources are listed once, in
//! `SOURCE_KINDS`. Nothing else names stage or source kinds: the runner, `rethreshold`, the CLI
//! and `analyze` ask these tables.

pub mod ask;
pub mod caption;
pub mod committee;
pub mod dataset;
pub mod dedup;
pub mod download;
pub mod frames;
pub mod items;
pub mod language;
pub mod local;
pub mod model_call;
pub mod model_inputs;
pub mod ocr;
pub mod overlays;
pub mod prescreen;
pub mod probe;
pub mod quality;
pub mod questions;
pub mod relevance;
pub mod rethreshold;
pub mod selection;
pub mod shots;
pub mod structured;
pub mod transcript;
pub mod youtube;

use crate::config::{ConfigError, Seg, ServiceConfig, SourceText, StageCommon};
use crate::runtime::stage::Source;
use crate::runtime::{StageCounts, StageTask};
use crate::store::shards::TableView;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where build functions resolve relative paths: the pipeline file's folder.
pub struct BuildCx<'a> {
    pub base_dir: &'a Path,
    pub src: &'a SourceText,
    /// The pipeline's `[services.*]`, for stages that call one.
    pub services: &'a BTreeMap<String, ServiceConfig>,
    /// Model services built so far: stages naming the same service share one (and its limits).
    pub llm: std::sync::Mutex<BTreeMap<String, std::sync::Arc<crate::clients::llm::LlmService>>>,
}

impl BuildCx<'_> {
    /// The shared client of `[services.<name>]`; `at` is where the stage names it. A stage's
    /// own `mode` gets a client of its own in that mode (its batches apart from the others').
    pub fn llm_service(
        &self,
        name: &str,
        at: &[Seg],
        stage: &StageCommon,
    ) -> Result<std::sync::Arc<crate::clients::llm::LlmService>, ConfigError> {
        let mut built = self.llm.lock().unwrap_or_else(|p| p.into_inner());
        let base = self.services.get(name).map(|c| c.mode);
        let (key, mode) = match stage.mode {
            Some(m) if Some(m) != base => (format!("{name}@{m:?}").to_lowercase(), Some(m)),
            _ => (name.to_string(), None),
        };
        if let Some(s) = built.get(&key) {
            return Ok(s.clone());
        }
        let mut cfg = self.service(name, at)?.clone();
        if let Some(m) = mode {
            cfg.mode = m;
        }
        let mut svc = crate::clients::llm::LlmService::new(name, &cfg)
            .map_err(|e| self.service_error(name, e))?;
        svc.queue_name = key.clone();
        let svc = std::sync::Arc::new(svc);
        built.insert(key, svc.clone());
        Ok(svc)
    }

    /// `[services.<name>]`, which a stage names at `at`.
    pub fn service(&self, name: &str, at: &[Seg]) -> Result<&ServiceConfig, ConfigError> {
        self.services.get(name).ok_or_else(|| {
            self.src.error_at(
                at,
                format!(
                    "no [services.{name}] in the pipeline file (known: {})",
                    self.services.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }

    /// A bad setting of `[services.<name>]`: the service table's error, not the stage's that
    /// names it.
    pub fn service_error(&self, name: &str, e: impl std::fmt::Display) -> ConfigError {
        let at = [Seg::Key("services".into()), Seg::Key(name.to_string())];
        self.src.error_at(&at, e.to_string())
    }

    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

/// How a stage kind is built and what the tools around the runner need to know of it.
pub struct StageKind {
    /// The `type` a pipeline file names.
    pub name: &'static str,
    /// What it adds, for `vidcurate list-stages` and error messages.
    pub about: &'static str,
    pub build: BuildFn,
    /// Scoring stages: re-decides `select` from stored rows with the stage's own threshold type
    /// and checks (the ones a pipeline file's `select` goes through), for `vidcurate rethreshold`.
    pub reselect: Option<ReselectFn>,
    /// A line for the run summary from the stage's counts (empty: nothing to say).
    pub summary: Option<fn(stage_id: &str, counts: &StageCounts) -> String>,
    /// What `vidcurate release` takes from the stage's table.
    pub release: Release,
    /// The keys of its tables (`compute`, `select`, nested ones such as `compute.members`),
    /// for the generated reference.
    pub keys: &'static [(&'static str, crate::config::KeysFn)],
}

/// How a stage's table enters a release (one row per video).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Release {
    /// One row per video: every column, named `<stage id>_<column>`.
    PerVideo,
    /// Several rows per video, of which these columns have one value per video.
    Columns(&'static [&'static str]),
    /// Sampled frames (`FrameRef` rows): the release's frame list, as files or image bytes.
    Frames,
    /// Text regions (`TextRegion` rows): each distinct line once, in frame order.
    Text,
    /// Transcript segments (`TranscriptSegment` rows): per video, the segments' text joined in
    /// time order, with its source, language and the reason when there is no text.
    Transcript,
    /// Nothing (the stage's rows serve other commands).
    Skip,
}

pub type BuildFn = fn(&StageCommon, &[Seg], &[Seg], &BuildCx) -> Result<Built, ConfigError>;
pub type ReselectFn = fn(&toml::Table, &TableView) -> Result<Reselected, ThresholdError>;

/// A scoring stage's thresholds applied to its stored rows.
pub struct Reselected {
    /// The thresholds as applied, defaults filled in.
    pub settings: serde_json::Value,
    /// Whether a video (one with rows or a reject in the table) goes on.
    pub keep: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

/// An invalid threshold: the `select` key and what is wrong.
#[derive(Debug)]
pub struct ThresholdError {
    pub key: String,
    pub message: String,
}

/// A stage's `select` table, typed: `check` runs for pipeline files and `rethreshold` alike.
pub trait Thresholds: DeserializeOwned + Serialize {
    fn check(&self) -> Result<(), ThresholdError>;
}

impl ThresholdError {
    pub fn new(key: &str, message: impl Into<String>) -> Self {
        Self {
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// `key`'s value must lie in `range`.
    pub fn check_range<T: PartialOrd + std::fmt::Display>(
        key: &str,
        value: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<(), Self> {
        if range.contains(&value) {
            Ok(())
        } else {
            Err(Self::new(
                key,
                format!(
                    "{key} must be {}..{}, got {value}",
                    range.start(),
                    range.end()
                ),
            ))
        }
    }
}

/// Thresholds decided from a video's own rows alone (all scoring stages but the committee).
///
/// A stage writes `keep` once; the stage's `Processor::keep` (a run, `keep_by_select!`) and
/// `reselect` (rethreshold, split, release) both decide through it.
pub trait RowThresholds: Thresholds + Send + Sync + 'static {
    type Row: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Whether a video the table has no rows for goes on (by default it does not: a scoring
    /// stage keeps only what it scored).
    const KEEP_WITHOUT_ROWS: bool = false;
    /// Whether a video with these rows goes on.
    fn keep(&self, rows: &[Self::Row]) -> bool;
}

/// The `Processor::keep` of a stage whose `select` field is `RowThresholds`: the video's rows
/// alone decide, as `reselect` decides them again from the stored table.
macro_rules! keep_by_select {
    () => {
        fn keep(&self, _: &crate::record::VideoRecord, _: &[String], rows: &[Self::Row]) -> bool {
            crate::stages::RowThresholds::keep(&self.select, rows)
        }
    };
}
pub(crate) use keep_by_select;

/// The `reselect` of a stage whose thresholds are `RowThresholds`.
pub fn reselect<T: RowThresholds>(
    select: &toml::Table,
    view: &TableView,
) -> Result<Reselected, ThresholdError> {
    reselect_rows(
        select,
        view,
        |t: &T, _id: &str, rows: Option<&Vec<T::Row>>| {
            rows.map_or(T::KEEP_WITHOUT_ROWS, |r| t.keep(r))
        },
    )
}

/// Reads and checks a `select` table (rethreshold: the stored one with the `--set` values).
pub fn thresholds<T: Thresholds>(select: &toml::Table) -> Result<T, ThresholdError> {
    let t: T = toml::Value::Table(select.clone())
        .try_into()
        .map_err(|e: toml::de::Error| ThresholdError::new("", e.message().to_string()))?;
    t.check()?;
    Ok(t)
}

/// A stage's `select` table from a pipeline file, checked; errors point at the key.
pub fn select_settings<T: Thresholds>(
    common: &StageCommon,
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<T, ConfigError> {
    let t: T = bcx.src.typed(&common.select, select_at)?;
    t.check().map_err(|e| {
        bcx.src
            .error_at(&crate::config::key_at(select_at, &e.key), e.message)
    })?;
    Ok(t)
}

/// The thresholds and the stored rows of a scoring stage, as a `Reselected`: `keep_rows` decides
/// from a video's id and rows (None: the video has no rows in the table).
pub fn reselect_rows<T, R>(
    select: &toml::Table,
    view: &TableView,
    keep_rows: impl Fn(&T, &str, Option<&Vec<R>>) -> bool + Send + Sync + 'static,
) -> Result<Reselected, ThresholdError>
where
    T: Thresholds + Send + Sync + 'static,
    R: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let t: T = thresholds(select)?;
    let rows = view
        .rows_shared::<R>()
        .map_err(|e| ThresholdError::new("", format!("reading the stored rows: {e}")))?;
    Ok(Reselected {
        settings: serde_json::to_value(&t).unwrap_or_default(),
        keep: Box::new(move |id| keep_rows(&t, id, rows.get(id))),
    })
}

/// Every stage kind: the one place that lists them.
pub const STAGE_KINDS: &[StageKind] = &[
    download::KIND,
    relevance::KIND,
    prescreen::KIND,
    quality::KIND,
    committee::KIND,
    probe::KIND,
    frames::KIND,
    ocr::KIND,
    overlays::KIND,
    shots::KIND,
    dedup::KIND,
    transcript::KIND,
    language::KIND,
    caption::KIND,
    questions::KIND,
    questions::blind::KIND,
    questions::level_check::KIND,
    ask::KIND,
    items::KIND,
];

/// The kind a pipeline names, if there is one.
pub fn stage_kind(name: &str) -> Option<&'static StageKind> {
    STAGE_KINDS.iter().find(|k| k.name == name)
}

/// How a source kind is built: its `type`, what it collects, its build function.
pub struct SourceKind {
    pub name: &'static str,
    pub about: &'static str,
    pub build: SourceBuildFn,
    /// A line for the run summary from the source's counts (empty: nothing to say).
    pub summary: Option<fn(stage_id: &str, counts: &StageCounts) -> String>,
    /// The keys of its tables (`[source]`, nested ones such as `[source.quota]`), for the
    /// generated reference.
    pub keys: &'static [(&'static str, crate::config::KeysFn)],
}

pub type SourceBuildFn =
    fn(&toml::Table, &[Seg], &BuildCx) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError>;

/// Every source kind: the one place that lists them.
pub const SOURCE_KINDS: &[SourceKind] = &[
    SourceKind {
        name: "local",
        about: "a folder of video files, or a CSV/JSONL manifest with extra columns carried through",
        build: local::build,
        summary: None,
        keys: &[("source", crate::config::keys_of::<local::LocalConfig>)],
    },
    SourceKind {
        name: "dataset",
        about: "an existing dataset's annotation files (FakeSV data.json, MultiHateClip TSVs and text.json): its labels mapped, events, splits and folds (computed, or from its published id lists), media from a folder or a URL template",
        build: dataset::build,
        summary: Some(dataset::summary),
        keys: &[("source", crate::config::keys_of::<dataset::DatasetConfig>)],
    },
    SourceKind {
        name: "youtube",
        about: "a query file -> YouTube Data API search and videos.list: one row per video with provenance (quota-aware, cached)",
        build: youtube::build,
        summary: None,
        keys: &[
            ("source", crate::config::keys_of::<youtube::YouTubeConfig>),
            (
                "source.quota",
                crate::config::keys_of::<crate::clients::youtube::QuotaConfig>,
            ),
        ],
    },
];

/// A built stage and what its fingerprint hashes.
pub struct Built {
    pub task: Box<dyn StageTask>,
    /// Compute settings with defaults filled in.
    pub compute: serde_json::Value,
    /// Bumped when the stage's algorithm changes its results, so old shards are redone.
    pub version: u32,
    pub default_in_flight: usize,
}

/// Deserializes a stage's `compute` table into its typed settings.
pub fn compute_settings<T: DeserializeOwned + Serialize>(
    common: &StageCommon,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(T, serde_json::Value), ConfigError> {
    let t: T = bcx.src.typed(&common.compute, at)?;
    let json = serde_json::to_value(&t).map_err(|e| bcx.src.error_at(at, e.to_string()))?;
    Ok((t, json))
}

/// Serde defaults the stage settings share (`#[serde(default = "yes")]`, imported).
pub fn yes() -> bool {
    true
}
pub fn one<T: From<u8>>() -> T {
    T::from(1)
}
pub fn three<T: From<u8>>() -> T {
    T::from(3)
}

/// The `compute` settings of a stage kind without thresholds, typed: everything its `build`
/// needs besides what `build_plain` does for every such kind (settings with their defaults
/// filled in, a `select` table refused, the task wrapped for the runtime).
pub trait PlainStage: DeserializeOwned + Serialize + Sized {
    /// Bumped when the stage's algorithm changes its results, so old shards are redone.
    const VERSION: u32 = 1;
    /// Videos computed at once unless the pipeline file says otherwise.
    const IN_FLIGHT: usize;
    /// What the fingerprint hashes of these settings: all of them, unless a kind says more
    /// (the models it loads) or less (settings that do not change its results).
    fn fingerprint(&self, compute: serde_json::Value) -> serde_json::Value {
        compute
    }
    /// Checks beyond the types (ranges, the services named), with errors that name the key
    /// under `at`, the compute table; then the stage's task.
    fn task(self, at: &[Seg], bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError>;
}

/// The `build` of every kind whose settings are a `PlainStage`.
pub fn build_plain<C: PlainStage>(
    common: &StageCommon,
    at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    let (cfg, compute) = compute_settings::<C>(common, at, bcx)?;
    no_select(common, select_at, bcx)?;
    let compute = cfg.fingerprint(compute);
    Ok(Built {
        task: cfg.task(at, bcx)?,
        compute,
        version: C::VERSION,
        default_in_flight: C::IN_FLIGHT,
    })
}

/// A processor as the runtime runs it (for `PlainStage::task`).
pub fn processor_task<P: crate::runtime::stage::Processor>(p: P) -> Box<dyn StageTask> {
    Box::new(crate::runtime::ProcessorTask(std::sync::Arc::new(p)))
}

/// Stages without thresholds refuse a `select` table rather than ignore it.
pub fn no_select(common: &StageCommon, at: &[Seg], bcx: &BuildCx) -> Result<(), ConfigError> {
    if common.select.is_empty() {
        Ok(())
    } else {
        Err(bcx.src.error_at(
            at,
            format!("stage type `{}` has no `select` settings", common.kind),
        ))
    }
}

pub fn build_stage(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    match stage_kind(&common.kind) {
        Some(k) => (k.build)(common, compute_at, select_at, bcx),
        None => {
            let mut at = compute_at.to_vec();
            at.pop();
            at.push(Seg::Key("type".into()));
            Err(bcx.src.error_at(
                &at,
                format!(
                    "unknown stage type {:?}; known types: {}",
                    common.kind,
                    STAGE_KINDS
                        .iter()
                        .map(|k| k.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
    }
}

pub fn build_source(
    kind: &str,
    table: &toml::Table,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError> {
    match SOURCE_KINDS.iter().find(|k| k.name == kind) {
        Some(k) => (k.build)(table, at, bcx),
        None => {
            let at = crate::config::key_at(at, "type");
            let known: Vec<&str> = SOURCE_KINDS.iter().map(|k| k.name).collect();
            Err(bcx.src.error_at(
                &at,
                format!(
                    "unknown source type {kind:?}; known types: {}",
                    known.join(", ")
                ),
            ))
        }
    }
}
