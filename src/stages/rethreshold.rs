//! What `vidcurate rethreshold` does: re-applies the scoring stages' `select` thresholds to the stored
//! scores, with new values, and prints the funnel before and after — no model is called, no stage
//! runs. The selection is written to `selections/` beside the one of the pipeline's own settings.
//! The funnel itself is `stages::selection`'s: the tables stream through a shard at a time, only
//! the columns the thresholds read are decoded, and each video is a few bits, so a run of 10
//! million videos is decided in seconds (docs/src/benchmarks/model-calls.md). An `items` stage never drops a
//! video: `--set` on one decides its drafted items again from their stored rounds
//! (`stages::items::table`), printed as the item table and stored as
//! `selections/<name>.items.parquet`.

use super::selection::{Funnel, decide, scoring};
pub use super::selection::{FunnelRow, Override};
use crate::error::RunError;
use crate::store::Store;
use crate::store::manifest;
use crate::store::run::RunView;
use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug)]
pub struct Rethreshold {
    pub before: Vec<FunnelRow>,
    pub after: Vec<FunnelRow>,
    pub selection_file: std::path::PathBuf,
    /// The item table under the new thresholds, when `--set` named an items stage.
    pub items: Vec<crate::stages::items::table::TaskLine>,
}

/// The kind of the stages whose items, not videos, `--set` decides again.
const ITEMS: &str = crate::stages::items::KIND.name;

pub async fn rethreshold(run_dir: &Path, overrides: &[Override]) -> Result<Rethreshold, RunError> {
    let run = RunView::open(run_dir).await?;
    check_overrides(&run.manifest.stages, overrides)?;
    // The stages decided per video as bits (`stages::selection::decide`): the tables stream
    // through a shard at a time, and only the columns the thresholds read are decoded.
    let data = decide(&run, overrides).await?;
    let before = data.funnel_all(false);
    let after = data.funnel_all(true);
    let store = &run.store;
    let stage_ids: Vec<String> = data.stages.iter().map(|s| s.id.clone()).collect();
    let mut settings = data.settings.clone();
    let item_sets: Vec<Override> = overrides
        .iter()
        .filter(|o| {
            run.manifest
                .stages
                .iter()
                .any(|s| s.id == o.stage && s.kind == ITEMS)
        })
        .cloned()
        .collect();
    let (items, decisions) = if item_sets.is_empty() {
        (vec![], vec![])
    } else {
        crate::stages::items::table::table(&run, &item_sets).await?
    };
    for o in &item_sets {
        let v = serde_json::to_value(&o.value).unwrap_or_default();
        if let serde_json::Value::Object(m) = settings
            .entry(o.stage.clone())
            .or_insert_with(|| serde_json::json!({}))
        {
            m.insert(o.key.clone(), v);
        }
    }

    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
    let name = format!("rethreshold-{stamp}");
    // Both selections are encoded at once, on two cores, then written in the order they always
    // were.
    let ids = data.ids.column();
    let (pipeline_table, new_table) = tokio::join!(
        encode_selection(ids, &stage_ids, &before),
        encode_selection(ids, &stage_ids, &after)
    );
    write_selection(store, "pipeline", pipeline_table?, &before.rows).await?;
    write_selection(store, &name, new_table?, &after.rows).await?;
    if !item_sets.is_empty() {
        write_items(store, &name, &decisions).await?;
    }
    let settings_path = format!("{SELECTIONS}/{name}.settings.json");
    let settings = serde_json::to_vec_pretty(&settings).unwrap_or_default();
    put(store, &settings_path, settings).await?;
    let selection_file = run_dir.join(SELECTIONS).join(format!("{name}.parquet"));
    Ok(Rethreshold {
        before: before.rows,
        after: after.rows,
        selection_file,
        items,
    })
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
        if !scoring(&st.kind) && st.kind != ITEMS {
            return Err(RunError::Config(format!(
                "--set {}.{}: stage {} ({}) has no thresholds",
                o.stage, o.key, o.stage, st.kind
            )));
        }
    }
    Ok(())
}

use crate::store::commits::{self, CommitRecord, ObjectSum};

const SELECTIONS: &str = "selections";

