//! Agreement between annotators (Cohen's and Fleiss' kappa on the label, IoU of the risk-signal
//! spans) and the adjudication of a video several people annotated. Pure computation.

use super::*;
use crate::benchmark::review::Reviewed;
use std::collections::BTreeMap;

pub(super) fn iou(a: (f64, f64), b: (f64, f64)) -> f64 {
    let inter = (a.1.min(b.1) - a.0.max(b.0)).max(0.0);
    let union = (a.1 - a.0) + (b.1 - b.0) - inter;
    if union <= 0.0 { 0.0 } else { inter / union }
}

/// Agreement over the videos with two or more annotators.
pub(super) fn agreement(rows: &[Annotation], report: &mut ImportReport) {
    let mut by_video: BTreeMap<&str, Vec<&Annotation>> = BTreeMap::new();
    for r in rows {
        by_video.entry(r.video_id.as_str()).or_default().push(r);
    }
    let multi: Vec<&Vec<&Annotation>> = by_video.values().filter(|v| v.len() >= 2).collect();
    let mut annotators: Vec<&str> = multi
        .iter()
        .flat_map(|v| v.iter().map(|a| a.annotator.as_str()))
        .collect();
    annotators.sort_unstable();
    annotators.dedup();
    // Cohen's kappa for two annotators, Fleiss' for more, as reviews have it: on labels that
    // are yes or no (an import keeps no other), the same two-category kappa.
    let all: Vec<&Annotation> = rows.iter().collect();
    report.kappa = crate::benchmark::review::decision_kappa(&all, None).0;
    report.kappa_kind = match annotators.len() {
        2 => Some("cohen".into()),
        n if n > 2 => Some("fleiss".into()),
        _ => None,
    };
    let mut ious = vec![];
    for v in &multi {
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                if let (Some(s1), Some(e1), Some(s2), Some(e2)) = (
                    v[i].risk_signal_start,
                    v[i].risk_signal_end,
                    v[j].risk_signal_start,
                    v[j].risk_signal_end,
                ) {
                    ious.push(iou((s1, e1), (s2, e2)));
                }
            }
        }
    }
    report.span_pairs = ious.len();
    report.span_iou = (!ious.is_empty()).then(|| ious.iter().sum::<f64>() / ious.len() as f64);
}

/// The decided row of each video under `rule`.
pub(super) fn adjudicate(
    rows: &[Annotation],
    rule: &Rule,
    report: &mut ImportReport,
) -> Vec<Annotation> {
    let mut by_video: BTreeMap<&str, Vec<&Annotation>> = BTreeMap::new();
    for r in rows {
        by_video.entry(r.video_id.as_str()).or_default().push(r);
    }
    let mut out = vec![];
    for (video, anns) in by_video {
        let names = || {
            anns.iter()
                .map(|a| a.annotator.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let pick: Option<(&Annotation, String)> = match rule {
            Rule::Single => anns
                .iter()
                .max_by(|a, b| a.updated_at.cmp(&b.updated_at))
                .map(|a| (*a, format!("single: {}", a.annotator))),
            Rule::Reviewer(r) if anns.iter().any(|a| &a.annotator == r) => anns
                .iter()
                .find(|a| &a.annotator == r)
                .map(|a| (*a, format!("reviewer: {r}"))),
            _ => {
                let yes = anns.iter().filter(|a| a.risk_label == "yes").count();
                let no = anns.len() - yes;
                if yes == no {
                    report.ties.push(video.to_string());
                    None
                } else {
                    let label = if yes > no { "yes" } else { "no" };
                    anns.iter().find(|a| a.risk_label == label).map(|a| {
                        (
                            *a,
                            format!("majority {}-{} of {}", yes.max(no), yes.min(no), names()),
                        )
                    })
                }
            }
        };
        if let Some((a, how)) = pick {
            let mut d = a.clone();
            d.adjudicate(how);
            out.push(d);
        }
    }
    out
}
