//! The released multiple-choice items (`questions/*.parquet`) as scoring reads them: those of
//! the split `evaluate` scores, and the ids of the others (a prediction for one is left out, not
//! an unknown item).

use super::Item;
use crate::error::RunError;
use crate::evaluation::split::Scope;
use crate::evaluation::{group_at, no_column, number, parquet_batches};
use arrow::array::{Array, Float64Array, ListArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// The released items of the split scored, the levels in their order of appearance (over every
/// split), and the ids of the items of other splits.
pub struct Released {
    pub items: Vec<Item>,
    pub order: Vec<String>,
    pub others: HashSet<String>,
}

/// The released items (`questions/*.parquet`) of the split `scope` scores.
pub fn read_items(release: &Path, by: Option<&str>, scope: &Scope) -> Result<Released, RunError> {
    let dir = release.join("questions");
    let files = crate::store::parquet_files_in(&dir).map_err(|e| {
        RunError::Config(format!(
            "{}: {e} (a release of a run with a questions stage has it)",
            dir.display()
        ))
    })?;
    let mut out = Released {
        items: vec![],
        order: vec![],
        others: HashSet::new(),
    };
    for f in files {
        let mut items = vec![];
        for b in parquet_batches(&f)? {
            batch_items(&b, &f, by, &mut items, &mut out.order)?;
        }
        if scope.keeps(&f) {
            for i in items {
                if scope.shares_item("questions", &i.item_id) {
                    out.items.push(i);
                } else {
                    out.others.insert(i.item_id);
                }
            }
        } else {
            out.others.extend(items.into_iter().map(|i| i.item_id));
        }
    }
    if out.items.is_empty() && out.others.is_empty() {
        return Err(RunError::Config(format!("{}: no items", dir.display())));
    }
    if out.items.is_empty() {
        return Err(RunError::Config(format!(
            "{}: no items in the {} split (--split all scores every split)",
            dir.display(),
            scope.split.as_deref().unwrap_or("all")
        )));
    }
    Ok(out)
}

/// The items of one batch of file `f`, appended to `items`; levels not yet in `order` are
/// appended to it.
fn batch_items(
    b: &RecordBatch,
    f: &Path,
    by: Option<&str>,
    items: &mut Vec<Item>,
    order: &mut Vec<String>,
) -> Result<(), RunError> {
    let text = |c: &str| crate::store::shards::text_column(b, c).ok_or_else(|| no_column(f, b, c));
    let (ids, videos, levels, questions, answers) = (
        text("item_id")?,
        text("video_id")?,
        text("level")?,
        text("question")?,
        text("answer")?,
    );
    let group = by.map(text).transpose()?;
    let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
    let options = b
        .column_by_name("options")
        .and_then(|c| arrow::compute::cast(c, &list).ok())
        .and_then(|c| c.as_any().downcast_ref::<ListArray>().cloned())
        .ok_or_else(|| RunError::Config(format!("{}: no list column `options`", f.display())))?;
    let blind = (number(b, "blind_correct"), number(b, "blind_samples"));
    for i in 0..b.num_rows() {
        let opts = options_at(&options, i, f)?;
        let answer = answer_index(answers.value(i), opts.len(), f, ids.value(i))?;
        let level = levels.value(i).to_string();
        if !order.contains(&level) {
            order.push(level.clone());
        }
        items.push(Item {
            item_id: ids.value(i).to_string(),
            video_id: videos.value(i).to_string(),
            level,
            question: questions.value(i).to_string(),
            options: opts,
            answer,
            group: group_at(group.as_ref(), i),
            blind: blind_share(&blind, i),
        });
    }
    Ok(())
}

/// Row `i`'s options as text.
fn options_at(options: &ListArray, i: usize, f: &Path) -> Result<Vec<String>, RunError> {
    let o = options.value(i);
    let o = o.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
        RunError::Config(format!("{}: `options` is not a list of text", f.display()))
    })?;
    Ok((0..o.len()).map(|k| o.value(k).to_string()).collect())
}

/// The index of the option the answer letter names; a letter naming none is an error.
fn answer_index(letter: &str, n: usize, f: &Path, item_id: &str) -> Result<usize, RunError> {
    letter
        .chars()
        .next()
        .and_then(|c| (c as usize).checked_sub('A' as usize))
        .filter(|&k| letter.len() == 1 && k < n)
        .ok_or_else(|| {
            RunError::Config(format!(
                "{}: item {item_id}: answer {letter:?} names none of its {n} options",
                f.display(),
            ))
        })
}

/// Row `i`'s blind-stage share of right samples, when the release has the counts.
fn blind_share(blind: &(Option<Float64Array>, Option<Float64Array>), i: usize) -> Option<f64> {
    match blind {
        (Some(c), Some(s)) if !c.is_null(i) && !s.is_null(i) && s.value(i) > 0.0 => {
            Some(c.value(i) / s.value(i))
        }
        _ => None,
    }
}
