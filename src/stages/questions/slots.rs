//! A questions answer's items put into their (level, k) slots and checked, and the rows made
//! of them.

use super::items::{self, Draft, ItemProblems};
use super::{QuestionsStage, cut_text};
use crate::record::{QuestionItem, VideoRecord};
use crate::stages::structured::SchemaProblem;

/// One slot (level, k) of a video's items after an answer: the draft and its check.
pub(super) struct Slotted {
    draft: Option<Draft>,
    checked: Result<usize, ItemProblems>,
}

impl QuestionsStage {
    /// An answer's items put into the (level, k) slots, each checked; items beyond a level's
    /// `per_level` are dropped and named.
    pub(super) fn slot(
        &self,
        text: &str,
        frames: usize,
    ) -> Result<(Vec<Slotted>, Vec<String>), SchemaProblem> {
        let v = self.call.check(text)?;
        let drafts: Vec<Draft> = serde_json::from_value(v["items"].clone())
            .map_err(|e| SchemaProblem::Breaks(format!("the items do not read: {e}")))?;
        let n = self.cfg.per_level;
        let mut slots: Vec<Slotted> = (0..self.taxonomy.levels.len() * n)
            .map(|_| Slotted {
                draft: None,
                checked: Err(ItemProblems::one("not_drafted", "not drafted")),
            })
            .collect();
        let mut notes = vec![];
        for d in drafts {
            let checked = items::check(&d, &self.taxonomy, frames, &self.rules);
            let li = self.taxonomy.levels.iter().position(|l| l.name == d.level);
            let free = li.and_then(|li| (li * n..li * n + n).find(|&s| slots[s].draft.is_none()));
            match (li, free) {
                (Some(_), Some(s)) => {
                    slots[s] = Slotted {
                        draft: Some(d),
                        checked,
                    }
                }
                (Some(_), None) => notes.push(format!(
                    "more than {n} {} items: the extra ones are dropped",
                    d.level
                )),
                (None, _) => notes.push(checked.err().map(|e| e.to_string()).unwrap_or_default()),
            }
        }
        Ok((slots, notes))
    }

    /// What the repair request says: each failing item and each missing one.
    pub(super) fn problems(&self, slots: &[Slotted], notes: &[String]) -> Vec<String> {
        let n = self.cfg.per_level;
        let mut out: Vec<String> = notes.to_vec();
        for (s, slot) in slots.iter().enumerate() {
            let level = &self.taxonomy.levels[s / n].name;
            match (&slot.draft, &slot.checked) {
                (None, _) => out.push(format!("a {level} item is missing")),
                (Some(d), Err(why)) => out.push(format!(
                    "the {level} item {:?}: {why}",
                    cut_text(&d.question, 80)
                )),
                _ => {}
            }
        }
        out
    }

    /// The rows of one video's items: the last valid draft of each slot, shuffled; a slot with
    /// none is a rejected row with the reason.
    pub(super) fn rows(
        &self,
        rec: &VideoRecord,
        first: &[Slotted],
        last: &[Slotted],
        attempts: u32,
    ) -> Vec<QuestionItem> {
        let n = self.cfg.per_level;
        let mut rows: Vec<QuestionItem> = (0..first.len())
            .map(|s| {
                let level = self.taxonomy.levels[s / n].name.clone();
                let k = s % n;
                let item_id = items::item_id(&rec.video_id, &level, k);
                let pick = [&last[s], &first[s]]
                    .into_iter()
                    .find(|x| x.checked.is_ok())
                    .unwrap_or(&last[s]);
                self.row(item_id, level, k, pick, attempts)
            })
            .collect();
        let questions: Vec<&str> = rows.iter().map(|r| r.question.as_str()).collect();
        let skip: Vec<bool> = rows.iter().map(|r| !r.kept).collect();
        let near = items::nearest_earlier(&questions, &skip);
        for (i, near) in near.into_iter().enumerate() {
            if let Some((j, sim)) = near {
                rows[i].nearest_item = rows[j].item_id.clone();
                rows[i].nearest_similarity = sim;
                rows[i].near_duplicate = self.select.duplicate(sim);
            }
        }
        rows
    }

    fn row(
        &self,
        item_id: String,
        level: String,
        k: usize,
        pick: &Slotted,
        attempts: u32,
    ) -> QuestionItem {
        let d = pick.draft.clone().unwrap_or(Draft {
            level: level.clone(),
            ..Default::default()
        });
        let reject_codes = pick
            .checked
            .as_ref()
            .err()
            .map(|e| e.codes())
            .unwrap_or_default();
        let (options, answer, permutation, kept, reject_reason) = match &pick.checked {
            Ok(correct) => {
                let perm = items::permutation(&item_id, d.options.len());
                let shown: Vec<String> = perm
                    .iter()
                    .map(|&p| d.options[p as usize].clone())
                    .collect();
                let at = perm
                    .iter()
                    .position(|&p| p as usize == *correct)
                    .expect("a permutation");
                (shown, items::letter(at), perm, true, String::new())
            }
            Err(why) => (
                d.options.clone(),
                d.answer.clone(),
                vec![],
                false,
                why.to_string(),
            ),
        };
        QuestionItem {
            item_id,
            level,
            k: k as u32,
            question: d.question,
            options,
            answer,
            permutation,
            evidence_frames: d.evidence.frames,
            evidence_start_secs: d.evidence.start_secs,
            evidence_end_secs: d.evidence.end_secs,
            evidence_transcript: d.evidence.transcript,
            rationale: d.rationale,
            context_note: d.context_note,
            kept,
            reject_reason,
            reject_codes,
            attempts,
            provider: self.call.svc.name.clone(),
            model: self.call.model.clone(),
            ..Default::default()
        }
    }
}
