//! The judged metrics of one task (MVFNDB B.3), from the judge's verdicts: a hit rate per item
//! (the judged reference elements the answer states, over those judged), then the mean over
//! items; each 0–5 rating per item, then the mean. An answer that is missing or cannot be read
//! is wrong without a call (hit rate 0, ratings 0); an item whose every element stayed unjudged
//! is left out of the mean and counted. With two samples, the judge's agreement with itself:
//! Cohen's kappa on hit / miss, Krippendorff's alpha (interval) on each rating.

use super::judge::{Ask, Judge, RATINGS, Verdict};
use crate::benchmark::formats::{Answer, Format};
use crate::benchmark::review::kappa::{cohen_kappa, krippendorff_alpha_interval};
use crate::benchmark::score::{ItemScore, Reference};
use crate::error::RunError;
use futures::StreamExt;
use std::collections::BTreeMap;

/// What one task's judged metrics came to.
#[derive(Debug, Clone, Default)]
pub struct Judged {
    /// metric → (video, item value) of the items it scores.
    pub values: BTreeMap<String, Vec<(String, f64)>>,
    /// metric → items left out: no element of theirs could be judged.
    pub unjudged_items: BTreeMap<String, usize>,
    /// Judgments that stayed unjudged (after the repair), by reason.
    pub unjudged: BTreeMap<String, usize>,
    /// metric → the judge's agreement with itself over two samples.
    pub self_agreement: BTreeMap<String, f64>,
    pub calls: usize,
    /// Every verdict, for comparing the judge with people (`people.rs`).
    pub verdicts: Verdicts,
}

/// The text the judge reads of an answer: a tagged answer's reasoning, else the text; None
/// for an answer that is missing or unread.
pub(super) fn judged_text(s: &ItemScore) -> Option<String> {
    match &s.answer {
        Some(Answer::Text(t)) => Some(t.clone()),
        Some(Answer::Tagged { think, .. }) => Some(think.clone()),
        _ => None,
    }
}

/// The reference a rating compares with: the text, or the lists' items one per line.
pub(super) fn reference_text(r: &Reference) -> String {
    if r.text.is_empty() {
        crate::benchmark::score::reference_text(Format::ReferenceList, r)
    } else {
        r.text.clone()
    }
}

/// The reference elements a `hit_rate.<list>` metric judges: the first list of that name
/// (None for another metric, or a list the reference lacks).
pub(super) fn hit_elements<'r>(metric: &str, r: &'r Reference) -> Option<&'r [String]> {
    let field = metric.strip_prefix("hit_rate.")?;
    r.lists
        .iter()
        .find(|(f, _)| f == field)
        .map(|(_, items)| items.as_slice())
}

/// The judgments an item needs: (metric, element index or None for the ratings, ask).
fn asks(metrics: &[String], r: &Reference) -> Vec<(String, Option<usize>, Ask)> {
    let mut out = vec![];
    for m in metrics {
        for (k, e) in hit_elements(m, r).unwrap_or_default().iter().enumerate() {
            out.push((m.clone(), Some(k), Ask::Hit { element: e.clone() }));
        }
    }
    let ratings: Vec<String> = metrics
        .iter()
        .filter(|m| RATINGS.contains(&m.as_str()))
        .cloned()
        .collect();
    if !ratings.is_empty() {
        out.push((
            "ratings".into(),
            None,
            Ask::Ratings {
                metrics: ratings,
                reference: reference_text(r),
            },
        ));
    }
    out
}

/// Every call a task's judged metrics need (what the dry run prices).
pub fn planned(metrics: &[String], refs: &[Reference], scores: &[ItemScore]) -> Vec<(Ask, String)> {
    refs.iter()
        .zip(scores)
        .filter_map(|(r, s)| Some((r, judged_text(s)?)))
        .flat_map(|(r, text)| {
            asks(metrics, r)
                .into_iter()
                .map(move |(_, _, a)| (a, text.clone()))
        })
        .collect()
}

