//! The draft → refine → judge loop of MVFNDB's Figure 4, as a decision over stored rounds.
//!
//! Model A drafts an item (round 0); model B refines it (round 1); a judge scores the refined
//! item's factual consistency and logical rationality 0–5 with a reason for each. An item under
//! the threshold (default 4) in either goes back to model B with the judge's reasons, up to
//! `max_rounds` more times (default 2); then it is rejected with those reasons. Every round is
//! stored, so a new threshold is decided from the stored scores with no call (`rethreshold`);
//! only an item whose loop stopped early because it passed, and now fails, needs a run.
//!
//! Reads and writes nothing, calls nothing, caches nothing: the stage that calls the models
//! stores the rounds and asks `next` what to do after each judgment.

use crate::record::BenchItem;
use serde::{Deserialize, Serialize};

/// The loop's `select` settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopRule {
    /// Both scores must reach this (0–5).
    #[serde(default = "default_threshold")]
    pub min_score: u8,
    /// Refinements after the first judgment before an item is rejected.
    #[serde(default = "default_rounds")]
    pub max_rounds: u32,
}

fn default_threshold() -> u8 {
    4
}
fn default_rounds() -> u32 {
    2
}

impl Default for LoopRule {
    fn default() -> Self {
        Self {
            min_score: default_threshold(),
            max_rounds: default_rounds(),
        }
    }
}

/// A judge's scores of one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    pub factual_consistency: u8,
    pub factual_reason: String,
    pub logical_rationality: u8,
    pub logical_reason: String,
}

impl Judgment {
    pub fn passes(&self, min: u8) -> bool {
        self.factual_consistency >= min && self.logical_rationality >= min
    }

    /// What goes back to model B: the scores under the threshold with their reasons.
    pub fn reasons(&self, min: u8) -> String {
        let mut out = vec![];
        if self.factual_consistency < min {
            out.push(format!(
                "factual consistency {}/5: {}",
                self.factual_consistency, self.factual_reason
            ));
        }
        if self.logical_rationality < min {
            out.push(format!(
                "logical rationality {}/5: {}",
                self.logical_rationality, self.logical_reason
            ));
        }
        out.join("; ")
    }
}

/// One stored round: who wrote it, what, and (refinements) the judge's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub round: u32,
    /// `draft` (model A) or `refine` (model B).
    pub role: String,
    pub model: String,
    pub text: String,
    pub judgment: Option<Judgment>,
}

/// What the loop does next, or how it ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Model B refines, with these reasons (empty before the first judgment).
    Refine { reasons: String },
    /// The judge scores the last round.
    Judge,
    /// Kept: the round whose text is the item.
    Keep { round: u32 },
    /// Rejected after the last allowed round, with its reasons.
    Reject { reasons: String },
}

/// The next step of an item's loop from its stored rounds.
pub fn next(rounds: &[Round], rule: &LoopRule) -> Next {
    // Nothing stored yet, or the last round is model A's draft: model B refines it first.
    let Some(last) = rounds.last().filter(|r| r.role != "draft") else {
        return Next::Refine {
            reasons: String::new(),
        };
    };
    let Some(j) = &last.judgment else {
        return Next::Judge;
    };
    if j.passes(rule.min_score) {
        return Next::Keep { round: last.round };
    }
    let judged = rounds.iter().filter(|r| r.judgment.is_some()).count() as u32;
    let reasons = j.reasons(rule.min_score);
    if judged > rule.max_rounds {
        Next::Reject { reasons }
    } else {
        Next::Refine { reasons }
    }
}

/// A stored loop decided again under another rule, with no call.
#[derive(Debug, Clone, PartialEq)]
pub enum Reselected {
    Keep {
        round: u32,
    },
    Reject {
        reasons: String,
    },
    /// The loop stopped when an earlier rule kept it; this rule wants more rounds than were
    /// run: a run (not rethreshold) refines it.
    NeedsRounds,
}

pub fn reselect(rounds: &[Round], rule: &LoopRule) -> Reselected {
    let judged: Vec<(&Round, &Judgment)> = rounds
        .iter()
        .filter_map(|r| r.judgment.as_ref().map(|j| (r, j)))
        .collect();
    let allowed = (rule.max_rounds + 1) as usize;
    if let Some((r, _)) = judged
        .iter()
        .take(allowed)
        .find(|(_, j)| j.passes(rule.min_score))
    {
        return Reselected::Keep { round: r.round };
    }
    match judged.get(allowed - 1) {
        // Every allowed round was run and failed.
        Some((_, j)) => Reselected::Reject {
            reasons: j.reasons(rule.min_score),
        },
        // The loop ended earlier (kept under a milder rule, or rejected under fewer rounds).
        None => Reselected::NeedsRounds,
    }
}

