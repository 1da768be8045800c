//! The `questions` config of a release: one row per kept item of the released videos, in the
//! split of its video, from the run's questions stage (and its blind stage's counts, and the
//! language stage's language, when they ran). Loadable with `load_dataset(DIR, "questions")`.
//!
//! Reads the questions, blind and language tables under their current fingerprints. Writes
//! `questions/<split>-00000-of-00001.parquet`. What the card says of it is `QuestionsWritten`.

use super::write_parquet;
use crate::benchmark::review::items::{
    ItemImportReport, ItemReview, read_report, read_reviews, rows_after,
};
use crate::error::RunError;
use crate::record::QuestionItem;
use crate::stages::questions::blind::BlindRow;
use crate::store::Store;
use crate::store::manifest::Manifest;
use crate::store::shards::read_table;
use arrow::datatypes::Schema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// One released item.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReleasedItem {
    pub video_id: String,
    pub item_id: String,
    pub level: String,
    pub question: String,
    pub options: Vec<String>,
    /// The correct option's letter (A for the first of `options`).
    pub answer: String,
    pub rationale: String,
    pub context_note: String,
    /// The video's language (`language` stage), when one ran.
    pub language: Option<String>,
    pub split: String,
    /// The blind stage's samples that named the right option, and its samples (text-only
    /// answers from the question and options alone), when one ran.
    pub blind_correct: Option<u32>,
    pub blind_samples: Option<u32>,
    /// What people made of it (`annotate import` of an item review): accepted, minor_edit or
    /// rewritten; none when the run's items were not reviewed.
    pub review: Option<String>,
}

/// What the card says of the questions config.
#[derive(Debug, Clone, Default)]
pub struct QuestionsWritten {
    pub stage: String,
    pub schema: Option<Arc<Schema>>,
    /// split → (items, Arrow bytes)
    pub sizes: Vec<(String, usize, usize)>,
    /// level → split → items, in the stage's level order.
    pub levels: Vec<(String, BTreeMap<String, usize>)>,
    /// language → items.
    pub languages: BTreeMap<String, usize>,
    /// The decided reviews of the released videos' items (none: not reviewed), and the kept
    /// items left out for want of a decision.
    pub decided: Vec<ItemReview>,
    pub unreviewed: usize,
    /// The review's own report (its agreement), when there was a review.
    pub report: Option<ItemImportReport>,
}

/// Writes the questions config of the released videos; none when the run has no questions
/// stage.
pub(super) async fn write_questions(
    store: &Arc<dyn Store>,
    m: &Manifest,
    languages: Option<&HashMap<String, String>>,
    order: &[String],
    by_split: &BTreeMap<String, Vec<String>>,
    out: &Path,
) -> Result<Option<QuestionsWritten>, RunError> {
    let kind = crate::stages::questions::KIND.name;
    let Some(q) = m.stages.iter().find(|s| s.kind == kind) else {
        return Ok(None);
    };
    let items: HashMap<String, Vec<QuestionItem>> = read_table(store, &q.id, &q.fingerprint, true)
        .await?
        .rows()?;
    let blind: HashMap<String, BlindRow> = rows_after(
        store,
        m,
        &q.id,
        crate::stages::questions::blind::KIND.name,
        |r: &BlindRow| r.item_id.clone(),
    )
    .await?;
    // With a review, the decided items replace the drafted ones; the rest stay out.
    let decided: HashMap<String, ItemReview> = read_reviews(store)
        .await?
        .into_iter()
        .filter(|r| r.annotator == "adjudicated")
        .map(|r| (r.item_id.clone(), r))
        .collect();
    let reviewed = !decided.is_empty();
    let mut w = QuestionsWritten {
        stage: q.id.clone(),
        report: if reviewed {
            read_report(store).await?
        } else {
            None
        },
        ..Default::default()
    };
    w.levels = level_order(&items, by_split);
    for split in order {
        let mut rows = vec![];
        for v in &by_split[split] {
            for it in items.get(v).into_iter().flatten().filter(|i| i.kept) {
                let language = languages.and_then(|l| l.get(v).cloned());
                let b = blind.get(&it.item_id);
                let mut row = released_item(it, v, split, language.clone(), b);
                if reviewed {
                    // A review of an earlier draft of this id is not a review of this one.
                    let Some(d) = decided.get(&it.item_id).filter(|d| d.is_of(it)) else {
                        w.unreviewed += 1;
                        continue;
                    };
                    w.decided.push(d.clone());
                    if d.decision == "reject" {
                        continue;
                    }
                    row.level = d.level.clone();
                    row.question = d.question.clone();
                    row.options = d.options.clone();
                    row.answer = d.answer.clone();
                    row.review = Some(d.edit_class.clone());
                }
                count_row(&mut w, &row, split, language);
                rows.push(row);
            }
        }
        write_split_rows(&mut w, split, &rows, out)?;
    }
    Ok(Some(w))
}

/// Levels in the stage's order (the taxonomy's): every video's rows, rejected ones too, come in
/// it, so the first released video with items names them all.
fn level_order(
    items: &HashMap<String, Vec<QuestionItem>>,
    by_split: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, BTreeMap<String, usize>)> {
    let mut levels: Vec<(String, BTreeMap<String, usize>)> = vec![];
    for it in by_split
        .values()
        .flatten()
        .flat_map(|v| items.get(v).into_iter().flatten())
    {
        if !levels.iter().any(|(l, _)| *l == it.level) {
            levels.push((it.level.clone(), BTreeMap::new()));
        }
    }
    levels
}

/// A kept item of `video` as released, as drafted (a review may change it after).
fn released_item(
    it: &QuestionItem,
    video: &str,
    split: &str,
    language: Option<String>,
    b: Option<&BlindRow>,
) -> ReleasedItem {
    ReleasedItem {
        video_id: video.to_string(),
        item_id: it.item_id.clone(),
        level: it.level.clone(),
        question: it.question.clone(),
        options: it.options.clone(),
        answer: it.answer.clone(),
        rationale: it.rationale.clone(),
        context_note: it.context_note.clone(),
        language,
        split: split.to_string(),
        blind_correct: b.map(|b| b.correct),
        blind_samples: b.map(|b| b.samples),
        review: None,
    }
}

/// Counts a released row under its level (a level not seen yet comes last) and split, and
/// under its language.
fn count_row(w: &mut QuestionsWritten, it: &ReleasedItem, split: &str, language: Option<String>) {
    let at = match w.levels.iter().position(|(l, _)| *l == it.level) {
        Some(i) => i,
        None => {
            w.levels.push((it.level.clone(), BTreeMap::new()));
            w.levels.len() - 1
        }
    };
    *w.levels[at].1.entry(split.to_string()).or_default() += 1;
    *w.languages
        .entry(language.unwrap_or_else(|| "(none)".into()))
        .or_default() += 1;
}

/// Writes one split's rows to `questions/` and notes their size and schema.
fn write_split_rows(
    w: &mut QuestionsWritten,
    split: &str,
    rows: &[ReleasedItem],
    out: &Path,
) -> Result<(), RunError> {
    let fields = crate::store::shards::fields_of::<ReleasedItem>()?;
    let batch = serde_arrow::to_record_batch(&fields, &rows)
        .map_err(|e| RunError::Internal(format!("questions rows: {e}")))?;
    let batch = super::rows::plain_batch(&batch)?;
    write_parquet(
        &out.join(format!("questions/{split}-00000-of-00001.parquet")),
        &batch,
    )?;
    w.sizes
        .push((split.to_string(), rows.len(), batch.get_array_memory_size()));
    w.schema.get_or_insert(batch.schema());
    Ok(())
}
