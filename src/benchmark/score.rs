//! Scoring a task's answers (MVFNDB B.3), format by format: each prediction read by its
//! format's own parser (`formats::Format::parse`, the one that checked the drafts), then the
//! metrics that need no judge, and the means with standard errors clustered by video. Pure
//! computation: `evaluate` reads the release and the predictions, and prints.
//!
//! - single choice: accuracy (the chosen option is the right one);
//! - multiple choice: exact-set accuracy and the per-item Jaccard of chosen and right options;
//! - count: the absolute distance |predicted − reference| (B.3's AD);
//! - time ranges: IoU of the union of the predicted ranges with the union of the reference
//!   ranges, |∪P ∩ ∪R| / |∪P ∪ ∪R| (B.3 writes one range each; several are merged first, so
//!   overlapping predictions are not counted twice and order does not matter);
//! - ROUGE-L F-measure (reference lists: against their items joined one per line; open text:
//!   against the reference text; tagged reasoning: the `<think>` part against the reference
//!   reasoning), tokenised as the `rouge-score` package does for English (lower case, runs of
//!   ASCII letters and digits, no stemming) and, beyond it, each CJK character one token;
//! - tagged reasoning: accuracy of the `<result>` label and Macro-F1 over the task's labels.
//!
//! A prediction its format cannot read (no option, a word for a count, a reversed range, no
//! `<result>` tag) is wrong and stays in the denominator: accuracy, Jaccard, IoU and ROUGE-L 0,
//! a count read as 0, a missing label a class of its own that is never right. A missing
//! prediction is scored the same way and counted apart.

use super::formats::{Answer, AnswerContext, Format};
use serde::Serialize;
use std::collections::HashMap;

/// One released item's reference, as scoring reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reference {
    pub item_id: String,
    pub video_id: String,
    /// Shared: the items of a task often show the same options.
    pub options: std::sync::Arc<[String]>,
    /// The right options' indices (one for single choice).
    pub choices: Vec<usize>,
    pub count: Option<u32>,
    pub ranges: Vec<[f64; 2]>,
    /// Open text, or a tagged answer's reasoning.
    pub text: String,
    /// A tagged answer's right label.
    pub label: String,
    /// Reference lists (name, items), in the task's order.
    pub lists: Vec<(String, Vec<String>)>,
}

/// How a prediction was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Read,
    /// The format's parser refused it (the problem's code is kept).
    Unread,
    Missing,
}

/// One item's scores: metric name → value, and how its prediction was read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemScore {
    pub item_id: String,
    pub video_id: String,
    pub status: Status,
    /// The parser's code for an unread prediction.
    pub problem: String,
    pub values: Values,
    /// Tagged reasoning: the predicted label (None: no readable `<result>`).
    pub label: Option<String>,
    /// The answer as its format read it (None: unread or missing).
    pub answer: Option<Answer>,
}

/// An item's metric values, by name: at most two (`computed`), kept inline and in name order
/// (serialized as a map, as a `BTreeMap` was). At a million items a map each was a third of
/// `evaluate`'s memory.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Values {
    pairs: [(&'static str, f64); 2],
    len: u8,
}

impl Values {
    /// Sets `name`'s value, keeping the names in order.
    ///
    /// Panics past two names: no format computes more (`computed`).
    pub fn insert(&mut self, name: &'static str, value: f64) {
        let n = usize::from(self.len);
        if let Some(p) = self.pairs[..n].iter_mut().find(|p| p.0 == name) {
            p.1 = value;
            return;
        }
        assert!(n < self.pairs.len(), "an item has at most two metrics");
        self.pairs[n] = (name, value);
        self.len += 1;
        self.pairs[..=n].sort_by(|a, b| a.0.cmp(b.0));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.pairs[..usize::from(self.len)].iter().copied()
    }
}

impl std::ops::Index<&str> for Values {
    type Output = f64;

    fn index(&self, name: &str) -> &f64 {
        let n = usize::from(self.len);
        match self.pairs[..n].iter().find(|p| p.0 == name) {
            Some(p) => &p.1,
            None => panic!("no metric {name:?} for this item"),
        }
    }
}

impl Serialize for Values {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(usize::from(self.len)))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// The metrics `score_item` computes for a format (the judged ones are not among them).
pub fn computed(format: Format) -> &'static [&'static str] {
    match format {
        Format::SingleChoice => &["accuracy"],
        Format::MultipleChoice => &["accuracy", "jaccard"],
        Format::Count => &["abs_distance"],
        Format::TimeRanges => &["mean_iou"],
        Format::ReferenceList | Format::OpenText => &["rouge_l"],
        Format::TaggedReasoning => &["accuracy", "rouge_l"],
    }
}

