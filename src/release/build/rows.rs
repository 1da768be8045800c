//! The release's rows: one per video of a split, the joined columns taken in the split's order,
//! and the frames as paths or as image bytes. Pure Arrow; reads and writes nothing.

use super::*;
use crate::error::RunError;
use arrow::array::{
    Array, ArrayRef, BinaryBuilder, ListBuilder, RecordBatch, StringArray, StringBuilder,
    StructBuilder, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use std::sync::Arc;

pub(super) fn take(col: &ArrayRef, rows: &[Option<u32>]) -> Result<ArrayRef, RunError> {
    let idx = UInt32Array::from(rows.to_vec());
    let taken = arrow::compute::take(col.as_ref(), &idx, None)
        .map_err(|e| RunError::Internal(e.to_string()))?;
    as_plain(&taken)
}

/// The column in the plain type `datasets` and every reader read (`plain`).
fn as_plain(c: &ArrayRef) -> Result<ArrayRef, RunError> {
    let want = plain(c.data_type());
    if &want == c.data_type() {
        return Ok(c.clone());
    }
    arrow::compute::cast(c, &want).map_err(|e| RunError::Internal(e.to_string()))
}

/// `batch` with every column in the plain types `datasets` and every reader read (`plain`).
pub(super) fn plain_batch(batch: &RecordBatch) -> Result<RecordBatch, RunError> {
    let cols = batch
        .columns()
        .iter()
        .map(as_plain)
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&cols)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| RunError::Internal(e.to_string()))
}

/// One Parquet file's rows: the given videos of one split.
pub(super) fn build_rows(
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
            b.append_value(inputs.ocr.get(id).map_or("", String::as_str));
        }
        fields.push(Field::new("ocr_text", DataType::Utf8, true));
        cols.push(Arc::new(b.finish()));
    }
    if inputs.transcript_stage.is_some() {
        // Null for a video the stage never finished; empty text (with a reason) for one it
        // found no speech in.
        let column = |f: fn(&Transcribed) -> Option<String>| -> Vec<Option<String>> {
            ids.iter()
                .map(|id| inputs.transcripts.get(id).and_then(f))
                .collect()
        };
        let columns = [
            ("transcript", column(|x| Some(x.text.clone()))),
            ("transcript_source", column(|x| Some(x.source.clone()))),
            ("transcript_language", column(|x| x.language.clone())),
            ("transcript_reason", column(|x| x.reason.clone())),
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
pub(super) fn frame_column(
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
        return Ok(frames_field(b.finish()));
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
    Ok(frames_field(b.finish()))
}

/// The `frames` field and column of a finished list.
fn frames_field(a: impl Array + 'static) -> (Field, ArrayRef) {
    (
        Field::new("frames", a.data_type().clone(), true),
        Arc::new(a),
    )
}
