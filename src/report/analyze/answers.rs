//! The fields of an `ask` stage's answers (MVFNDB A.1.2 emotion scores, A.2.1 identities) as
//! long tables per group: numbers binned, categories and lists as shares of videos. Reads the
//! stage's `answer` column through `tables`; writes nothing.

use super::tables::{BatchFilter, RunTables, col_str};
use super::*;
use serde_json::Value;

/// How one field of an `ask` stage's answers is analysed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum FieldKind {
    /// Numbers: their distribution per group (one bin per integer over a short range, else
    /// ten equal bins), and a KS test.
    Number,
    /// One of a few strings: the share of the group's videos with each, and a chi-square test.
    Category,
    /// A list of strings (e.g. the identities shown): the share of the group's videos whose
    /// list holds each (a video counts once per value; shares do not add up to 1).
    Multi,
}

/// One analysed field of an `ask` stage: its long table, and the values or counts its test reads.
pub(super) struct AnswerField {
    /// `<stage>_<field>`, the table's and the figure's name.
    pub(super) name: String,
    pub(super) kind: FieldKind,
    pub(super) rows: Vec<DistRow>,
    pub(super) values: Vec<(String, Vec<f64>)>,
    pub(super) counts: Vec<(String, Vec<f64>)>,
    /// Videos per group with an answer.
    pub(super) videos: BTreeMap<String, usize>,
}

/// Free-text strings are not a category: more distinct values than this are skipped.
const MAX_CATEGORIES: usize = 30;
/// Nor are strings this long on average (a model's reasons).
const MAX_CATEGORY_CHARS: f64 = 40.0;

