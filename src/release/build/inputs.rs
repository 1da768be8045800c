//! What a release is made of, read from the run: the source table and each stage's table as
//! the registry's `release` entry says (one-row-per-video columns, frames, OCR lines,
//! transcripts, annotations), all under the run's current fingerprints, and the split's videos.
//! Reads the run's store; writes nothing.

use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::stages::{Release, stage_kind};
use crate::store::Store;
use crate::store::manifest::{Manifest, ManifestStage};
use crate::store::shards::{TableView, read_table, read_table_columns, text_column};
use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Schema};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A stage table made ready for joining: its batches in one, and each video's first row.
pub(super) struct Joined {
    pub(super) stage: String,
    pub(super) batch: RecordBatch,
    pub(super) row_of: HashMap<String, u32>,
    /// (column in `batch`, name in the release).
    pub(super) columns: Vec<(usize, String)>,
}

impl Joined {
    fn new(
        stage: &str,
        batch: RecordBatch,
        columns: Vec<(usize, String)>,
    ) -> Result<Self, RunError> {
        Ok(Self {
            stage: stage.to_string(),
            row_of: first_rows(&batch)?,
            batch,
            columns,
        })
    }
}

/// Columns of a stage table that are not the stage's own.
pub(super) const NOT_OWN: &[&str] = &["video_id", "stage_fingerprint"];

/// Source columns a release leaves out: a local path means nothing on another machine.
pub(super) const SOURCE_LEFT_OUT: &[&str] = &["path", "size_bytes"];

pub(super) fn concat(
    stage: &str,
    batches: &[RecordBatch],
) -> Result<Option<RecordBatch>, RunError> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    arrow::compute::concat_batches(&first.schema(), batches)
        .map(Some)
        .map_err(|e| RunError::Internal(format!("{stage}: shards of one fingerprint differ: {e}")))
}

pub(super) fn first_rows(batch: &RecordBatch) -> Result<HashMap<String, u32>, RunError> {
    let ids = text(batch, "video_id")?;
    let mut out = HashMap::new();
    for i in 0..batch.num_rows() {
        out.entry(ids.value(i).to_string()).or_insert(i as u32);
    }
    Ok(out)
}

pub(super) fn text(batch: &RecordBatch, name: &str) -> Result<StringArray, RunError> {
    text_column(batch, name).ok_or_else(|| RunError::Internal(format!("no text column {name}")))
}

/// The run's tables as release columns, and the frames and OCR lines per video.
pub(super) struct Inputs {
    pub(super) source: Joined,
    pub(super) stages: Vec<Joined>,
    pub(super) frames: HashMap<String, Vec<(u32, String)>>,
    /// video → its `ocr_text`: distinct lines in frame order.
    pub(super) ocr: HashMap<String, String>,
    pub(super) frames_stage: Option<String>,
    pub(super) ocr_stage: Option<String>,
    /// video → its transcript, from the `transcript` stage.
    pub(super) transcripts: HashMap<String, Transcribed>,
    pub(super) transcript_stage: Option<String>,
}

/// A video's transcript as a release carries it.
pub(super) struct Transcribed {
    pub(super) text: String,
    pub(super) source: String,
    pub(super) language: Option<String>,
    pub(super) reason: Option<String>,
}

impl Transcribed {
    fn of(rows: &[crate::stages::transcript::TranscriptSegment]) -> Self {
        let first = rows.first();
        Self {
            text: crate::stages::transcript::joined(rows),
            source: first.map(|r| r.source.clone()).unwrap_or_default(),
            language: rows.iter().find_map(|r| r.language.clone()),
            reason: first.and_then(|r| r.reason.clone()),
        }
    }
}