/// `selections/<name>.parquet`'s bytes: video_id, one `<stage>_kept` column per stage (null:
/// not reached or not done), `selected`. Encoded on the blocking pool.
async fn encode_selection(
    ids: &StringArray,
    stages: &[String],
    funnel: &Funnel,
) -> Result<Vec<u8>, RunError> {
    let mut fields = vec![Field::new("video_id", DataType::Utf8, false)];
    let mut cols: Vec<ArrayRef> = vec![Arc::new(ids.clone())];
    for (st, k) in stages.iter().zip(&funnel.kept) {
        fields.push(Field::new(format!("{st}_kept"), DataType::Boolean, true));
        cols.push(Arc::new(k.clone()));
    }
    fields.push(Field::new("selected", DataType::Boolean, false));
    cols.push(Arc::new(BooleanArray::new(funnel.selected.clone(), None)));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    tokio::task::spawn_blocking(move || crate::store::shards::encode_table(&batch))
        .await
        .map_err(|e| RunError::Internal(format!("encoding a selection: {e}")))?
}

/// `selections/<name>.parquet` (`table`, from `encode_selection`) and `<name>.json` (the
/// funnel), written through the store like every table (atomic, synced).
async fn write_selection(
    store: &Arc<dyn Store>,
    name: &str,
    table: Vec<u8>,
    funnel: &[FunnelRow],
) -> Result<(), RunError> {
    let table_sum = put(store, &format!("{SELECTIONS}/{name}.parquet"), table).await?;
    let meta = serde_json::json!({ "funnel": funnel, "created_at": manifest::now() });
    let meta = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    let meta_sum = put(store, &format!("{SELECTIONS}/{name}.json"), meta).await?;
    // `verify` checks a selection like a shard.
    commit(store, table_sum, vec![meta_sum]).await
}

/// Writes `data` to `path` through the store; its sum, for the commit record.
async fn put(store: &Arc<dyn Store>, path: &str, data: Vec<u8>) -> Result<ObjectSum, RunError> {
    let sum = ObjectSum::of(path, &data, None);
    store
        .put(path, data)
        .await
        .map_err(|e| RunError::io(path.to_string(), e))?;
    Ok(sum)
}

/// The commit record of `object` (with `objects` beside it), so `verify` checks it.
async fn commit(
    store: &Arc<dyn Store>,
    object: ObjectSum,
    objects: Vec<ObjectSum>,
) -> Result<(), RunError> {
    let path = commits::record_path(&object.path);
    let record = CommitRecord {
        object,
        stage: None,
        videos: vec![],
        objects,
        committed_at: manifest::now(),
    };
    commits::write_record(store.as_ref(), &record)
        .await
        .map_err(|e| RunError::io(path, e))
}

/// `selections/<name>.items.parquet`: each item of the items stages `--set` named, kept or not
/// and why, under the new thresholds; committed like a shard, so `verify` checks it.
async fn write_items(
    store: &Arc<dyn Store>,
    name: &str,
    decisions: &[crate::stages::items::table::ItemDecision],
) -> Result<(), RunError> {
    let fields = crate::store::shards::fields_of::<crate::stages::items::table::ItemDecision>()?;
    let batch = serde_arrow::to_record_batch(&fields, &decisions)
        .map_err(|e| RunError::Internal(format!("item decisions: {e}")))?;
    let path = format!("{SELECTIONS}/{name}.items.parquet");
    let table = crate::store::shards::encode_table(&batch)?;
    let sum = put(store, &path, table).await?;
    commit(store, sum, vec![]).await
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
pub fn selected_ids(path: &Path) -> Result<HashSet<String>, RunError> {
    let bad = |e: &dyn std::fmt::Display| RunError::Internal(format!("{}: {e}", path.display()));
    let f = std::fs::File::open(path).map_err(crate::error::io(path))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.build())
        .map_err(|e| bad(&e))?;
    let mut out = HashSet::new();
    for b in reader {
        let b = b.map_err(|e| bad(&e))?;
        let ids = b
            .column_by_name("video_id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
            .ok_or_else(|| bad(&"no video_id"))?;
        let sel = b
            .column_by_name("selected")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>().cloned())
            .ok_or_else(|| bad(&"no selected"))?;
        for i in 0..b.num_rows() {
            if sel.value(i) {
                out.insert(ids.value(i).to_string());
            }
        }
    }
    Ok(out)
}