/// The fields of stage `sid`'s answers (the `answer` column, one JSON object per video), per
/// group of `by`. Fields that are objects, mixed, or free text are left out.
pub(super) fn answer_fields(
    run_tables: &RunTables,
    sid: &str,
    by: &str,
    filtered: BatchFilter,
) -> Result<Vec<AnswerField>, AnalyzeError> {
    let per_video = answers_by_video(run_tables, sid, by, filtered)?;
    let mut videos: BTreeMap<String, usize> = BTreeMap::new();
    for (g, _) in per_video.values() {
        *videos.entry(g.clone()).or_default() += 1;
    }
    let groups: Vec<String> = videos.keys().cloned().collect();
    let mut names: Vec<String> = per_video
        .values()
        .flat_map(|(_, o)| o.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    let mut out = vec![];
    for field in names {
        let vals: Vec<(&str, &Value)> = per_video
            .values()
            .filter_map(|(g, o)| o.get(&field).map(|v| (g.as_str(), v)))
            .filter(|(_, v)| !v.is_null())
            .collect();
        let Some(kind) = field_kind(&vals) else {
            continue;
        };
        let mut f = AnswerField {
            name: format!("{sid}_{field}"),
            kind,
            rows: vec![],
            values: vec![],
            counts: vec![],
            videos: videos.clone(),
        };
        let kept = match kind {
            FieldKind::Number => {
                number_rows(&mut f, &vals, &groups);
                true
            }
            FieldKind::Category | FieldKind::Multi => category_rows(&mut f, &vals, &groups),
        };
        if kept {
            out.push(f);
        }
    }
    Ok(out)
}

/// Each video's answer object (its last row's) with its group.
fn answers_by_video(
    run_tables: &RunTables,
    sid: &str,
    by: &str,
    filtered: BatchFilter,
) -> Result<BTreeMap<String, (String, serde_json::Map<String, Value>)>, AnalyzeError> {
    let mut per_video = BTreeMap::new();
    for b in run_tables.batches(sid, &[COL_VIDEO_ID, by, "answer"])? {
        let Some(b) = filtered(b)? else { break };
        let (ids, grp, ans) = (
            col_str(&b, COL_VIDEO_ID)?,
            col_str(&b, by)
                .map_err(|e| AnalyzeError::Column(format!("{sid}: {e} (`--by {by}`)")))?,
            col_str(&b, "answer")?,
        );
        for i in 0..b.num_rows() {
            let Some(Value::Object(o)) =
                ans[i].as_deref().and_then(|a| serde_json::from_str(a).ok())
            else {
                continue;
            };
            per_video.insert(
                ids[i].clone().unwrap_or_default(),
                (grp[i].clone().unwrap_or_else(|| "(null)".into()), o),
            );
        }
    }
    Ok(per_video)
}

/// Numbers, single strings or lists of strings; a field mixing them is not analysed.
fn field_kind(vals: &[(&str, &Value)]) -> Option<FieldKind> {
    if vals.iter().all(|(_, v)| v.is_number()) {
        Some(FieldKind::Number)
    } else if vals.iter().all(|(_, v)| v.is_string()) {
        Some(FieldKind::Category)
    } else if vals
        .iter()
        .all(|(_, v)| v.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
    {
        Some(FieldKind::Multi)
    } else {
        None
    }
}

/// A number field's histogram per group: one bin per integer over a short integer range, else
/// ten even bins.
fn number_rows(f: &mut AnswerField, vals: &[(&str, &Value)], groups: &[String]) {
    let xs: Vec<f64> = vals.iter().filter_map(|(_, v)| v.as_f64()).collect();
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
    let integers = xs.iter().all(|x| x.fract() == 0.0) && hi - lo <= 20.0;
    let bins: Vec<(f64, f64, String)> = if integers {
        (lo as i64..=hi as i64)
            .map(|k| (k as f64, k as f64 + 1.0, k.to_string()))
            .collect()
    } else {
        super::uniform_bins(10, lo, if hi > lo { hi } else { lo + 1.0 }, "")
    };
    let mut edges: Vec<f64> = bins.iter().map(|b| b.0).collect();
    edges.push(bins.last().map_or(1.0, |b| b.1));
    for g in groups {
        let mine: Vec<f64> = vals
            .iter()
            .filter(|(gg, _)| gg == g)
            .filter_map(|(_, v)| v.as_f64())
            .collect();
        let mut c = vec![0f64; bins.len()];
        for x in &mine {
            c[super::bin_of(&edges, *x)] += 1.0;
        }
        f.rows.extend(super::dist(g, &bins, &c));
        f.values.push((g.clone(), mine));
    }
}

/// A field's strings (one, or a list's distinct ones).
fn strings_of(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => {
            let mut s: Vec<String> = a
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect();
            s.sort();
            s.dedup();
            s
        }
        _ => vec![],
    }
}

/// A category field's share of videos per value and group; false when the field is free text
/// (too many values, or sentences such as a model's reasons), which is not analysed.
fn category_rows(f: &mut AnswerField, vals: &[(&str, &Value)], groups: &[String]) -> bool {
    let mut cats: Vec<String> = vals.iter().flat_map(|(_, v)| strings_of(v)).collect();
    cats.sort();
    cats.dedup();
    let mean_chars = vals
        .iter()
        .flat_map(|(_, v)| strings_of(v))
        .map(|s| s.chars().count())
        .sum::<usize>() as f64
        / vals.len().max(1) as f64;
    if cats.len() > MAX_CATEGORIES
        || (f.kind == FieldKind::Category && mean_chars > MAX_CATEGORY_CHARS)
    {
        return false;
    }
    for g in groups {
        let n = f.videos[g] as f64;
        let mut c = vec![0f64; cats.len()];
        for (_, v) in vals.iter().filter(|(gg, _)| gg == g) {
            for s in strings_of(v) {
                c[cats.binary_search(&s).expect("collected above")] += 1.0;
            }
        }
        f.rows.extend(
            cats.iter()
                .zip(&c)
                .enumerate()
                .map(|(i, (label, count))| DistRow {
                    group: g.clone(),
                    bin: i as u32,
                    lo: i as f64,
                    hi: i as f64 + 1.0,
                    label: label.clone(),
                    count: *count,
                    share: if n > 0.0 { count / n } else { 0.0 },
                }),
        );
        if f.kind == FieldKind::Category {
            f.counts.push((g.clone(), c));
        }
    }
    true
}