/// Everything a release is made of, from the run's tables.
pub(super) async fn read_inputs(store: &Arc<dyn Store>, m: &Manifest) -> Result<Inputs, RunError> {
    let mut stages = vec![];
    let mut source = None;
    let (mut frames, mut ocr) = (HashMap::new(), HashMap::new());
    let (mut frames_stage, mut ocr_stage) = (None, None);
    let (mut transcripts, mut transcript_stage) = (HashMap::new(), None);
    let mut extras: Vec<String> = vec![];
    for st in &m.stages {
        let role = if st.id == SOURCE_STAGE_ID {
            None
        } else {
            match stage_kind(&st.kind) {
                Some(k) => Some(k.release),
                None => continue,
            }
        };
        if role == Some(Release::Skip) {
            continue;
        }
        let view = read_for_release(store, st, role).await?;
        // The frames and OCR tables are read a batch at a time: concatenated, a copy of them
        // was as large again (the OCR table is the run's largest).
        match role {
            Some(Release::Frames) if !view.batches.is_empty() => {
                frames = per_video(&view.batches, "frame_index", "path")?;
                frames_stage = Some(st.id.clone());
                continue;
            }
            Some(Release::Text) if !view.batches.is_empty() => {
                ocr = ocr_texts(&view.batches)?;
                ocr_stage = Some(st.id.clone());
                continue;
            }
            _ => {}
        }
        let Some(batch) = concat(&st.id, &view.batches)? else {
            continue;
        };
        match role {
            None => {
                let (joined, names) = source_joined(&st.id, batch)?;
                source = Some(joined);
                extras = names;
            }
            Some(Release::PerVideo) | Some(Release::Columns(_)) => {
                stages.push(stage_joined(&st.id, batch, role, &extras)?);
            }
            Some(Release::Skip) | Some(Release::Frames) | Some(Release::Text) => {}
            Some(Release::Transcript) => {
                transcripts = transcripts_of(&view)?;
                transcript_stage = Some(st.id.clone());
            }
        }
    }
    let source = source
        .ok_or_else(|| RunError::Config("the run has no source table (was it ever run?)".into()))?;
    if let Some(a) = annotation_columns(store).await? {
        stages.push(a);
    }
    Ok(Inputs {
        source,
        stages,
        frames,
        ocr,
        frames_stage,
        ocr_stage,
        transcripts,
        transcript_stage,
    })
}

/// A stage's table as far as a release reads it.
async fn read_for_release(
    store: &Arc<dyn Store>,
    st: &ManifestStage,
    role: Option<Release>,
) -> Result<TableView, RunError> {
    // The frames and OCR tables give a release two columns each: the rest (the OCR
    // table's histograms, boxes and colours) is not decoded.
    let value = match role {
        Some(Release::Frames) => "path",
        Some(Release::Text) => "text",
        _ => return read_table(store, &st.id, &st.fingerprint, true).await,
    };
    let cols = ["video_id", "frame_index", value];
    read_table_columns(store, &st.id, &st.fingerprint, &cols).await
}

/// Each video's transcript, its segments in time order.
fn transcripts_of(view: &TableView) -> Result<HashMap<String, Transcribed>, RunError> {
    let rows: HashMap<String, Vec<crate::stages::transcript::TranscriptSegment>> = view.rows()?;
    Ok(rows
        .into_iter()
        .map(|(id, mut r)| {
            r.sort_by_key(|s| s.segment_index);
            (id, Transcribed::of(&r))
        })
        .collect())
}

/// Whether column `i` is the table's own (not its key or fingerprint).
fn own(schema: &Schema, i: usize) -> bool {
    !NOT_OWN.contains(&schema.field(i).name().as_str())
}

/// The source table's columns for the release, and the names of its extra (manifest) columns.
fn source_joined(stage: &str, batch: RecordBatch) -> Result<(Joined, Vec<String>), RunError> {
    let schema = batch.schema();
    let info: Vec<String> = crate::store::shards::fields_of::<crate::record::SourceInfo>()?
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let extras = (0..schema.fields().len())
        .filter(|i| own(&schema, *i) && !info.contains(schema.field(*i).name()))
        .map(|i| schema.field(i).name().clone())
        .collect();
    let columns = (0..schema.fields().len())
        .filter(|i| own(&schema, *i))
        .filter(|i| !SOURCE_LEFT_OUT.contains(&schema.field(*i).name().as_str()))
        .map(|i| (i, schema.field(i).name().clone()))
        .collect();
    Ok((Joined::new(stage, batch, columns)?, extras))
}

/// A one-row-per-video stage's columns (all, or those `Release::Columns` names), as
/// `<stage>_<column>`. The source's extra columns ride along in every table; the source has them.
fn stage_joined(
    stage: &str,
    batch: RecordBatch,
    role: Option<Release>,
    extras: &[String],
) -> Result<Joined, RunError> {
    let schema = batch.schema();
    let named = |n: &str| match role {
        Some(Release::Columns(c)) => c.contains(&n),
        _ => true,
    };
    let columns = (0..schema.fields().len())
        .filter(|i| own(&schema, *i))
        .filter(|i| !extras.contains(schema.field(*i).name()))
        .filter(|i| named(schema.field(*i).name()))
        .map(|i| (i, format!("{stage}_{}", schema.field(i).name())))
        .collect();
    Joined::new(stage, batch, columns)
}

