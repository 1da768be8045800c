//! `vidcurate rethreshold`: re-applies the scoring stages' `select` thresholds to the stored
//! scores, with new values, and prints the funnel before and after — no model is called, no stage
//! runs. The selection is written to `selections/` beside the one of the pipeline's own settings.
//!
//! Funnel: every stage in chain order takes the videos the stages before it passed on; of those,
//! `done` have rows, `rejected` failed there, `pending` were never reached (a lower threshold
//! upstream lets through videos a rerun must still score), and `out` go on.

use crate::error::RunError;
use crate::stages::{Reselected, stage_kind};
use crate::store::Store;
use crate::store::manifest;
use crate::store::shards::{TableView, read_table};
use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// `stage.key=value` from the command line.
#[derive(Debug, Clone)]
pub struct Override {
    pub stage: String,
    pub key: String,
    pub value: toml::Value,
}

impl std::str::FromStr for Override {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (lhs, v) = s.split_once('=').ok_or_else(|| {
            format!("{s:?}: expected STAGE.KEY=VALUE, e.g. relevance.min_score=8")
        })?;
        let (stage, key) = lhs
            .trim()
            .split_once('.')
            .ok_or_else(|| format!("{s:?}: expected STAGE.KEY=VALUE"))?;
        let v = v.trim();
        // A TOML value (8, 0.5, true, "x"); bare words are strings.
        let value = toml::from_str::<toml::Table>(&format!("v = {v}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(v.to_string()));
        Ok(Self {
            stage: stage.to_string(),
            key: key.to_string(),
            value,
        })
    }
}

/// One line of the funnel.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FunnelRow {
    pub stage: String,
    pub kind: String,
    pub input: usize,
    pub done: usize,
    pub rejected: usize,
    pub pending: usize,
    pub out: usize,
}