/// Scores one prediction (None: the item has none).
pub fn score_item(
    format: Format,
    r: &Reference,
    labels: &[String],
    prediction: Option<&str>,
) -> ItemScore {
    let cx = AnswerContext {
        options: &r.options,
        duration_secs: None,
        labels,
    };
    let (status, problem, answer) = match prediction {
        None => (Status::Missing, String::new(), None),
        Some(p) => match format.parse(&serde_json::Value::String(p.to_string()), &cx) {
            Ok(a) => (Status::Read, String::new(), Some(a)),
            Err(e) => (Status::Unread, e.code.to_string(), None),
        },
    };
    let (values, label) = metric_values(format, r, &answer);
    ItemScore {
        item_id: r.item_id.clone(),
        video_id: r.video_id.clone(),
        status,
        problem,
        values,
        label,
        answer,
    }
}

/// The text a prediction's ROUGE-L is measured against: a reference list's items one per line,
/// else the reference text.
pub(crate) fn reference_text(format: Format, r: &Reference) -> String {
    match format {
        Format::ReferenceList => r
            .lists
            .iter()
            .flat_map(|(_, items)| items.iter().cloned())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => r.text.clone(),
    }
}

/// The format's metrics for one read answer (None: unread or missing), and the label a tagged
/// answer gave.
fn metric_values(
    format: Format,
    r: &Reference,
    answer: &Option<Answer>,
) -> (Values, Option<String>) {
    let mut values = Values::default();
    let mut label = None;
    let reference_text = || reference_text(format, r);
    match (format, answer) {
        (Format::SingleChoice, a) => {
            let right = matches!(a, Some(Answer::Choice(i)) if r.choices == [*i]);
            values.insert("accuracy", f64::from(u8::from(right)));
        }
        (Format::MultipleChoice, a) => {
            let chosen: Vec<usize> = match a {
                Some(Answer::Choices(c)) => c.clone(),
                _ => vec![],
            };
            let (acc, jac) = set_scores(&chosen, &r.choices);
            values.insert("accuracy", acc);
            values.insert("jaccard", jac);
        }
        (Format::Count, a) => {
            let p = match a {
                Some(Answer::Count(c)) => *c,
                _ => 0,
            };
            let d = r.count.unwrap_or(0);
            values.insert("abs_distance", f64::from(p.abs_diff(d)));
        }
        (Format::TimeRanges, a) => {
            let iou = match a {
                Some(Answer::Ranges(p)) => union_iou(p, &r.ranges),
                _ => 0.0,
            };
            values.insert("mean_iou", iou);
        }
        (Format::ReferenceList | Format::OpenText, a) => {
            let text = match a {
                Some(Answer::Text(t)) => t.as_str(),
                _ => "",
            };
            values.insert("rouge_l", rouge_l(&reference_text(), text));
        }
        (Format::TaggedReasoning, a) => {
            let (think, result) = match a {
                Some(Answer::Tagged { think, result }) => (think.as_str(), Some(result.clone())),
                _ => ("", None),
            };
            let right = result.as_deref() == Some(r.label.as_str());
            values.insert("accuracy", f64::from(u8::from(right)));
            values.insert("rouge_l", rouge_l(&reference_text(), think));
            label = result;
        }
    }
    (values, label)
}

/// Exact-set accuracy and Jaccard of two sets of options (an empty prediction scores 0).
fn set_scores(chosen: &[usize], right: &[usize]) -> (f64, f64) {
    let mut a = chosen.to_vec();
    let mut b = right.to_vec();
    a.sort_unstable();
    a.dedup();
    b.sort_unstable();
    b.dedup();
    let inter = a.iter().filter(|x| b.contains(x)).count();
    let union = a.len() + b.len() - inter;
    let jac = if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    };
    (f64::from(u8::from(!a.is_empty() && a == b)), jac)
}

/// Ranges merged where they overlap or touch, in order.
fn merged(ranges: &[[f64; 2]]) -> Vec<[f64; 2]> {
    let mut v: Vec<[f64; 2]> = ranges.iter().copied().filter(|[s, e]| e > s).collect();
    v.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let mut out: Vec<[f64; 2]> = vec![];
    for [s, e] in v {
        match out.last_mut() {
            Some(last) if s <= last[1] => last[1] = last[1].max(e),
            _ => out.push([s, e]),
        }
    }
    out
}