/// The adjudicated human annotations (`vidcurate annotate import`) as `annotation_<field>`.
pub(super) async fn annotation_columns(store: &Arc<dyn Store>) -> Result<Option<Joined>, RunError> {
    let decided: Vec<crate::benchmark::review::Annotation> =
        crate::benchmark::review::read_annotations(store)
            .await?
            .into_iter()
            .filter(|a| a.annotator == "adjudicated")
            .collect();
    if decided.is_empty() {
        return Ok(None);
    }
    let fields = crate::store::shards::fields_of::<crate::benchmark::review::Annotation>()?;
    let batch = serde_arrow::to_record_batch(&fields, &decided)
        .map_err(|e| RunError::Internal(format!("annotations: {e}")))?;
    const BOOKKEEPING: &[&str] = &[
        "video_id",
        "annotator",
        "task_id",
        "annotation_id",
        "updated_at",
    ];
    let columns = (0..fields.len())
        .filter(|i| !BOOKKEEPING.contains(&fields[*i].name().as_str()))
        .map(|i| (i, format!("annotation_{}", fields[i].name())))
        .collect();
    Joined::new("annotations", batch, columns).map(Some)
}

/// A batch's frame index column as 32-bit numbers.
fn frame_indices(batch: &RecordBatch, index_col: &str) -> Result<UInt32Array, RunError> {
    let idx = arrow::compute::cast(
        batch
            .column_by_name(index_col)
            .ok_or_else(|| RunError::Internal(format!("no column {index_col}")))?,
        &DataType::UInt32,
    )
    .map_err(|e| RunError::Internal(e.to_string()))?;
    idx.as_any()
        .downcast_ref::<UInt32Array>()
        .cloned()
        .ok_or_else(|| RunError::Internal(format!("{index_col}: not a number")))
}

/// video → its OCR lines as the release's `ocr_text`: each distinct text once, in frame order
/// (rows of one frame keep their stored order), one a line. Built from row positions into the
/// text column, not a string per region: a run of ten million regions held gigabytes of them.
fn ocr_texts(batches: &[RecordBatch]) -> Result<HashMap<String, String>, RunError> {
    let ids: Vec<StringArray> = batches
        .iter()
        .map(|b| text(b, "video_id"))
        .collect::<Result<_, _>>()?;
    let values: Vec<StringArray> = batches
        .iter()
        .map(|b| text(b, "text"))
        .collect::<Result<_, _>>()?;
    // video → (frame, batch, row) of each of its regions, in stored order.
    let mut rows: HashMap<&str, Vec<(u32, u32, u32)>> = HashMap::new();
    for (k, b) in batches.iter().enumerate() {
        let idx = frame_indices(b, "frame_index")?;
        for i in 0..b.num_rows() {
            rows.entry(ids[k].value(i))
                .or_default()
                .push((idx.value(i), k as u32, i as u32));
        }
    }
    Ok(rows
        .into_iter()
        .map(|(id, mut v)| {
            v.sort_by_key(|(f, _, _)| *f);
            let mut seen = std::collections::HashSet::new();
            let lines: Vec<&str> = v
                .iter()
                .map(|(_, k, i)| values[*k as usize].value(*i as usize))
                .filter(|t| seen.insert(*t))
                .collect();
            (id.to_string(), lines.join("\n"))
        })
        .collect())
}

/// video → (frame index, value) in frame order (rows of one frame keep their stored order).
pub(super) fn per_video(
    batches: &[RecordBatch],
    index_col: &str,
    value_col: &str,
) -> Result<HashMap<String, Vec<(u32, String)>>, RunError> {
    let mut out: HashMap<String, Vec<(u32, String)>> = HashMap::new();
    for batch in batches {
        let ids = text(batch, "video_id")?;
        let values = text(batch, value_col)?;
        let idx = frame_indices(batch, index_col)?;
        for i in 0..batch.num_rows() {
            out.entry(ids.value(i).to_string())
                .or_default()
                .push((idx.value(i), values.value(i).to_string()));
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|(f, _)| *f);
    }
    Ok(out)
}

/// The split's videos (split name → sorted ids) and the split names in their order.
pub(super) async fn read_split(
    store: &Arc<dyn Store>,
    name: &str,
) -> Result<
    (
        Vec<String>,
        BTreeMap<String, Vec<String>>,
        serde_json::Value,
    ),
    RunError,
> {
    let (placed, report) = crate::stages::selection::read_split(store, name).await?;
    let mut by_split: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, split) in placed {
        by_split.entry(split).or_default().push(id);
    }
    let mut order: Vec<String> = report["names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    order.retain(|n| by_split.contains_key(n));
    for n in by_split.keys() {
        if !order.contains(n) {
            order.push(n.clone());
        }
    }
    for ids in by_split.values_mut() {
        ids.sort();
    }
    Ok((order, by_split, report))
}
