//! `vidcurate release`: a run and one of its splits as a dataset folder others load with
//! Hugging Face `datasets.load_dataset(DIR)`, pyarrow, DuckDB or Polars (SPEC §9, §10).
//!
//! Reads: the run's manifest, `splits/<name>.parquet` (from `vidcurate split`), the source table
//! and each stage's table as the stage registry's `release` entry says (one-row-per-video
//! columns, named `<stage>_<column>`; the frames; the OCR lines), all under the run's current
//! fingerprints. Writes, into `--out`: `data/<split>-NNNNN-of-NNNNN.parquet` (one row per
//! video), `frames/<video>/NNNNN.jpg` when frames are kept as files,
//! `perturbations/<split>-…parquet` (RiskCue §3.4: the frame order of each variant) and
//! `README.md`, a dataset card whose YAML front matter declares the configs, the features and
//! the split sizes. Calls nothing; caches nothing.

use crate::commands::rethreshold::FunnelRow;
use crate::error::RunError;
use crate::runtime::chain::SOURCE_STAGE_ID;
use crate::stages::{Release, stage_kind};
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::{read_table, text_column};
use arrow::array::{
    Array, ArrayRef, BinaryBuilder, ListBuilder, RecordBatch, StringArray, StringBuilder,
    StructBuilder, UInt32Array, UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How frames go into the release.
#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum FrameMode {
    /// JPEG files under frames/, listed by relative path in a `frames` column.
    Paths,
    /// The JPEG bytes in the Parquet rows, as `datasets` Image values (one self-contained folder).
    Bytes,
    /// No frames.
    None,
}

/// What `release` is asked for (also its command-line flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ReleaseOptions {
    /// The folder to write (created; files of an earlier release there are replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// Which split of the run (`vidcurate split --name`).
    #[arg(long, default_value = "default")]
    pub split: String,
    /// How frames are kept: files listed by path, image bytes in the rows, or none.
    #[arg(long, value_enum, default_value = "paths")]
    pub frames: FrameMode,
    /// Videos per Parquet file.
    #[arg(long, default_value_t = 1000)]
    pub rows_per_file: usize,
    /// Seed of the shuffled perturbation.
    #[arg(long, default_value_t = 13)]
    pub seed: u64,
}

/// What a release wrote.
#[derive(Debug)]
pub struct ReleaseReport {
    pub out: PathBuf,
    /// Split name → videos.
    pub splits: Vec<(String, usize)>,
    pub columns: Vec<String>,
    pub files: usize,
}

/// A stage table made ready for joining: its batches in one, and each video's first row.
struct Joined {
    stage: String,
    batch: RecordBatch,
    row_of: HashMap<String, u32>,
    /// (column in `batch`, name in the release).
    columns: Vec<(usize, String)>,
}

/// Columns of a stage table that are not the stage's own.
const NOT_OWN: &[&str] = &["video_id", "stage_fingerprint"];

/// Source columns a release leaves out: a local path means nothing on another machine.
const SOURCE_LEFT_OUT: &[&str] = &["path", "size_bytes"];

fn concat(stage: &str, batches: &[RecordBatch]) -> Result<Option<RecordBatch>, RunError> {
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    arrow::compute::concat_batches(&first.schema(), batches)
        .map(Some)
        .map_err(|e| RunError::Internal(format!("{stage}: shards of one fingerprint differ: {e}")))
}

fn first_rows(batch: &RecordBatch) -> Result<HashMap<String, u32>, RunError> {
    let ids = text(batch, "video_id")?;
    let mut out = HashMap::new();
    for i in 0..batch.num_rows() {
        out.entry(ids.value(i).to_string()).or_insert(i as u32);
    }
    Ok(out)
}

fn text(batch: &RecordBatch, name: &str) -> Result<StringArray, RunError> {
    text_column(batch, name).ok_or_else(|| RunError::Internal(format!("no text column {name}")))
}