fn length(ranges: &[[f64; 2]]) -> f64 {
    ranges.iter().map(|[s, e]| e - s).sum()
}

/// |∪P ∩ ∪R| / |∪P ∪ ∪R| (0 when both are empty).
pub fn union_iou(predicted: &[[f64; 2]], reference: &[[f64; 2]]) -> f64 {
    let (p, r) = (merged(predicted), merged(reference));
    let mut inter = 0.0;
    for [ps, pe] in &p {
        for [rs, re] in &r {
            inter += (pe.min(*re) - ps.max(*rs)).max(0.0);
        }
    }
    let union = length(&p) + length(&r) - inter;
    if union <= 0.0 { 0.0 } else { inter / union }
}

/// Whether `c` is a CJK ideograph, kana or hangul syllable: one token each.
fn cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF
        | 0xAC00..=0xD7AF | 0x20000..=0x2FA1F)
}

/// Tokens as `rouge-score` makes them for English (lower case; runs of ASCII letters and
/// digits; everything else separates), and each CJK character one token.
pub fn rouge_tokens(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut word = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if cjk(c) {
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// ROUGE-L F-measure of a prediction against a reference (longest common subsequence of tokens).
pub fn rouge_l(reference: &str, prediction: &str) -> f64 {
    let (r, p) = (rouge_tokens(reference), rouge_tokens(prediction));
    if r.is_empty() || p.is_empty() {
        return 0.0;
    }
    let mut prev = vec![0usize; p.len() + 1];
    for a in &r {
        let mut cur = vec![0usize; p.len() + 1];
        for (j, b) in p.iter().enumerate() {
            cur[j + 1] = if a == b {
                prev[j] + 1
            } else {
                cur[j].max(prev[j + 1])
            };
        }
        prev = cur;
    }
    let lcs = prev[p.len()] as f64;
    let (precision, recall) = (lcs / p.len() as f64, lcs / r.len() as f64);
    if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    }
}

/// A mean over items, its standard error clustered by video, the items and the videos.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Mean {
    pub n: usize,
    pub mean: f64,
    pub se: f64,
    pub videos: usize,
}

/// The mean of `values` (video, value) with sqrt(G / (G − 1) · Σ_g (Σ_{i∈g} (y_i − ȳ) / n)²)
/// over the videos g as its standard error (0 with fewer than two videos).
pub fn clustered_mean(values: &[(&str, f64)]) -> Mean {
    let n = values.len();
    if n == 0 {
        return Mean::default();
    }
    let mean = values.iter().map(|(_, v)| v).sum::<f64>() / n as f64;
    let w: Vec<(&str, f64)> = values
        .iter()
        .map(|(g, v)| (*g, (v - mean) / n as f64))
        .collect();
    let (se, videos) = clustered(&w);
    Mean {
        n,
        mean,
        se,
        videos,
    }
}

/// sqrt(G / (G − 1) · Σ_g (Σ_{i∈g} w_i)²) over the groups g, and G: the clustered standard
/// error of a statistic whose influence on item i is w_i.
pub fn clustered(w: &[(&str, f64)]) -> (f64, usize) {
    let mut sums: HashMap<&str, f64> = HashMap::new();
    for (g, v) in w {
        *sums.entry(g).or_default() += v;
    }
    let g = sums.len();
    if g < 2 {
        return (0.0, g);
    }
    // Summed in the groups' order, so that the same predictions give the same last digit.
    let mut sums: Vec<(&str, f64)> = sums.into_iter().collect();
    sums.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let ss: f64 = sums.iter().map(|(_, e)| e * e).sum();
    ((g as f64 / (g as f64 - 1.0) * ss).sqrt(), g)
}