/// Judges a task's answers and makes its judged metrics.
pub async fn judge_task(
    judge: &Judge,
    metrics: &[String],
    refs: &[Reference],
    scores: &[ItemScore],
) -> Result<Judged, RunError> {
    let samples = judge.settings.samples;
    // (item, metric, element, sample) → the job's ask and answer.
    let mut jobs = vec![];
    for (i, (r, s)) in refs.iter().zip(scores).enumerate() {
        let Some(text) = judged_text(s) else { continue };
        for (m, k, ask) in asks(metrics, r) {
            for sample in 0..samples {
                jobs.push(((i, m.clone(), k, sample), ask.clone(), text.clone()));
            }
        }
    }
    let mut out = Judged {
        calls: jobs.len(),
        ..Default::default()
    };
    let results: Vec<_> =
        futures::stream::iter(jobs.into_iter().map(|(key, ask, text)| async move {
            judge.judge(&ask, &text, key.3).await.map(|v| (key, v))
        }))
        .buffer_unordered(judge.settings.in_flight.max(1))
        .collect()
        .await;
    let mut verdicts = Verdicts::new();
    for r in results {
        let (key, v) = r?;
        if let Verdict::Unjudged(why) = &v {
            let code = why.split(':').next().unwrap_or("unjudged").to_string();
            *out.unjudged.entry(code).or_default() += 1;
        }
        verdicts.insert(key, v);
    }
    item_values(metrics, refs, scores, &verdicts, &mut out);
    if samples > 1 {
        out.self_agreement = agreement(metrics, &verdicts);
    }
    out.verdicts = verdicts;
    Ok(out)
}

/// (item index in release order, metric or "ratings", element, sample) → the verdict.
pub(super) type Verdicts = BTreeMap<(usize, String, Option<usize>, u32), Verdict>;

fn item_values(
    metrics: &[String],
    refs: &[Reference],
    scores: &[ItemScore],
    v: &Verdicts,
    out: &mut Judged,
) {
    for (i, (r, s)) in refs.iter().zip(scores).enumerate() {
        let read = judged_text(s).is_some();
        for m in metrics {
            let value = if m.starts_with("hit_rate.") {
                let n = hit_elements(m, r).map_or(0, <[String]>::len);
                if !read {
                    Some(0.0)
                } else {
                    let hits: Vec<bool> = (0..n)
                        .filter_map(|k| match v.get(&(i, m.clone(), Some(k), 0)) {
                            Some(Verdict::Hit(h)) => Some(*h),
                            _ => None,
                        })
                        .collect();
                    (!hits.is_empty())
                        .then(|| hits.iter().filter(|h| **h).count() as f64 / hits.len() as f64)
                }
            } else if RATINGS.contains(&m.as_str()) {
                if !read {
                    Some(0.0)
                } else {
                    match v.get(&(i, "ratings".to_string(), None, 0)) {
                        Some(Verdict::Ratings(x)) => x.get(m).map(|r| f64::from(*r)),
                        _ => None,
                    }
                }
            } else {
                continue;
            };
            match value {
                Some(x) => out
                    .values
                    .entry(m.clone())
                    .or_default()
                    .push((r.video_id.clone(), x)),
                None => *out.unjudged_items.entry(m.clone()).or_default() += 1,
            }
        }
    }
}

fn agreement(metrics: &[String], v: &Verdicts) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for m in metrics {
        let pairs: Vec<(String, String)> = v
            .iter()
            .filter(|((_, mm, _, s), _)| mm == m && *s == 0)
            .filter_map(
                |((i, mm, k, _), a)| match (a, v.get(&(*i, mm.clone(), *k, 1))) {
                    (Verdict::Hit(x), Some(Verdict::Hit(y))) => {
                        Some((x.to_string(), y.to_string()))
                    }
                    _ => None,
                },
            )
            .collect();
        if !pairs.is_empty() {
            let (a, b): (Vec<&str>, Vec<&str>) =
                pairs.iter().map(|(x, y)| (x.as_str(), y.as_str())).unzip();
            if let Some(k) = cohen_kappa(&a, &b) {
                out.insert(m.clone(), k);
            }
        }
        if RATINGS.contains(&m.as_str()) {
            let pairs: Vec<(f64, f64)> = v
                .iter()
                .filter(|((_, mm, _, s), _)| mm == "ratings" && *s == 0)
                .filter_map(
                    |((i, mm, k, _), a)| match (a, v.get(&(*i, mm.clone(), *k, 1))) {
                        (Verdict::Ratings(x), Some(Verdict::Ratings(y))) => {
                            Some((f64::from(*x.get(m)?), f64::from(*y.get(m)?)))
                        }
                        _ => None,
                    },
                )
                .collect();
            if let Some(a) = krippendorff_alpha_interval(&pairs) {
                out.insert(m.clone(), a);
            }
        }
    }
    out
}