/// The types `datasets` declares plainly: large strings, lists and binaries become the ordinary
/// ones (a list's item field is named `item`, as pyarrow and `datasets` name it).
fn plain(dt: &DataType) -> DataType {
    match dt {
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::List(f) | DataType::LargeList(f) => {
            DataType::List(Arc::new(Field::new("item", plain(f.data_type()), true)))
        }
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Field::new(f.name(), plain(f.data_type()), true))
                .collect::<Vec<_>>()
                .into(),
        ),
        other => other.clone(),
    }
}

/// A column's `datasets` feature as YAML lines at `indent` (after `- name: …`).
fn feature_yaml(dt: &DataType, image_list: bool, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    if image_list {
        out.push_str(&format!("{pad}list: image\n"));
        return;
    }
    match dt {
        DataType::List(f) => match f.data_type() {
            DataType::Struct(fields) => {
                out.push_str(&format!("{pad}list:\n"));
                fields_yaml(fields, indent, out);
            }
            DataType::List(_) => {
                out.push_str(&format!("{pad}list:\n"));
                feature_yaml(f.data_type(), false, indent + 2, out);
            }
            inner => out.push_str(&format!("{pad}list: {}\n", dtype(inner))),
        },
        DataType::Struct(fields) => {
            out.push_str(&format!("{pad}struct:\n"));
            fields_yaml(fields, indent, out);
        }
        other => out.push_str(&format!("{pad}dtype: {}\n", dtype(other))),
    }
}

fn fields_yaml(fields: &Fields, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for f in fields {
        out.push_str(&format!("{pad}- name: {}\n", f.name()));
        feature_yaml(f.data_type(), false, indent + 2, out);
    }
}

fn dtype(dt: &DataType) -> &'static str {
    match dt {
        DataType::Null => "null",
        DataType::Boolean => "bool",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::UInt8 => "uint8",
        DataType::UInt16 => "uint16",
        DataType::UInt32 => "uint32",
        DataType::UInt64 => "uint64",
        DataType::Float16 => "float16",
        DataType::Float32 => "float32",
        DataType::Float64 => "float64",
        DataType::Binary | DataType::LargeBinary => "binary",
        _ => "string",
    }
}

/// The run's tables as release columns, and the frames and OCR lines per video.
struct Inputs {
    source: Joined,
    stages: Vec<Joined>,
    frames: HashMap<String, Vec<(u32, String)>>,
    ocr: HashMap<String, Vec<(u32, String)>>,
    frames_stage: Option<String>,
    ocr_stage: Option<String>,
    /// video → its transcript, from the `transcript` stage.
    transcripts: HashMap<String, Transcribed>,
    transcript_stage: Option<String>,
}