#[derive(Debug)]
pub struct Rethreshold {
    pub before: Vec<FunnelRow>,
    pub after: Vec<FunnelRow>,
    pub selection_file: std::path::PathBuf,
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// A scoring stage's `select` (stored, or with the `--set` values) applied to its rows; None for
/// stages without thresholds.
fn reselect(
    kind: &str,
    stage: &str,
    select: &toml::Table,
    view: &TableView,
) -> Result<Option<Reselected>, RunError> {
    let Some(f) = stage_kind(kind).and_then(|k| k.reselect) else {
        return Ok(None);
    };
    f(select, view).map(Some).map_err(|e| {
        RunError::Config(if e.key.is_empty() {
            format!("select of stage {stage}: {}", e.message)
        } else {
            format!("{stage}.{}: {}", e.key, e.message)
        })
    })
}

/// Whether a stage kind has thresholds to re-decide.
fn scoring(kind: &str) -> bool {
    stage_kind(kind).is_some_and(|k| k.reselect.is_some())
}

pub(crate) struct StageData {
    id: String,
    kind: String,
    view: TableView,
    before: Option<Reselected>,
    after: Option<Reselected>,
}

pub(crate) fn funnel(
    sources: &[String],
    stages: &[StageData],
    after: bool,
) -> (Vec<FunnelRow>, Vec<Vec<Option<bool>>>) {
    let mut current: Vec<&String> = sources.iter().collect();
    let mut rows = vec![];
    // Per stage, per source video: kept (Some(true/false)) or not reached / not done (None).
    let mut kept: Vec<Vec<Option<bool>>> = vec![];
    let index: HashMap<&String, usize> = sources.iter().enumerate().map(|(i, s)| (s, i)).collect();
    for st in stages {
        let rule = if after { &st.after } else { &st.before };
        let mut r = FunnelRow {
            stage: st.id.clone(),
            kind: st.kind.clone(),
            input: current.len(),
            ..Default::default()
        };
        let mut col = vec![None; sources.len()];
        let mut next = vec![];
        for id in current {
            if st.view.rejected.contains(id.as_str()) {
                r.rejected += 1;
                col[index[id]] = Some(false);
            } else if st.view.done.contains(id.as_str()) {
                r.done += 1;
                let k = rule.as_ref().is_none_or(|rule| (rule.keep)(id));
                col[index[id]] = Some(k);
                if k {
                    next.push(id);
                }
            } else {
                r.pending += 1;
            }
        }
        r.out = next.len();
        rows.push(r);
        kept.push(col);
        current = next;
    }
    (rows, kept)
}

pub async fn rethreshold(run_dir: &Path, overrides: &[Override]) -> Result<Rethreshold, RunError> {
    let (store, m) = open_run(run_dir).await?;
    let selects = stored_selects(&m.pipeline_toml)?;
    check_overrides(&m.stages, overrides)?;
    let RunStages {
        sources,
        stages,
        settings,
    } = read_stages(&store, &m.stages, &selects, overrides).await?;
    let (before, kept_before) = funnel(&sources, &stages, false);
    let (after, kept_after) = funnel(&sources, &stages, true);

    write_selection(&store, "pipeline", &sources, &stages, &kept_before, &before).await?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
    let name = format!("rethreshold-{stamp}");
    write_selection(&store, &name, &sources, &stages, &kept_after, &after).await?;
    let settings_path = format!("{SELECTIONS}/{name}.settings.json");
    store
        .put(
            &settings_path,
            serde_json::to_vec_pretty(&settings).unwrap_or_default(),
        )
        .await
        .map_err(|e| RunError::io(settings_path.clone(), e))?;
    let selection_file = run_dir.join(SELECTIONS).join(format!("{name}.parquet"));
    Ok(Rethreshold {
        before,
        after,
        selection_file,
        settings,
    })
}

/// The run's store, the videos its pipeline selected under its own thresholds (sorted ids) and
/// the funnel that selected them:
/// what `split` and a release start from. Writes nothing.
pub async fn pipeline_selection(
    run_dir: &Path,
) -> Result<(Arc<dyn Store>, Vec<String>, Vec<FunnelRow>), RunError> {
    let (store, m) = open_run(run_dir).await?;
    let selects = stored_selects(&m.pipeline_toml)?;
    let RunStages {
        sources, stages, ..
    } = read_stages(&store, &m.stages, &selects, &[]).await?;
    let (rows, kept) = funnel(&sources, &stages, false);
    let selected = sources
        .iter()
        .enumerate()
        .filter(|(i, _)| kept.last().is_none_or(|k| k[*i] == Some(true)))
        .map(|(_, id)| id.clone())
        .collect();
    Ok((store, selected, rows))
}

/// The run directory, read-only, and its manifest.
pub(crate) async fn open_run(
    run_dir: &Path,
) -> Result<(Arc<dyn Store>, manifest::Manifest), RunError> {
    let location = run_dir.to_string_lossy();
    let store = crate::store::open_run(&location, crate::store::Access::Read)
        .map_err(|e| RunError::io(location.to_string(), e))?;
    let m = manifest::load(store.as_ref()).await.ok_or_else(|| {
        RunError::Config(format!(
            "{}: no manifest.json (not a run directory?)",
            run_dir.display()
        ))
    })?;
    Ok((store, m))
}

/// Each stage's `select` table as the pipeline file had it when the run was made, by stage id.
pub(crate) fn stored_selects(
    pipeline_toml: &str,
) -> Result<HashMap<String, toml::Table>, RunError> {
    let pipeline: toml::Table = toml::from_str(pipeline_toml)
        .map_err(|e| RunError::Config(format!("manifest.json: pipeline text: {e}")))?;
    Ok(pipeline
        .get("stages")
        .and_then(|s| s.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|t| {
                    let id = t.get("id")?.as_str()?.to_string();
                    let sel = t
                        .get("select")
                        .and_then(|s| s.as_table())
                        .cloned()
                        .unwrap_or_default();
                    Some((id, sel))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Every `--set` names a stage of the run that has thresholds.
fn check_overrides(
    stages: &[manifest::ManifestStage],
    overrides: &[Override],
) -> Result<(), RunError> {
    for o in overrides {
        let Some(st) = stages.iter().find(|s| s.id == o.stage) else {
            return Err(RunError::Config(format!(
                "--set {}.{}: no stage {:?} in this run (stages: {})",
                o.stage,
                o.key,
                o.stage,
                stages
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if !scoring(&st.kind) {
            return Err(RunError::Config(format!(
                "--set {}.{}: stage {} ({}) has no thresholds",
                o.stage, o.key, o.stage, st.kind
            )));
        }
    }
    Ok(())
}

/// What the funnels are computed from.
pub(crate) struct RunStages {
    /// The source's video ids, sorted.
    pub(crate) sources: Vec<String>,
    /// The stages after the source, in chain order.
    pub(crate) stages: Vec<StageData>,
    /// The new `select` settings of each scoring stage, defaults filled in.
    settings: BTreeMap<String, serde_json::Value>,
}

/// Reads every stage's table (current fingerprint only) and decides each scoring stage's videos
/// under its stored `select` and under the one with the `--set` values.
pub(crate) async fn read_stages(
    store: &Arc<dyn Store>,
    stages: &[manifest::ManifestStage],
    selects: &HashMap<String, toml::Table>,
    overrides: &[Override],
) -> Result<RunStages, RunError> {
    let mut run = RunStages {
        sources: vec![],
        stages: vec![],
        settings: BTreeMap::new(),
    };
    for st in stages {
        let view = read_table(store, &st.id, &st.fingerprint, scoring(&st.kind)).await?;
        if st.id == crate::runtime::chain::SOURCE_STAGE_ID {
            let mut ids: Vec<String> = view.done.iter().cloned().collect();
            ids.sort();
            run.sources = ids;
            continue;
        }
        let stored = selects.get(&st.id).cloned().unwrap_or_default();
        let mut changed = stored.clone();
        for o in overrides.iter().filter(|o| o.stage == st.id) {
            changed.insert(o.key.clone(), o.value.clone());
        }
        let before = reselect(&st.kind, &st.id, &stored, &view)?;
        let after = reselect(&st.kind, &st.id, &changed, &view)?;
        if let Some(r) = &after {
            run.settings.insert(st.id.clone(), r.settings.clone());
        }
        run.stages.push(StageData {
            id: st.id.clone(),
            kind: st.kind.clone(),
            view,
            before,
            after,
        });
    }
    Ok(run)
}

const SELECTIONS: &str = "selections";

/// `selections/<name>.parquet` (video_id, one `<stage>_kept` column per stage, `selected`) and
/// `<name>.json` (the funnel), written through the store like every table (atomic, synced).
async fn write_selection(
    store: &Arc<dyn Store>,
    name: &str,
    sources: &[String],
    stages: &[StageData],
    kept: &[Vec<Option<bool>>],
    funnel: &[FunnelRow],
) -> Result<(), RunError> {
    let mut fields = vec![Field::new("video_id", DataType::Utf8, false)];
    let mut cols: Vec<ArrayRef> = vec![Arc::new(StringArray::from(sources.to_vec()))];
    for (st, k) in stages.iter().zip(kept) {
        fields.push(Field::new(
            format!("{}_kept", st.id),
            DataType::Boolean,
            true,
        ));
        cols.push(Arc::new(BooleanArray::from(k.clone())));
    }
    let selected: Vec<bool> = (0..sources.len())
        .map(|i| kept.last().is_some_and(|k| k[i] == Some(true)) || kept.is_empty())
        .collect();
    fields.push(Field::new("selected", DataType::Boolean, false));
    cols.push(Arc::new(BooleanArray::from(selected)));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    let path = format!("{SELECTIONS}/{name}.parquet");
    store
        .put(&path, crate::store::shards::encode_table(&batch)?)
        .await
        .map_err(|e| RunError::io(path.clone(), e))?;
    let meta = serde_json::json!({ "funnel": funnel, "created_at": manifest::now() });
    let path = format!("{SELECTIONS}/{name}.json");
    store
        .put(&path, serde_json::to_vec_pretty(&meta).unwrap_or_default())
        .await
        .map_err(|e| RunError::io(path.clone(), e))?;
    Ok(())
}

/// The funnel as text: one line per stage.
pub fn render(rows: &[FunnelRow]) -> String {
    let mut s = format!(
        "{:<16} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
        "stage", "type", "in", "done", "rejected", "pending", "out"
    );
    for r in rows {
        s += &format!(
            "{:<16} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
            r.stage, r.kind, r.input, r.done, r.rejected, r.pending, r.out
        );
    }
    s
}

/// Ids kept at the end of a funnel (for tests and reports).
pub fn selected_ids(path: &Path) -> Result<HashSet<String>, String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let mut out = HashSet::new();
    for b in reader {
        let b = b.map_err(|e| e.to_string())?;
        let ids = b
            .column_by_name("video_id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            .ok_or("no video_id")?;
        let sel = b
            .column_by_name("selected")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>().cloned())
            .ok_or("no selected")?;
        for i in 0..b.num_rows() {
            if sel.value(i) {
                out.insert(ids.value(i).to_string());
            }
        }
    }
    Ok(out)
}

/// Re-apply the scoring stages' thresholds to stored scores, with no model call.
///
/// Prints the funnel (videos in / done / rejected / pending / out per stage) under the
/// pipeline's own `select` settings and under the new ones, and writes both selections to
/// RUN_DIR/selections/ (video_id, kept per stage, selected). `pending` videos passed a lowered
/// threshold upstream but were never scored downstream: rerun the pipeline with the new
/// thresholds to score them.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory (with manifest.json).
    pub run_dir: std::path::PathBuf,
    /// STAGE.KEY=VALUE, e.g. relevance.min_score=8, quality.min_twos=9,
    /// committee.rule=entropy, committee.min_entropy=0.9 (repeatable).
    #[arg(long = "set", value_name = "STAGE.KEY=VALUE")]
    pub set: Vec<Override>,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let r = super::tokio_runtime()?.block_on(rethreshold(&a.run_dir, &a.set))?;
    println!("funnel with the pipeline's thresholds:");
    print!("{}", render(&r.before));
    println!("funnel with the new thresholds:");
    print!("{}", render(&r.after));
    println!("selection: {}", r.selection_file.display());
    if r.after.iter().any(|f| f.pending > 0) {
        println!(
            "pending videos were never scored by that stage: run the pipeline with the new select settings to score them"
        );
    }
    Ok(crate::error::Exit::Done)
}
