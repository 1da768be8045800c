//! A task config's released rows as scoring reads them (`score::Reference`), taken from the
//! Parquet columns directly: only the columns a reference has are read, the format's others
//! being absent from its config, and a list of options repeated row after row (a task's fixed
//! options) is shared rather than copied. At a million items this, not the scoring, was the
//! cost of loading a release.
//!
//! Reads `tasks/<task>/*.parquet` of a release (only `item_id` of a split not scored); writes,
//! calls and caches nothing.

use crate::benchmark::overlap::load::strings;
use crate::benchmark::score::Reference;
use crate::error::RunError;
use crate::store::shards::project_columns;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, UInt32Type};
use std::path::Path;
use std::sync::Arc;

/// The columns a reference is read from.
const COLUMNS: &[&str] = &[
    "item_id",
    "video_id",
    "options",
    "answer",
    "answer_choices",
    "answer_count",
    "answer_starts",
    "answer_ends",
    "answer_text",
    "answer_label",
    "reference_fields",
    "reference_items",
];

/// The batches of `path`'s columns that `wanted` picks, and the file's row count (from its
/// footer); errors name the file.
fn open_columns(path: &Path, wanted: impl Fn(&str) -> bool) -> Result<(Batches, i64), RunError> {
    let shown = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| RunError::io(shown.clone(), e))?;
    let bad = move |e: String| RunError::Config(format!("{shown}: {e}"));
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(|e| bad(e.to_string()))?;
    let rows = builder.metadata().file_metadata().num_rows();
    let reader = project_columns(builder, wanted)
        .build()
        .map_err(|e| bad(e.to_string()))?;
    let batches = reader.map(move |b| b.map_err(|e| bad(e.to_string())));
    Ok((Box::new(batches), rows))
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, RunError>>>;

/// The rows of one Parquet file of a task config, as references, in file order.
pub fn read_file(path: &Path, out: &mut Vec<Reference>) -> Result<(), RunError> {
    let (batches, rows) = open_columns(path, |name| COLUMNS.contains(&name))?;
    // The footer's row count: the references are most of the memory at a million items, and
    // a vector grown by doubling holds up to twice what it needs.
    out.reserve_exact(usize::try_from(rows).unwrap_or(0));
    let bad = |e: arrow::error::ArrowError| RunError::Config(format!("{}: {e}", path.display()));
    let mut last_options: Arc<[String]> = Arc::new([]);
    for b in batches {
        batch(&b?, &mut last_options, out).map_err(bad)?;
    }
    Ok(())
}

/// The item ids of one Parquet file of a task config (a split not scored: its items are
/// known, so a prediction for one is left out rather than refused).
pub fn read_ids(path: &Path, out: &mut std::collections::HashSet<String>) -> Result<(), RunError> {
    let (batches, _) = open_columns(path, |name| name == "item_id")?;
    let bad = |e: arrow::error::ArrowError| RunError::Config(format!("{}: {e}", path.display()));
    for b in batches {
        if let Some(ids) = text(&b?, "item_id").map_err(bad)? {
            let ids = ids.as_string::<i32>();
            out.extend(ids.iter().flatten().map(str::to_string));
        }
    }
    Ok(())
}

/// A text column as Utf8 (a release may write large strings).
fn text(b: &RecordBatch, name: &str) -> Result<Option<ArrayRef>, arrow::error::ArrowError> {
    b.column_by_name(name)
        .map(|c| arrow::compute::cast(c, &DataType::Utf8))
        .transpose()
}

/// A list column with 32-bit offsets (a release may write large lists).
fn list(b: &RecordBatch, name: &str) -> Result<Option<ArrayRef>, arrow::error::ArrowError> {
    let Some(c) = b.column_by_name(name) else {
        return Ok(None);
    };
    match c.data_type() {
        DataType::LargeList(f) => {
            let item =
                match f.data_type() {
                    DataType::LargeUtf8 => DataType::Utf8,
                    DataType::LargeList(g) => DataType::List(Arc::new(
                        arrow::datatypes::Field::new("item", DataType::Utf8, g.is_nullable()),
                    )),
                    other => other.clone(),
                };
            let to = DataType::List(Arc::new(arrow::datatypes::Field::new(
                "item",
                item,
                f.is_nullable(),
            )));
            arrow::compute::cast(c, &to).map(Some)
        }
        _ => Ok(Some(c.clone())),
    }
}

/// The columns of one batch a reference is read from (absent ones are None).
struct Columns {
    ids: Option<ArrayRef>,
    videos: Option<ArrayRef>,
    answer: Option<ArrayRef>,
    label: Option<ArrayRef>,
    answer_text: Option<ArrayRef>,
    options: Option<ArrayRef>,
    choices: Option<ArrayRef>,
    starts: Option<ArrayRef>,
    ends: Option<ArrayRef>,
    fields: Option<ArrayRef>,
    items: Option<ArrayRef>,
    count: Option<ArrayRef>,
}