/// A video's transcript as a release carries it.
struct Transcribed {
    text: String,
    source: String,
    language: Option<String>,
    reason: Option<String>,
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

async fn read_inputs(store: &Arc<dyn Store>, m: &Manifest) -> Result<Inputs, RunError> {
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
        let view = read_table(store, &st.id, &st.fingerprint, true).await?;
        let Some(batch) = concat(&st.id, &view.batches)? else {
            continue;
        };
        let schema = batch.schema();
        let own = |i: usize| !NOT_OWN.contains(&schema.field(i).name().as_str());
        match role {
            None => {
                let info: Vec<String> =
                    crate::store::shards::fields_of::<crate::record::SourceInfo>()?
                        .iter()
                        .map(|f| f.name().clone())
                        .collect();
                extras = (0..schema.fields().len())
                    .filter(|i| own(*i) && !info.contains(schema.field(*i).name()))
                    .map(|i| schema.field(i).name().clone())
                    .collect();
                let columns = (0..schema.fields().len())
                    .filter(|i| own(*i))
                    .filter(|i| !SOURCE_LEFT_OUT.contains(&schema.field(*i).name().as_str()))
                    .map(|i| (i, schema.field(i).name().clone()))
                    .collect();
                source = Some(Joined {
                    stage: st.id.clone(),
                    row_of: first_rows(&batch)?,
                    batch,
                    columns,
                });
            }
            Some(Release::PerVideo) | Some(Release::Columns(_)) => {
                let named = |n: &str| match role {
                    Some(Release::Columns(c)) => c.contains(&n),
                    _ => true,
                };
                // The source's extra columns ride along in every table; the source has them.
                let extras = &extras;
                let columns = (0..schema.fields().len())
                    .filter(|i| own(*i))
                    .filter(|i| !extras.contains(schema.field(*i).name()))
                    .filter(|i| named(schema.field(*i).name()))
                    .map(|i| (i, format!("{}_{}", st.id, schema.field(i).name())))
                    .collect();
                stages.push(Joined {
                    stage: st.id.clone(),
                    row_of: first_rows(&batch)?,
                    batch,
                    columns,
                });
            }
            Some(Release::Frames) => {
                frames = per_video(&batch, "frame_index", "path")?;
                frames_stage = Some(st.id.clone());
            }
            Some(Release::Skip) => {}
            Some(Release::Text) => {
                ocr = per_video(&batch, "frame_index", "text")?;
                ocr_stage = Some(st.id.clone());
            }
            Some(Release::Transcript) => {
                let rows: HashMap<String, Vec<crate::stages::transcript::TranscriptSegment>> =
                    view.rows()?;
                transcripts = rows
                    .into_iter()
                    .map(|(id, mut r)| {
                        r.sort_by_key(|s| s.segment_index);
                        (id, Transcribed::of(&r))
                    })
                    .collect();
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

/// The adjudicated human annotations (`vidcurate annotate import`) as `annotation_<field>`.
async fn annotation_columns(store: &Arc<dyn Store>) -> Result<Option<Joined>, RunError> {
    let decided: Vec<crate::commands::annotate::Annotation> =
        crate::commands::annotate::read_annotations(store)
            .await?
            .into_iter()
            .filter(|a| a.annotator == "adjudicated")
            .collect();
    if decided.is_empty() {
        return Ok(None);
    }
    let fields = crate::store::shards::fields_of::<crate::commands::annotate::Annotation>()?;
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
    Ok(Some(Joined {
        stage: "annotations".into(),
        row_of: first_rows(&batch)?,
        batch,
        columns,
    }))
}

/// video → (frame index, value) in frame order (rows of one frame keep their stored order).
fn per_video(
    batch: &RecordBatch,
    index_col: &str,
    value_col: &str,
) -> Result<HashMap<String, Vec<(u32, String)>>, RunError> {
    let ids = text(batch, "video_id")?;
    let values = text(batch, value_col)?;
    let idx = arrow::compute::cast(
        batch
            .column_by_name(index_col)
            .ok_or_else(|| RunError::Internal(format!("no column {index_col}")))?,
        &DataType::UInt32,
    )
    .map_err(|e| RunError::Internal(e.to_string()))?;
    let idx = idx
        .as_any()
        .downcast_ref::<UInt32Array>()
        .cloned()
        .ok_or_else(|| RunError::Internal(format!("{index_col}: not a number")))?;
    let mut out: HashMap<String, Vec<(u32, String)>> = HashMap::new();
    for i in 0..batch.num_rows() {
        out.entry(ids.value(i).to_string())
            .or_default()
            .push((idx.value(i), values.value(i).to_string()));
    }
    for v in out.values_mut() {
        v.sort_by_key(|(f, _)| *f);
    }
    Ok(out)
}

/// The split's videos (split name → sorted ids) and the split names in their order.
async fn read_split(
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
    let (placed, report) = crate::commands::split::read_split(store, name).await?;
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

/// The frame order of each perturbation variant (RiskCue §3.4), as indices into the frames.
pub fn perturbations(n: usize, seed: u64, video_id: &str) -> Vec<(&'static str, Vec<u32>)> {
    let original: Vec<u32> = (0..n as u32).collect();
    let mut shuffled = original.clone();
    // Fisher–Yates on splitmix64, seeded by the seed and the video: stable across runs.
    let h = blake3::hash(format!("{seed}:{video_id}").as_bytes());
    let mut state = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default());
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        shuffled.swap(i, j);
    }
    let half = n / 2;
    let swapped: Vec<u32> = original[half..]
        .iter()
        .chain(&original[..half])
        .copied()
        .collect();
    let reversed: Vec<u32> = original.iter().rev().copied().collect();
    vec![
        ("original", original.clone()),
        ("shuffled", shuffled),
        ("halves_swapped", swapped),
        ("reversed", reversed),
        (
            "first_frame",
            original.first().copied().into_iter().collect(),
        ),
        ("last_frame", original.last().copied().into_iter().collect()),
    ]
}

fn take(col: &ArrayRef, rows: &[Option<u32>]) -> Result<ArrayRef, RunError> {
    let idx = UInt32Array::from(rows.to_vec());
    let taken = arrow::compute::take(col.as_ref(), &idx, None)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    let want = plain(taken.data_type());
    if &want == taken.data_type() {
        return Ok(taken);
    }
    arrow::compute::cast(&taken, &want).map_err(|e| RunError::Internal(e.to_string()))
}

/// One Parquet file's rows: the given videos of one split.
fn build_rows(
    inputs: &Inputs,
    split: &str,
    ids: &[String],
    opts: &ReleaseOptions,
    run_dir_files: &dyn Fn(&str) -> Result<Vec<u8>, RunError>,
) -> Result<(RecordBatch, Vec<String>), RunError> {
    let mut fields = vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(ids.iter())),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|_| split))),
    ];
    let mut images = vec![];
    for t in std::iter::once(&inputs.source).chain(&inputs.stages) {
        let rows: Vec<Option<u32>> = ids.iter().map(|id| t.row_of.get(id).copied()).collect();
        for (i, name) in &t.columns {
            let c = take(t.batch.column(*i), &rows)?;
            fields.push(Field::new(name, c.data_type().clone(), true));
            cols.push(c);
        }
    }
    if inputs.frames_stage.is_some() && opts.frames != FrameMode::None {
        let (field, col) = frame_column(inputs, ids, opts.frames, run_dir_files)?;
        if opts.frames == FrameMode::Bytes {
            images.push(field.name().clone());
        }
        fields.push(field);
        cols.push(col);
    }
    if inputs.ocr_stage.is_some() {
        let mut b = StringBuilder::new();
        for id in ids {
            let mut seen = std::collections::HashSet::new();
            let lines: Vec<&str> = inputs
                .ocr
                .get(id)
                .map(|v| {
                    v.iter()
                        .map(|(_, t)| t.as_str())
                        .filter(|t| seen.insert(*t))
                        .collect()
                })
                .unwrap_or_default();
            b.append_value(lines.join("\n"));
        }
        fields.push(Field::new("ocr_text", DataType::Utf8, true));
        cols.push(Arc::new(b.finish()));
    }
    if inputs.transcript_stage.is_some() {
        // Null for a video the stage never finished; empty text (with a reason) for one it
        // found no speech in.
        let t = |id: &String| inputs.transcripts.get(id);
        let columns: [(&str, Vec<Option<String>>); 4] = [
            (
                "transcript",
                ids.iter().map(|id| t(id).map(|x| x.text.clone())).collect(),
            ),
            (
                "transcript_source",
                ids.iter()
                    .map(|id| t(id).map(|x| x.source.clone()))
                    .collect(),
            ),
            (
                "transcript_language",
                ids.iter()
                    .map(|id| t(id).and_then(|x| x.language.clone()))
                    .collect(),
            ),
            (
                "transcript_reason",
                ids.iter()
                    .map(|id| t(id).and_then(|x| x.reason.clone()))
                    .collect(),
            ),
        ];
        for (name, values) in columns {
            fields.push(Field::new(name, DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from(values)));
        }
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    Ok((batch, images))
}

