//! A release file without the rows of the videos a takedown removes: Parquet files with a
//! `video_id` column, TSV and JSON-lines exports. Each returns the new bytes, or none when the
//! file holds none of those videos.

use crate::error::RunError;
use crate::error::io;
use crate::store::shards::text_column;
use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use std::collections::BTreeSet;
use std::path::Path;

/// The file without the rows of `gone` (None when it has none of them or no `video_id`), and
/// the rows it keeps and drops.
pub(super) fn without_rows_parquet(
    path: &Path,
    gone: &BTreeSet<String>,
) -> Result<(Option<Vec<u8>>, usize, usize), RunError> {
    let (schema, batches) = crate::release::read_parquet(path)?;
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if schema.column_with_name("video_id").is_none() {
        return Ok((None, total, 0));
    }
    let mut kept = vec![];
    for b in &batches {
        let ids = text_column(b, "video_id").ok_or_else(|| {
            RunError::Config(format!("{}: `video_id` is not text", path.display()))
        })?;
        let keep: BooleanArray = ids
            .iter()
            .map(|id| Some(!id.is_some_and(|id| gone.contains(id))))
            .collect();
        kept.push(arrow::compute::filter_record_batch(b, &keep).map_err(internal(path))?);
    }
    let left: usize = kept.iter().map(RecordBatch::num_rows).sum();
    if left == total {
        return Ok((None, total, 0));
    }
    let bytes = if left == 0 {
        no_row_groups(path, schema)?
    } else {
        let one = arrow::compute::concat_batches(&schema, &kept).map_err(internal(path))?;
        crate::store::shards::encode_table(&one)?
    };
    Ok((Some(bytes), left, total - left))
}

/// An Arrow or Parquet error of the file at `path`.
fn internal<E: std::fmt::Display>(path: &Path) -> impl FnOnce(E) -> RunError + '_ {
    move |e| RunError::Internal(format!("{}: {e}", path.display()))
}

/// A Parquet file with the columns and no row group: `datasets` skips such a file, where one
/// empty row group stops it ("BatchSize must be greater than 0"), so an emptied file keeps its
/// name and the split its other files.
fn no_row_groups(path: &Path, schema: SchemaRef) -> Result<Vec<u8>, RunError> {
    let mut out = vec![];
    let w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).map_err(internal(path))?;
    w.close().map_err(internal(path))?;
    Ok(out)
}

/// A TSV export (VLMEvalKit's) without the records whose `video_id` column is in `gone`. Records
/// are cut where the csv reader says they start, so kept ones stay byte for byte as written
/// (quoted cells with newlines included).
pub(super) fn without_rows_tsv(
    path: &Path,
    gone: &BTreeSet<String>,
) -> Result<Option<Vec<u8>>, RunError> {
    let text = std::fs::read(path).map_err(io(path))?;
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(b'\t')
        .has_headers(true)
        .flexible(true)
        .from_reader(&text[..]);
    let bad = |e: csv::Error| RunError::Config(format!("{}: {e}", path.display()));
    let Some(col) = rdr
        .headers()
        .map_err(bad)?
        .iter()
        .position(|h| h == "video_id")
    else {
        return Ok(None);
    };
    let mut records = vec![];
    for r in rdr.byte_records() {
        let r = r.map_err(bad)?;
        let start = r.position().map_or(0, |p| p.byte() as usize);
        let drop = r
            .get(col)
            .is_some_and(|v| gone.contains(String::from_utf8_lossy(v).as_ref()));
        records.push((start, drop));
    }
    if !records.iter().any(|(_, d)| *d) {
        return Ok(None);
    }
    let mut out = text[..records[0].0].to_vec();
    for (i, (start, drop)) in records.iter().enumerate() {
        let end = records.get(i + 1).map_or(text.len(), |n| n.0);
        if !drop {
            out.extend_from_slice(&text[*start..end]);
        }
    }
    Ok(Some(out))
}

/// A JSON-lines file without the objects whose `video_id` is in `gone`.
pub(super) fn without_rows_jsonl(
    path: &Path,
    gone: &BTreeSet<String>,
) -> Result<Option<Vec<u8>>, RunError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut out = String::new();
    let mut dropped = false;
    for line in text.split_inclusive('\n') {
        let id = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["video_id"].as_str().map(String::from));
        if id.is_some_and(|id| gone.contains(&id)) {
            dropped = true;
        } else {
            out += line;
        }
    }
    Ok(dropped.then(|| out.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsv_records_with_quoted_newlines_are_cut_whole() {
        let (_d, p) = crate::store::test_support::file_with(
            "x.tsv",
            "index\tquestion\tvideo_id\n0\t\"two\nlines\"\ta\n1\tplain\tb\n2\tq\ta\n",
        );
        let gone = BTreeSet::from(["a".to_string()]);
        let got = without_rows_tsv(&p, &gone).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "index\tquestion\tvideo_id\n1\tplain\tb\n"
        );
        assert!(
            without_rows_tsv(&p, &BTreeSet::from(["z".to_string()]))
                .unwrap()
                .is_none()
        );
    }
}
