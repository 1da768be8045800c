//! Prompt variants on a benchmark-task release (MVFNDB Table 4: MVFND-CoT and its CAC-, OSF-
//! and ALL- forms, `pipelines/tasks/mvfndb/variants/`): one predictions file per variant, the
//! final decision of every tagged-reasoning task (FDR) scored per variant and model as
//! accuracy and Macro-F1, and each variant's paired difference from the first one given.
//!
//! Standard errors: accuracy and its paired difference clustered by video (the mean's formula
//! in `benchmark::score`); Macro-F1 and its difference by the delete-one-video jackknife,
//! sqrt((G − 1) / G · Σ_g (θ₋g − θ̄)²), since F1 is not a mean over items.
//! Reads what `tasks::evaluate` reads, once per file; writes its report only; calls nothing.

use super::split::{Scope, SplitScored};
use super::tasks::{TaskScores, score_release};
use crate::benchmark::score::{Mean, clustered, clustered_mean, macro_f1};
use crate::error::RunError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One variant's (or difference's) decision scores for one model and task.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Decision {
    pub accuracy: Mean,
    pub macro_f1: f64,
    pub macro_f1_se: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VariantRow {
    pub task: String,
    pub model: String,
    pub variant: String,
    pub scores: Decision,
    /// Against the first variant, item by item (None for the first).
    pub difference: Option<Decision>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct VariantReport {
    /// The split scored (`other_predictions`: over every variant's file).
    pub split: SplitScored,
    pub variants: Vec<String>,
    pub rows: Vec<VariantRow>,
}

/// A `--variant` value that is not `NAME=FILE` (clap prints it as the flag's error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0:?}: expected NAME=FILE, e.g. mvfnd-cot=answers-cot.jsonl")]
pub struct BadVariant(String);

/// `NAME=FILE` of `--variant`.
pub fn parse_variant(s: &str) -> Result<(String, PathBuf), BadVariant> {
    match s.split_once('=') {
        Some((n, f)) if !n.trim().is_empty() && !f.trim().is_empty() => {
            Ok((n.trim().to_string(), PathBuf::from(f.trim())))
        }
        _ => Err(BadVariant(s.to_string())),
    }
}

/// Delete-one-group jackknife standard error of `stat` over the groups of `videos`.
fn jackknife(videos: &[&str], stat: impl Fn(&[bool]) -> f64) -> f64 {
    let mut groups: Vec<&str> = videos.to_vec();
    groups.sort_unstable();
    groups.dedup();
    let g = groups.len();
    if g < 2 {
        return 0.0;
    }
    let thetas: Vec<f64> = groups
        .iter()
        .map(|left_out| {
            let keep: Vec<bool> = videos.iter().map(|v| v != left_out).collect();
            stat(&keep)
        })
        .collect();
    let mean = thetas.iter().sum::<f64>() / g as f64;
    let ss: f64 = thetas.iter().map(|t| (t - mean) * (t - mean)).sum();
    ((g as f64 - 1.0) / g as f64 * ss).sqrt()
}

/// Macro-F1 of a task's decisions over the items `keep` marks.
fn f1(t: &TaskScores, keep: &[bool]) -> f64 {
    let pairs: Vec<(&str, Option<&str>)> = t
        .items
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(i, _)| (i.truth.as_str(), i.label.as_deref()))
        .collect();
    macro_f1(&pairs, &t.labels)
}

/// Accuracy and Macro-F1 of one variant's decisions on one task (items in release order).
fn decision(t: &TaskScores, keep_all: &[bool]) -> Decision {
    let f1_of = |keep: &[bool]| f1(t, keep);
    let videos: Vec<&str> = t.items.iter().map(|i| i.video_id.as_str()).collect();
    let acc: Vec<(&str, f64)> = t
        .items
        .iter()
        .map(|i| (i.video_id.as_str(), i.accuracy))
        .collect();
    Decision {
        accuracy: clustered_mean(&acc),
        macro_f1: f1_of(keep_all),
        macro_f1_se: jackknife(&videos, f1_of),
    }
}

/// The paired difference of `b` minus `a` (the same items, in the same order).
fn difference(a: &TaskScores, b: &TaskScores) -> Decision {
    let n = a.items.len();
    let d: Vec<f64> = a
        .items
        .iter()
        .zip(&b.items)
        .map(|(x, y)| y.accuracy - x.accuracy)
        .collect();
    let mean = d.iter().sum::<f64>() / n.max(1) as f64;
    let w: Vec<(&str, f64)> = a
        .items
        .iter()
        .zip(&d)
        .map(|(i, v)| (i.video_id.as_str(), (v - mean) / n as f64))
        .collect();
    let (se, videos) = clustered(&w);
    let all = vec![true; n];
    let videos_of: Vec<&str> = a.items.iter().map(|i| i.video_id.as_str()).collect();
    Decision {
        accuracy: Mean {
            n,
            mean,
            se,
            videos,
        },
        macro_f1: f1(b, &all) - f1(a, &all),
        macro_f1_se: jackknife(&videos_of, |k| f1(b, k) - f1(a, k)),
    }
}

/// Scores every variant's file on the split `scope` scores; the decisions of each
/// tagged-reasoning task per model.
pub fn evaluate(
    release: &Path,
    variants: &[(String, PathBuf)],
    scope: &Scope,
) -> Result<VariantReport, RunError> {
    if let Some(i) =
        (0..variants.len()).find(|i| variants[..*i].iter().any(|v| v.0 == variants[*i].0))
    {
        return Err(RunError::Config(format!(
            "--variant {}: named twice",
            variants[i].0
        )));
    }
    // variant → model → task → scores
    let mut all: Vec<BTreeMap<String, Vec<TaskScores>>> = vec![];
    let mut split = SplitScored::default();
    for (_, file) in variants {
        let (scores, scored) = score_release(release, file, scope)?;
        let other = split.other_predictions + scored.other_predictions;
        split = SplitScored {
            other_predictions: other,
            ..scored
        };
        all.push(scores);
    }
    let mut rep = VariantReport {
        split,
        variants: variants.iter().map(|v| v.0.clone()).collect(),
        rows: vec![],
    };
    let models: Vec<String> = all
        .iter()
        .flat_map(|m| m.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for model in &models {
        let Some(first) = all[0].get(model) else {
            continue;
        };
        for (ti, base) in first.iter().enumerate() {
            for (vi, (name, _)) in variants.iter().enumerate() {
                let Some(t) = all[vi].get(model).and_then(|ts| ts.get(ti)) else {
                    continue;
                };
                let keep = vec![true; t.items.len()];
                rep.rows.push(VariantRow {
                    task: t.task.clone(),
                    model: model.clone(),
                    variant: name.clone(),
                    scores: decision(t, &keep),
                    difference: (vi > 0).then(|| difference(base, t)),
                });
            }
        }
    }
    Ok(rep)
}

/// Table 4's shape: one line per task and model, ACC and M-F1 per variant; then the paired
/// differences from the first variant with their standard errors.
pub fn render(r: &VariantReport) -> String {
    let width = |v: &str| (v.len() + 12).max(15);
    let mut s = r.split.line();
    s += &format!("{:<6} {:<20}", "task", "model");
    for v in &r.variants {
        s += &format!(" {:>w$}", format!("{v} ACC / M-F1"), w = width(v));
    }
    s += "\n";
    let mut keys: Vec<(&str, &str)> = r
        .rows
        .iter()
        .map(|x| (x.task.as_str(), x.model.as_str()))
        .collect();
    keys.dedup();
    for (task, model) in &keys {
        s += &format!("{task:<6} {model:<20}");
        for v in &r.variants {
            let cell = r
                .rows
                .iter()
                .find(|x| x.task == *task && x.model == *model && &x.variant == v)
                .map_or("-".to_string(), |x| {
                    format!(
                        "{:.2} / {:.2}",
                        100.0 * x.scores.accuracy.mean,
                        100.0 * x.scores.macro_f1
                    )
                });
            s += &format!(" {cell:>w$}", w = width(v));
        }
        s += "\n";
    }
    s += &format!(
        "\npaired differences from {} (points; ± standard error: accuracy clustered by video, Macro-F1 by the delete-one-video jackknife):\n",
        r.variants.first().map_or("", String::as_str)
    );
    for x in r.rows.iter().filter(|x| x.difference.is_some()) {
        let d = x.difference.as_ref().expect("filtered");
        s += &format!(
            "  {:<6} {:<20} {:<18} ACC {:+.2} ± {:.2}   M-F1 {:+.2} ± {:.2}   ({} items, {} videos)\n",
            x.task,
            x.model,
            x.variant,
            100.0 * d.accuracy.mean,
            100.0 * d.accuracy.se,
            100.0 * d.macro_f1,
            100.0 * d.macro_f1_se,
            d.accuracy.n,
            d.accuracy.videos
        );
    }
    s
}