/// The frames column: relative paths of the copied files, or image structs with the bytes.
fn frame_column(
    inputs: &Inputs,
    ids: &[String],
    mode: FrameMode,
    read: &dyn Fn(&str) -> Result<Vec<u8>, RunError>,
) -> Result<(Field, ArrayRef), RunError> {
    let name = |id: &str, k: usize| format!("frames/{id}/{k:05}.jpg");
    if mode == FrameMode::Paths {
        let mut b = ListBuilder::new(StringBuilder::new());
        for id in ids {
            for k in 0..inputs.frames.get(id).map_or(0, Vec::len) {
                b.values().append_value(name(id, k));
            }
            b.append(true);
        }
        let a = b.finish();
        return Ok((
            Field::new("frames", a.data_type().clone(), true),
            Arc::new(a),
        ));
    }
    let image = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let mut b = ListBuilder::new(StructBuilder::from_fields(image, 0));
    for id in ids {
        for (k, (_, path)) in inputs.frames.get(id).into_iter().flatten().enumerate() {
            let s = b.values();
            s.field_builder::<BinaryBuilder>(0)
                .ok_or_else(|| RunError::Internal("image builder".into()))?
                .append_value(read(path)?);
            s.field_builder::<StringBuilder>(1)
                .ok_or_else(|| RunError::Internal("image builder".into()))?
                .append_value(name(id, k));
            s.append(true);
        }
        b.append(true);
    }
    let a = b.finish();
    Ok((
        Field::new("frames", a.data_type().clone(), true),
        Arc::new(a),
    ))
}

