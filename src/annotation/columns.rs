//! One stage table's columns by video, as the review tasks show them (captions, fps and
//! duration, the committee's tally): the first row of each video.

use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::{read_table, text_column};
use arrow::array::{Array, StringArray};
use std::collections::HashMap;
use std::sync::Arc;

/// Every value of one column of a stage's table, by video (the first row of each).
pub(super) async fn column_by_video(
    store: &Arc<dyn Store>,
    m: &Manifest,
    kind: &str,
    columns: &[&str],
) -> Result<HashMap<String, Vec<Option<String>>>, RunError> {
    let mut out = HashMap::new();
    let Some(st) = m
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == kind || (kind == SOURCE_STAGE_ID && s.id == SOURCE_STAGE_ID))
    else {
        return Ok(out);
    };
    let view = read_table(store, &st.id, &st.fingerprint, true).await?;
    for b in &view.batches {
        let Some(ids) = text_column(b, "video_id") else {
            continue;
        };
        let cols: Vec<Option<StringArray>> = columns.iter().map(|c| text_column(b, c)).collect();
        for i in 0..b.num_rows() {
            out.entry(ids.value(i).to_string()).or_insert_with(|| {
                cols.iter()
                    .map(|c| {
                        c.as_ref()
                            .filter(|c| !c.is_null(i))
                            .map(|c| c.value(i).to_string())
                    })
                    .collect()
            });
        }
    }
    Ok(out)
}

/// Each video's fps and duration from the run's probe table.
pub(super) struct Probe(HashMap<String, Vec<Option<String>>>);

impl Probe {
    pub(super) async fn read(store: &Arc<dyn Store>, m: &Manifest) -> Result<Self, RunError> {
        let kind = crate::stages::probe::KIND.name;
        Ok(Probe(
            column_by_video(store, m, kind, &["fps", "duration_secs"]).await?,
        ))
    }

    /// Video `v`'s fps (where the probe has none, `fps`, else 24) and duration.
    pub(super) fn of(&self, v: &str, fps: Option<f64>) -> (f64, Option<f64>) {
        let num = |i: usize| self.0.get(v)?.get(i)?.as_deref()?.parse().ok();
        (num(0).or(fps).unwrap_or(24.0), num(1))
    }
}