/// Puts the rounds of a drafted item into its row's columns (`rounds_of` reads them back).
pub fn fill_row(row: &mut BenchItem, rounds: &[Round]) {
    for r in rounds {
        row.round_roles.push(r.role.clone());
        row.round_models.push(r.model.clone());
        row.round_texts.push(r.text.clone());
        let j = r.judgment.as_ref();
        row.round_factual.push(j.map(|j| j.factual_consistency));
        row.round_logical.push(j.map(|j| j.logical_rationality));
        row.round_factual_reasons
            .push(j.map(|j| j.factual_reason.clone()).unwrap_or_default());
        row.round_logical_reasons
            .push(j.map(|j| j.logical_reason.clone()).unwrap_or_default());
    }
}

/// The rounds stored in a row, as the loop had them (what `rethreshold` and `items` re-decide).
pub fn rounds_of(row: &BenchItem) -> Vec<Round> {
    (0..row.round_texts.len())
        .map(|i| {
            let at = |v: &Vec<String>| v.get(i).cloned().unwrap_or_default();
            let judgment = match (row.round_factual.get(i), row.round_logical.get(i)) {
                (Some(Some(f)), Some(Some(l))) => Some(Judgment {
                    factual_consistency: *f,
                    factual_reason: at(&row.round_factual_reasons),
                    logical_rationality: *l,
                    logical_reason: at(&row.round_logical_reasons),
                }),
                _ => None,
            };
            Round {
                round: i as u32,
                role: at(&row.round_roles),
                model: at(&row.round_models),
                text: at(&row.round_texts),
                judgment,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(round: u32, fc: u8, lr: u8) -> Round {
        Round {
            round,
            role: "refine".into(),
            model: "b".into(),
            text: format!("version {round}"),
            judgment: Some(Judgment {
                factual_consistency: fc,
                factual_reason: format!("fc reason {round}"),
                logical_rationality: lr,
                logical_reason: format!("lr reason {round}"),
            }),
        }
    }

    fn draft() -> Round {
        Round {
            round: 0,
            role: "draft".into(),
            model: "a".into(),
            text: "draft".into(),
            judgment: None,
        }
    }

    #[test]
    fn an_item_judged_3_is_refined_with_the_reasons_and_kept_at_4() {
        let rule = LoopRule::default();
        let first = Next::Refine {
            reasons: String::new(),
        };
        assert_eq!(next(&[], &rule), first);
        let mut rounds = vec![draft()];
        assert_eq!(next(&rounds, &rule), first);
        let mut unjudged = judged(1, 0, 0);
        unjudged.judgment = None;
        assert_eq!(next(&[draft(), unjudged], &rule), Next::Judge);
        rounds.push(judged(1, 3, 5));
        assert_eq!(
            next(&rounds, &rule),
            Next::Refine {
                reasons: "factual consistency 3/5: fc reason 1".into()
            }
        );
        rounds.push(judged(2, 4, 4));
        assert_eq!(next(&rounds, &rule), Next::Keep { round: 2 });
        assert_eq!(reselect(&rounds, &rule), Reselected::Keep { round: 2 });
    }

    #[test]
    fn an_item_that_never_reaches_4_is_rejected_after_the_last_round() {
        let rule = LoopRule::default();
        let rounds = vec![draft(), judged(1, 3, 2), judged(2, 2, 3), judged(3, 3, 3)];
        assert!(matches!(next(&rounds[..3], &rule), Next::Refine { .. }));
        assert_eq!(
            next(&rounds, &rule),
            Next::Reject {
                reasons:
                    "factual consistency 3/5: fc reason 3; logical rationality 3/5: lr reason 3"
                        .into()
            }
        );
        // A lower threshold keeps the first round that reaches it, with no call.
        let lower = LoopRule {
            min_score: 3,
            ..rule
        };
        assert_eq!(reselect(&rounds, &lower), Reselected::Keep { round: 3 });
        let lowest = LoopRule {
            min_score: 2,
            ..rule
        };
        assert_eq!(reselect(&rounds, &lowest), Reselected::Keep { round: 1 });
        // Fewer rounds allowed: only the first judgment counts.
        let one = LoopRule {
            max_rounds: 0,
            min_score: 3,
        };
        assert!(matches!(reselect(&rounds, &one), Reselected::Reject { .. }));
    }

    #[test]
    fn a_stricter_threshold_after_an_early_pass_needs_a_run() {
        let rule = LoopRule::default();
        let rounds = vec![draft(), judged(1, 4, 4)];
        assert_eq!(next(&rounds, &rule), Next::Keep { round: 1 });
        let strict = LoopRule {
            min_score: 5,
            ..rule
        };
        assert_eq!(reselect(&rounds, &strict), Reselected::NeedsRounds);
    }
}
