//! The values a split reads per video: the `--stratify` and `--group` columns of the source
//! table, or of the one-row-per-video stage that has them.

use super::SplitOptions;
use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::store::shards::text_column;
use arrow::array::{Array, RecordBatch, StringArray};
use std::collections::HashMap;
use std::sync::Arc;

/// Per-video values of stage columns: column name as asked → video → value.
pub(super) type StageValues = HashMap<String, HashMap<String, String>>;

/// The `--stratify` names that are not source columns, read from the stage that has them:
/// `STAGE.COLUMN` names its stage, a bare name is looked for in every one-row-per-video stage
/// table (a `language` stage's `language`, a `shots` stage's `shots_in_video`) and must be
/// found in exactly one.
pub(super) async fn stage_values(
    store: &Arc<dyn crate::store::Store>,
    m: &crate::store::manifest::Manifest,
    source_columns: &[String],
    names: &[String],
) -> Result<StageValues, RunError> {
    use crate::stages::{Release, stage_kind};
    let in_source = |c: &str| source_columns.iter().any(|x| x == c);
    let mut out = StageValues::new();
    for name in names.iter().filter(|c| !in_source(c)) {
        let (wanted_stage, column) = match name.split_once('.') {
            Some((s, c)) => (Some(s), c),
            None => (None, name.as_str()),
        };
        let mut found: Vec<(String, HashMap<String, String>)> = vec![];
        for st in &m.stages {
            let per_video = match stage_kind(&st.kind).map(|k| k.release) {
                Some(Release::PerVideo) => true,
                Some(Release::Columns(c)) => c.contains(&column),
                _ => false,
            };
            if wanted_stage.is_some_and(|w| w != st.id) || (wanted_stage.is_none() && !per_video) {
                continue;
            }
            let values = crate::release::first_values(store, st, column).await?;
            if values.is_some() || wanted_stage.is_some() {
                found.push((st.id.clone(), values.unwrap_or_default()));
            }
        }
        match found.len() {
            1 => {
                out.insert(name.clone(), found.pop().expect("one").1);
            }
            0 => {
                return Err(RunError::Config(match wanted_stage {
                    Some(s) => format!("--stratify {name}: the run has no stage `{s}`"),
                    None => format!(
                        "no column `{name}` in the source table (columns: {}) or in a one-row-per-video stage table (a `language` stage gives `language`)",
                        source_columns.join(", ")
                    ),
                }));
            }
            _ => {
                let ids: Vec<String> = found.iter().map(|(s, _)| format!("{s}.{name}")).collect();
                return Err(RunError::Config(format!(
                    "--stratify {name}: several stages have this column; name one: {}",
                    ids.join(", ")
                )));
            }
        }
    }
    Ok(out)
}

/// Every column of the source table (its batches hold only those a split reads), for the
/// errors that list them.
pub(super) async fn source_columns(
    store: &Arc<dyn crate::store::Store>,
    fingerprint: &str,
) -> Result<Vec<String>, RunError> {
    let schema = crate::store::filter::table_schema(store, SOURCE_STAGE_ID, fingerprint).await?;
    Ok(schema
        .map(|s| s.fields().iter().map(|f| f.name().clone()).collect())
        .unwrap_or_default())
}

/// The stratum and group values of every source video, by id.
pub(super) fn source_values(
    batches: &[RecordBatch],
    columns: &[String],
    opts: &SplitOptions,
    staged: &StageValues,
) -> Result<HashMap<String, (String, Option<String>)>, RunError> {
    let mut out = HashMap::new();
    let wanted: Vec<&String> = opts.stratify.iter().chain(opts.group.iter()).collect();
    let mut filled = vec![false; wanted.len()];
    for b in batches {
        let ids = text_column(b, "video_id")
            .ok_or_else(|| RunError::Internal("source shard without video_id".into()))?;
        let mut cols = vec![];
        for c in opts.stratify.iter().chain(opts.group.iter()) {
            if let Some(v) = staged.get(c) {
                let col: StringArray = (0..b.num_rows())
                    .map(|i| v.get(ids.value(i)).cloned())
                    .collect();
                cols.push(col);
                continue;
            }
            let col = text_column(b, c).ok_or_else(|| {
                RunError::Config(format!(
                    "no column `{c}` in the source table (columns: {})",
                    columns.join(", ")
                ))
            })?;
            cols.push(col);
        }
        for (f, col) in filled.iter_mut().zip(&cols) {
            *f = *f || col.iter().flatten().any(|v| !v.trim().is_empty());
        }
        let (strat, group) = cols.split_at(opts.stratify.len());
        for i in 0..b.num_rows() {
            let value = |a: &StringArray| (!a.is_null(i)).then(|| a.value(i).to_string());
            let stratum = strat
                .iter()
                .map(|a| value(a).unwrap_or_else(|| "(none)".into()))
                .collect::<Vec<_>>()
                .join("/");
            let g = group
                .first()
                .and_then(value)
                .filter(|v| !v.trim().is_empty());
            out.insert(ids.value(i).to_string(), (stratum, g));
        }
    }
    // A column with no value anywhere would stratify nothing, or make every video a group of
    // its own: no leakage protection, and nothing said.
    if let Some((c, _)) = wanted.iter().zip(&filled).find(|(_, f)| !**f) {
        let what = if opts.group.as_ref() == Some(*c) {
            "--group"
        } else {
            "--stratify"
        };
        return Err(RunError::Config(format!(
            "{what} {c}: the column is empty for every video of the run, so nothing would be {}: use a column with values ({})",
            if what == "--group" {
                "grouped"
            } else {
                "stratified"
            },
            columns.join(", ")
        )));
    }
    Ok(out)
}