impl Columns {
    fn of(b: &RecordBatch) -> Result<Self, arrow::error::ArrowError> {
        let (ids, videos, answer) = (
            text(b, "item_id")?,
            text(b, "video_id")?,
            text(b, "answer")?,
        );
        let (label, answer_text) = (text(b, "answer_label")?, text(b, "answer_text")?);
        let options = list(b, "options")?;
        let choices = list(b, "answer_choices")?;
        let (starts, ends) = (list(b, "answer_starts")?, list(b, "answer_ends")?);
        let (fields, items) = (list(b, "reference_fields")?, list(b, "reference_items")?);
        let count = b
            .column_by_name("answer_count")
            .map(|c| arrow::compute::cast(c, &DataType::UInt32))
            .transpose()?;
        Ok(Self {
            ids,
            videos,
            answer,
            label,
            answer_text,
            options,
            choices,
            starts,
            ends,
            fields,
            items,
            count,
        })
    }
}

/// Row `i` of a text column ("" when absent or null).
fn str_at(c: &Option<ArrayRef>, i: usize) -> String {
    c.as_ref()
        .map(|c| c.as_string::<i32>())
        .filter(|s| s.is_valid(i))
        .map(|s| s.value(i).to_string())
        .unwrap_or_default()
}

/// Row `i` of a list column (None when absent or null).
fn list_at(c: &Option<ArrayRef>, i: usize) -> Option<ArrayRef> {
    let l = c.as_ref()?.as_list::<i32>();
    l.is_valid(i).then(|| l.value(i))
}

/// Row `i` of a list-of-numbers column as numbers (empty when absent).
fn nums_at(c: &Option<ArrayRef>, i: usize) -> Vec<f64> {
    list_at(c, i)
        .and_then(|a| arrow::compute::cast(&a, &DataType::Float64).ok())
        .map(|a| a.as_primitive::<Float64Type>().values().to_vec())
        .unwrap_or_default()
}

/// Row `i`'s chosen option indices from `answer_choices` (empty when absent).
fn chosen_at(c: &Option<ArrayRef>, i: usize) -> Vec<usize> {
    list_at(c, i)
        .and_then(|a| arrow::compute::cast(&a, &DataType::UInt32).ok())
        .map(|a| {
            a.as_primitive::<UInt32Type>()
                .values()
                .iter()
                .map(|c| *c as usize)
                .collect()
        })
        .unwrap_or_default()
}

/// Row `i`'s named reference lists: each of `reference_fields` with its `reference_items`.
fn lists_at(
    fields: &Option<ArrayRef>,
    items: &Option<ArrayRef>,
    i: usize,
) -> Vec<(String, Vec<String>)> {
    match (list_at(fields, i), list_at(items, i)) {
        (Some(f), Some(it)) => {
            let it = it.as_list::<i32>();
            strings(&f)
                .into_iter()
                .enumerate()
                .map(|(k, name)| {
                    let v = if k < it.len() && it.is_valid(k) {
                        strings(&it.value(k))
                    } else {
                        vec![]
                    };
                    (name, v)
                })
                .collect()
        }
        _ => vec![],
    }
}

/// Appends one batch's rows to `out`, sharing the options of the row before when they are
/// the same.
fn batch(
    b: &RecordBatch,
    last_options: &mut Arc<[String]>,
    out: &mut Vec<Reference>,
) -> Result<(), arrow::error::ArrowError> {
    let c = Columns::of(b)?;
    for i in 0..b.num_rows() {
        if let Some(o) = list_at(&c.options, i) {
            let o = strings(&o);
            if *o != **last_options {
                *last_options = o.into();
            }
        } else if !last_options.is_empty() {
            *last_options = Arc::new([]);
        }
        let chosen = chosen_at(&c.choices, i);
        let lists = lists_at(&c.fields, &c.items, i);
        let (s, e) = (nums_at(&c.starts, i), nums_at(&c.ends, i));
        out.push(Reference {
            item_id: str_at(&c.ids, i),
            video_id: str_at(&c.videos, i),
            options: last_options.clone(),
            choices: if chosen.is_empty() {
                single_choice(&str_at(&c.answer, i))
            } else {
                chosen
            },
            count: c
                .count
                .as_ref()
                .map(|c| c.as_primitive::<UInt32Type>())
                .filter(|c| c.is_valid(i))
                .map(|c| c.value(i)),
            ranges: s.iter().zip(&e).map(|(s, e)| [*s, *e]).collect(),
            text: str_at(&c.answer_text, i),
            label: str_at(&c.label, i),
            lists,
        });
    }
    Ok(())
}

/// Single choice stores the label shown ("C"; "7" past 26 options).
fn single_choice(a: &str) -> Vec<usize> {
    let a = a.trim();
    match a.parse::<usize>() {
        Ok(n) if n >= 1 => vec![n - 1],
        _ => a
            .bytes()
            .next()
            .map(|b| (b.to_ascii_uppercase().wrapping_sub(b'A')) as usize)
            .into_iter()
            .collect(),
    }
}