fn write_parquet(path: &Path, batch: &RecordBatch) -> Result<(), RunError> {
    let io = |e: std::io::Error| RunError::io(path.display().to_string(), e);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(io)?;
    }
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
        .map_err(|e| RunError::Internal(e.to_string()))?;
    w.write(batch)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    w.close().map_err(|e| RunError::Internal(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Writes the release folder.
pub async fn release(run_dir: &Path, opts: &ReleaseOptions) -> Result<ReleaseReport, RunError> {
    if opts.rows_per_file == 0 {
        return Err(RunError::Config(
            "--rows-per-file must be at least 1".into(),
        ));
    }
    let (store, m) = crate::commands::rethreshold::open_run(run_dir).await?;
    let (order, by_split, split_report) = read_split(&store, &opts.split).await?;
    let inputs = read_inputs(&store, &m).await?;
    let out = &opts.out;
    for sub in ["data", "frames", "perturbations"] {
        let d = out.join(sub);
        if d.exists() {
            std::fs::remove_dir_all(&d).map_err(|e| RunError::io(d.display().to_string(), e))?;
        }
    }
    let mut schema = None;
    let mut images = vec![];
    let mut files = 0;
    let mut sizes = vec![];
    let mut p_bytes = HashMap::new();
    for split in &order {
        let ids = &by_split[split];
        let mut bytes = 0;
        let chunks: Vec<&[String]> = ids.chunks(opts.rows_per_file).collect();
        for (n, chunk) in chunks.iter().enumerate() {
            let jpegs = if opts.frames == FrameMode::Bytes {
                fetch_frames(&store, &inputs, chunk).await?
            } else {
                HashMap::new()
            };
            let read = |rel: &str| {
                jpegs
                    .get(rel)
                    .cloned()
                    .ok_or_else(|| RunError::Internal(format!("{rel}: not fetched")))
            };
            let (batch, imgs) = build_rows(&inputs, split, chunk, opts, &read)?;
            let name = format!("data/{split}-{n:05}-of-{:05}.parquet", chunks.len());
            write_parquet(&out.join(&name), &batch)?;
            // What `datasets` calls num_bytes: the size of the rows in Arrow.
            bytes += batch.get_array_memory_size();
            files += 1;
            images = imgs;
            schema.get_or_insert(batch.schema());
        }
        if opts.frames == FrameMode::Paths {
            copy_frames(&store, &inputs, ids, out).await?;
        }
        let pb = write_perturbations(&inputs, split, ids, opts.seed, out)?;
        p_bytes.insert(split.clone(), pb);
        sizes.push((split.clone(), ids.len(), bytes));
    }
    let schema = schema.ok_or_else(|| {
        RunError::Config(format!(
            "splits/{}.parquet holds no video: nothing to release",
            opts.split
        ))
    })?;
    let funnel = crate::commands::rethreshold::pipeline_selection(run_dir)
        .await?
        .2;
    let card = card(
        &m,
        &schema,
        &images,
        &sizes,
        &p_bytes,
        &split_report,
        &funnel,
        &inputs,
        opts,
    );
    let readme = out.join("README.md");
    std::fs::write(&readme, card).map_err(|e| RunError::io(readme.display().to_string(), e))?;
    Ok(ReleaseReport {
        out: out.clone(),
        splits: sizes.into_iter().map(|(s, n, _)| (s, n)).collect(),
        columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
        files,
    })
}

/// The JPEG bytes of the videos' frames, by their path in the run.
async fn fetch_frames(
    store: &Arc<dyn Store>,
    inputs: &Inputs,
    ids: &[String],
) -> Result<HashMap<String, Vec<u8>>, RunError> {
    let mut out = HashMap::new();
    for id in ids {
        for (_, path) in inputs.frames.get(id).into_iter().flatten() {
            let data = store
                .get(path)
                .await
                .map_err(|e| RunError::io(format!("{}/{path}", store.location()), e))?;
            out.insert(path.clone(), data);
        }
    }
    Ok(out)
}

async fn copy_frames(
    store: &Arc<dyn Store>,
    inputs: &Inputs,
    ids: &[String],
    out: &Path,
) -> Result<(), RunError> {
    for id in ids {
        let jpegs = fetch_frames(store, inputs, std::slice::from_ref(id)).await?;
        for (k, (_, path)) in inputs.frames.get(id).into_iter().flatten().enumerate() {
            let dest = out.join(format!("frames/{id}/{k:05}.jpg"));
            let io = |e| RunError::io(dest.display().to_string(), e);
            std::fs::create_dir_all(dest.parent().unwrap_or(out)).map_err(io)?;
            std::fs::write(&dest, &jpegs[path]).map_err(io)?;
        }
    }
    Ok(())
}

fn write_perturbations(
    inputs: &Inputs,
    split: &str,
    ids: &[String],
    seed: u64,
    out: &Path,
) -> Result<usize, RunError> {
    let (mut vid, mut variant) = (StringBuilder::new(), StringBuilder::new());
    let mut order = ListBuilder::new(UInt32Builder::new());
    for id in ids {
        let n = inputs.frames.get(id).map_or(0, Vec::len);
        for (name, o) in perturbations(n, seed, id) {
            vid.append_value(id);
            variant.append_value(name);
            order.values().append_slice(&o);
            order.append(true);
        }
    }
    let order = order.finish();
    let schema = Schema::new(vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("variant", DataType::Utf8, false),
        Field::new("frame_order", order.data_type().clone(), true),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(vid.finish()),
            Arc::new(variant.finish()),
            Arc::new(order),
        ],
    )
    .map_err(|e| RunError::Internal(e.to_string()))?;
    write_parquet(
        &out.join(format!("perturbations/{split}-00000-of-00001.parquet")),
        &batch,
    )?;
    Ok(batch.get_array_memory_size())
}

/// The dataset card: YAML front matter for `datasets`, then how the data was made.
#[allow(clippy::too_many_arguments)]
fn card(
    m: &Manifest,
    schema: &Schema,
    images: &[String],
    sizes: &[(String, usize, usize)],
    p_bytes: &HashMap<String, usize>,
    split_report: &serde_json::Value,
    funnel: &[FunnelRow],
    inputs: &Inputs,
    opts: &ReleaseOptions,
) -> String {
    let mut y =
        String::from("---\nconfigs:\n- config_name: default\n  default: true\n  data_files:\n");
    for (s, _, _) in sizes {
        y += &format!("  - split: {s}\n    path: data/{s}-*.parquet\n");
    }
    y += "- config_name: perturbations\n  data_files:\n";
    for (s, _, _) in sizes {
        y += &format!("  - split: {s}\n    path: perturbations/{s}-*.parquet\n");
    }
    y += "dataset_info:\n- config_name: default\n  features:\n";
    for f in schema.fields() {
        y += &format!("  - name: {}\n", f.name());
        feature_yaml(f.data_type(), images.contains(f.name()), 4, &mut y);
    }
    y += "  splits:\n";
    for (s, n, bytes) in sizes {
        y += &format!("  - name: {s}\n    num_bytes: {bytes}\n    num_examples: {n}\n");
    }
    y += "- config_name: perturbations\n  features:\n  - name: video_id\n    dtype: string\n  - name: variant\n    dtype: string\n  - name: frame_order\n    list: uint32\n  splits:\n";
    for (s, n, _) in sizes {
        y += &format!(
            "  - name: {s}\n    num_bytes: {}\n    num_examples: {}\n",
            p_bytes.get(s).copied().unwrap_or(0),
            n * 6
        );
    }
    y += "---\n\n";

    let total: usize = sizes.iter().map(|(_, n, _)| n).sum();
    let mut c = format!(
        "# {}\n\nA video dataset of {total} videos built with vidcurate {} from the pipeline `{}` (`{}`).\n\n",
        m.pipeline_name, m.tool_version, m.pipeline_name, m.pipeline_file
    );
    c += "```python\nfrom datasets import load_dataset\nds = load_dataset(\"path/to/this/folder\")              # train / validation / test\nperturbed = load_dataset(\"path/to/this/folder\", \"perturbations\")\n```\n\n";
    c += "## Splits\n\n| split | videos |\n|---|---:|\n";
    for (s, n, _) in sizes {
        c += &format!("| {s} | {n} |\n");
    }
    c += &format!(
        "\nVideo-level, deterministic (`vidcurate split`: ratios {}, stratified by {}, grouped by {}, seed {}).\n",
        split_report["ratios"],
        list_or(&split_report["stratify"], "nothing"),
        split_report["group"]
            .as_str()
            .unwrap_or("nothing (each video alone)"),
        split_report["seed"]
    );
    c += "\n## How it was built\n\nEach stage takes the videos the stages before it passed on (counts from the run's tables):\n\n| stage | type | in | done | rejected | not reached | out |\n|---|---|---:|---:|---:|---:|---:|\n";
    for r in funnel {
        c += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.stage, r.kind, r.input, r.done, r.rejected, r.pending, r.out
        );
    }
    c += "\nStage settings as run (models, thresholds):\n\n";
    for st in m.stages.iter().filter(|s| s.id != SOURCE_STAGE_ID) {
        c += &format!("- `{}` ({}): `{}`\n", st.id, st.kind, st.compute);
    }
    c += "\nThe pipeline file as run:\n\n```toml\n";
    c += m.pipeline_toml.trim_end();
    c += "\n```\n\n## Columns\n\n";
    c += "- `video_id`, `split`; the source's columns (title, description, channel, upload time, counts, licence, `url` where the video can be fetched, `provenance`: every search that found it, with its query, parameters, page and rank) and the source manifest's own columns;\n";
    for t in &inputs.stages {
        c += &format!(
            "- from stage `{}`: {}\n",
            t.stage,
            t.columns
                .iter()
                .map(|(_, n)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(f) = &inputs.frames_stage {
        c += &match opts.frames {
            FrameMode::Paths => format!(
                "- `frames`: the sampled frames of stage `{f}` in time order, as paths of JPEG files under `frames/`;\n"
            ),
            FrameMode::Bytes => format!(
                "- `frames`: the sampled frames of stage `{f}` in time order, as images (JPEG bytes);\n"
            ),
            FrameMode::None => String::new(),
        };
    }
    if let Some(o) = &inputs.ocr_stage {
        c += &format!(
            "- `ocr_text`: the on-screen text stage `{o}` read, each distinct line once, in frame order.\n"
        );
    }
    if let Some(t) = &inputs.transcript_stage {
        c += &format!(
            "- `transcript`: what is said in the video (stage `{t}`), its segments joined in time order; `transcript_source` says where the text came from (`asr:<model>`, `captions:youtube`, `captions:json3`), `transcript_language` the language the service or caption track named, `transcript_reason` why a video has no text (`no_audio_stream`, `empty_audio`, `no_speech`). The timed segments are in the run's `{t}` table.\n"
        );
    }
    c += &format!(
        "\n## Perturbations\n\nThe `perturbations` config lists, per video, the frame order of each variant for the temporal-reasoning metric (RiskCue §3.4): `original`, `shuffled` (seed {}), `halves_swapped`, `reversed`, `first_frame`, `last_frame`. `frame_order` indexes the video's `frames`.\n",
        opts.seed
    );
    c += "\n## Licence and terms\n\nThe videos belong to their uploaders. This folder holds metadata, derived frames and text for research; the `license` column says what the platform reported for each video (YouTube: `youtube` is the standard licence, `creativeCommon` CC BY). Redistribution of frames must respect each video's licence and the platform's terms of service (YouTube API Services Terms: metadata may need refreshing or deleting when videos are removed). Remove a video on its owner's request.\n";
    c += "\n## Provenance\n\nEvery row says where its video came from: `url`, `channel_id` and `published_at` identify it on the platform, and `provenance` lists each search (query, parameters, result page and rank) that returned it. The run directory's manifest records the tool version, every stage's settings and fingerprint, and every invocation.\n";
    y + &c
}

fn list_or(v: &serde_json::Value, none: &str) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        _ => none.to_string(),
    }
}

/// Write a split run as a dataset folder: Parquet files per split, frames, perturbations
/// and a dataset card, loadable with `datasets.load_dataset(DIR)`, pyarrow, DuckDB, Polars.
///
/// One row per selected video: ids, the source's metadata and manifest columns, every
/// one-row-per-video stage's columns (`<stage>_<column>`: scores, votes, probe), the frames
/// (files or image bytes), the OCR text, the split. `perturbations/` gives each video's frame
/// order for the variants of RiskCue §3.4. README.md is the card: YAML for `datasets`
/// (configs, features, split sizes), the funnel, the settings, licence notes, provenance.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate split data/runs/demo --stratify label\n  vidcurate release data/runs/demo --out data/releases/demo\n  vidcurate release data/runs/demo --out /tmp/demo-hf --frames bytes --split default"
)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …).
    pub run_dir: std::path::PathBuf,
    #[command(flatten)]
    pub opts: ReleaseOptions,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let r = super::tokio_runtime()?.block_on(release(&a.run_dir, &a.opts))?;
    for (split, n) in &r.splits {
        println!("{split:<12} {n:>8} videos");
    }
    println!(
        "{} files, {} columns; card: {}",
        r.files,
        r.columns.len(),
        r.out.join("README.md").display()
    );
    Ok(crate::error::Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perturbations_are_permutations_or_single_frames() {
        let v = perturbations(16, 13, "abc");
        let names: Vec<&str> = v.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "original",
                "shuffled",
                "halves_swapped",
                "reversed",
                "first_frame",
                "last_frame"
            ]
        );
        let mut sorted = v[1].1.clone();
        sorted.sort();
        assert_eq!(sorted, v[0].1);
        assert_ne!(
            v[1].1, v[0].1,
            "a shuffle of 16 frames that changes nothing"
        );
        assert_eq!(v[2].1[..8], v[0].1[8..]);
        assert_eq!(v[3].1[0], 15);
        assert_eq!(v[4].1, vec![0]);
        assert_eq!(v[5].1, vec![15]);
        // Stable for a video and seed; another seed, another shuffle.
        assert_eq!(perturbations(16, 13, "abc")[1], v[1]);
        assert_ne!(perturbations(16, 14, "abc")[1], v[1]);
        assert!(perturbations(0, 13, "x").iter().all(|(_, o)| o.is_empty()));
    }

    #[test]
    fn features_follow_the_datasets_yaml_form() {
        let schema = Schema::new(vec![
            Field::new(
                "tags",
                plain(&DataType::LargeList(Arc::new(Field::new(
                    "element",
                    DataType::LargeUtf8,
                    true,
                )))),
                true,
            ),
            Field::new(
                "prov",
                DataType::List(Arc::new(Field::new(
                    "item",
                    DataType::Struct(vec![Field::new("rank", DataType::UInt32, true)].into()),
                    true,
                ))),
                true,
            ),
        ]);
        let mut y = String::new();
        for f in schema.fields() {
            y += &format!("- name: {}\n", f.name());
            feature_yaml(f.data_type(), false, 2, &mut y);
        }
        assert_eq!(
            y,
            "- name: tags\n  list: string\n- name: prov\n  list:\n  - name: rank\n    dtype: uint32\n"
        );
    }
}