/// Macro-F1 over `labels` of (right label, predicted label); a prediction without a label is
/// wrong for its item and no label's false positive. A label with no item and no prediction is
/// left out of the average.
pub fn macro_f1(pairs: &[(&str, Option<&str>)], labels: &[String]) -> f64 {
    let mut f1s = vec![];
    for l in labels {
        let tp = pairs
            .iter()
            .filter(|(t, p)| t == l && *p == Some(l.as_str()))
            .count() as f64;
        let fp = pairs
            .iter()
            .filter(|(t, p)| t != l && *p == Some(l.as_str()))
            .count() as f64;
        let fn_ = pairs
            .iter()
            .filter(|(t, p)| t == l && *p != Some(l.as_str()))
            .count() as f64;
        if tp + fp + fn_ == 0.0 {
            continue;
        }
        f1s.push(2.0 * tp / (2.0 * tp + fp + fn_));
    }
    if f1s.is_empty() {
        0.0
    } else {
        f1s.iter().sum::<f64>() / f1s.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iou_of_merged_unions() {
        assert_eq!(union_iou(&[[0.0, 2.0]], &[[1.0, 3.0]]), 1.0 / 3.0);
        // Overlapping predictions are one span; order does not matter.
        assert_eq!(union_iou(&[[2.0, 4.0], [0.0, 3.0]], &[[0.0, 4.0]]), 1.0);
        assert_eq!(union_iou(&[[5.0, 6.0]], &[[0.0, 1.0]]), 0.0);
        assert_eq!(
            union_iou(&[[0.0, 1.0], [2.0, 3.0]], &[[0.0, 3.0]]),
            2.0 / 3.0
        );
    }

    #[test]
    fn rouge_l_tokens_as_rouge_score_and_cjk_characters() {
        assert_eq!(rouge_tokens("The cat, sat!"), ["the", "cat", "sat"]);
        assert_eq!(rouge_tokens("视频A1中"), ["视", "频", "a1", "中"]);
        let f = rouge_l("the cat sat on the mat", "the cat is on the mat");
        assert!((f - 5.0 / 6.0).abs() < 1e-12, "{f}");
        assert_eq!(rouge_l("", "x"), 0.0);
    }

    #[test]
    fn values_keep_name_order_and_serialize_as_a_map() {
        let mut v = Values::default();
        v.insert("rouge_l", 0.25);
        v.insert("accuracy", 1.0);
        v.insert("rouge_l", 0.5);
        assert_eq!(
            v.iter().collect::<Vec<_>>(),
            [("accuracy", 1.0), ("rouge_l", 0.5)]
        );
        assert_eq!(
            (v["rouge_l"], v.iter().find(|p| p.0 == "jaccard")),
            (0.5, None)
        );
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"accuracy":1.0,"rouge_l":0.5}"#
        );
    }

    #[test]
    fn unread_answers_are_wrong_and_counted() {
        let r = Reference {
            item_id: "i".into(),
            video_id: "v".into(),
            options: vec!["a".into(), "b".into(), "c".into()].into(),
            choices: vec![1],
            count: Some(3),
            ..Default::default()
        };
        let s = score_item(Format::SingleChoice, &r, &[], Some("I cannot tell"));
        assert_eq!((s.status, s.values["accuracy"]), (Status::Unread, 0.0));
        assert_eq!(s.problem, "no_option");
        let s = score_item(Format::SingleChoice, &r, &[], Some("答案：Ｂ"));
        assert_eq!(s.values["accuracy"], 1.0);
        let s = score_item(Format::Count, &r, &[], Some("three"));
        assert_eq!(s.values["abs_distance"], 3.0);
        let s = score_item(Format::Count, &r, &[], None);
        assert_eq!((s.status, s.values["abs_distance"]), (Status::Missing, 3.0));
        let s = score_item(Format::MultipleChoice, &r, &[], Some("B, C"));
        assert_eq!((s.values["accuracy"], s.values["jaccard"]), (0.0, 0.5));
    }

    #[test]
    fn macro_f1_keeps_unlabelled_answers_wrong() {
        let labels = vec!["real".to_string(), "fake".to_string()];
        let pairs = [
            ("fake", Some("fake")),
            ("fake", None),
            ("real", Some("real")),
            ("real", Some("fake")),
        ];
        // fake: tp 1, fp 1, fn 1 → 0.5; real: tp 1, fp 0, fn 1 → 2/3.
        let f = macro_f1(&pairs, &labels);
        assert!((f - (0.5 + 2.0 / 3.0) / 2.0).abs() < 1e-12, "{f}");
    }

    #[test]
    fn clustered_standard_error_by_hand() {
        // Two videos: (1, 0) and (1); mean 2/3; influences (1/3, -2/3)/3 and (1/3)/3.
        let m = clustered_mean(&[("a", 1.0), ("a", 0.0), ("b", 1.0)]);
        let e_a = (1.0 / 3.0 - 2.0 / 3.0) / 3.0;
        let e_b = (1.0 / 3.0) / 3.0;
        let want = (2.0 * (e_a * e_a + e_b * e_b) as f64).sqrt();
        assert!((m.se - want).abs() < 1e-12 && m.videos == 2, "{m:?}");
    }
}
