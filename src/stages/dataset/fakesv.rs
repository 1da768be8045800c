//! FakeSV's `data.json` (ICTMCG/FakeSV, `dataset/data.json`): JSON Lines, one video a line, with
//! `video_id`, `annotation` (真 / 假 / 辟谣), `keywords` (the event the video was found for) and,
//! in the full release, `title`, `description`, `publish_time` and social context this source
//! does not carry. Also the two ways the FakeSV paper splits it: by time and by event.

use super::settings::{Plan, SplitBy};
use super::{Listed, Published, Row, TimeProblem};
use crate::error::RunError;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// The extra columns of a FakeSV run, in order; `label`, `split` and `fold` are filled by the
/// source once every row is read.
pub(super) const COLUMNS: [&str; 5] = ["label", "event", "publish_time", "split", "fold"];
const EVENT: usize = 1;
const PUBLISH_TIME: usize = 2;

/// FakeSV's own label values and what we call them.
pub(super) fn default_labels() -> Vec<(&'static str, &'static str)> {
    vec![("真", "real"), ("假", "fake"), ("辟谣", "debunk")]
}

/// Every line of `file` as a row (blank lines skipped; a BOM and a missing final newline are
/// fine). A line that is not a JSON object is a row with a `bad_line` problem.
pub(super) fn read(file: &Path) -> Result<Vec<Row>, RunError> {
    let cfgerr = |e: std::io::Error| RunError::Config(format!("{}: {e}", file.display()));
    let reader = std::io::BufReader::new(std::fs::File::open(file).map_err(cfgerr)?);
    let shown = file.display().to_string();
    let mut rows = vec![];
    // Bytes, not `lines()`: a line that is not UTF-8 is that line's problem, not the file's.
    for (n, bytes) in reader.split(b'\n').enumerate() {
        let bytes = bytes.map_err(cfgerr)?;
        let line = n as u32 + 1;
        let origin = format!("{shown}:{line}");
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                rows.push(Row::broken(origin, line, COLUMNS.len(), "bad_line", &e));
                continue;
            }
        };
        let text = if line == 1 {
            text.trim_start_matches('\u{feff}')
        } else {
            &text
        };
        if text.trim().is_empty() {
            continue;
        }
        rows.push(match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(o)) => row_of(origin, line, &o),
            Ok(_) => Row::broken(origin, line, COLUMNS.len(), "bad_line", "not a JSON object"),
            Err(e) => Row::broken(origin, line, COLUMNS.len(), "bad_line", &e),
        });
    }
    Ok(rows)
}

fn row_of(origin: String, line: u32, o: &serde_json::Map<String, serde_json::Value>) -> Row {
    use crate::stages::local::json_text;
    let text = |k: &str| json_text(o.get(k)).filter(|s| !s.trim().is_empty());
    let mut row = Row::new(origin, line, COLUMNS.len());
    row.id = text("video_id").map(|s| s.trim().to_string());
    // Some of FakeSV's own loaders read the label as `label`.
    row.raw_label = text("annotation").or_else(|| text("label"));
    row.title = text("title");
    row.description = text("description");
    row.extra[EVENT] = text("keywords").map(|s| s.trim().to_string());
    row.extra[PUBLISH_TIME] = text("publish_time");
    row.time = match o.get("publish_time") {
        None | Some(serde_json::Value::Null) => Err(TimeProblem::Missing),
        Some(v) => parse_time(v),
    };
    row
}

/// The row's event: what its fold is decided by.
pub(super) fn event(row: &Row) -> Option<&str> {
    row.extra[EVENT].as_deref()
}

/// A publish time as FakeSV may write it: seconds or milliseconds since 1970 (a number or a
/// string of digits; 10^11 and more is read as milliseconds, which is after 5138 in seconds),
/// RFC 3339, or `YYYY-MM-DD[ HH:MM[:SS]]` (also with `/`; taken as UTC).
pub(super) fn parse_time(v: &serde_json::Value) -> Result<Published, TimeProblem> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
    let shown = crate::stages::local::json_text(Some(v)).unwrap_or_default();
    let bad = || TimeProblem::Unreadable(shown.clone());
    let number = match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => return Err(bad()),
    };
    let ms = if let Some(x) = number {
        if !x.is_finite() {
            return Err(bad());
        }
        if x.abs() >= 1e11 { x } else { x * 1000.0 }.round() as i64
    } else {
        let s = shown.trim();
        let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
            .iter()
            .flat_map(|f| [f.to_string(), f.replace('-', "/")])
            .find_map(|f| NaiveDateTime::parse_from_str(s, &f).ok())
            .or_else(|| {
                ["%Y-%m-%d", "%Y/%m/%d"]
                    .iter()
                    .find_map(|f| NaiveDate::parse_from_str(s, f).ok())
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            });
        match (DateTime::parse_from_rfc3339(s), naive) {
            (Ok(t), _) => t.timestamp_millis(),
            (_, Some(t)) => t.and_utc().timestamp_millis(),
            _ => return Err(bad()),
        }
    };
    let t = DateTime::<Utc>::from_timestamp_millis(ms).ok_or_else(bad)?;
    Ok(Published {
        ms,
        rfc3339: t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// The temporal split: `times` (one per kept row, in file order) sorted by time, ties in file
/// order, and cut by cumulative share: the row at sorted position i goes to the first split k
/// with i < round(n · (shares[0] + … + shares[k]) / sum of shares). Returns each row's split
/// index, in the order of `times`.
pub(super) fn temporal_splits(times: &[i64], shares: &[f64]) -> Vec<usize> {
    let n = times.len();
    let total: f64 = shares.iter().sum();
    let mut cuts = Vec::with_capacity(shares.len());
    let mut acc = 0.0;
    for s in shares {
        acc += s;
        cuts.push(((n as f64) * acc / total).round() as usize);
    }
    // Rounding must not leave the last rows without a split.
    if let Some(last) = cuts.last_mut() {
        *last = n;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (times[i], i));
    let mut out = vec![0; n];
    for (pos, &i) in order.iter().enumerate() {
        out[i] = cuts
            .iter()
            .position(|&c| pos < c)
            .unwrap_or(shares.len() - 1);
    }
    out
}

/// Event folds, balanced greedily: events by size (largest first, ties by event text), each
/// to the fold with the fewest videos so far (ties to the lower fold). All the videos of an
/// event share a fold whatever the file order; a row without an event is an event of its own,
/// keyed by its id. `events` is one key per kept row; returns folds numbered from 1.
pub(super) fn event_folds(events: &[String], folds: u32) -> Vec<u32> {
    let mut size: HashMap<&str, usize> = HashMap::new();
    for e in events {
        *size.entry(e).or_default() += 1;
    }
    let mut by_size: Vec<(&str, usize)> = size.into_iter().collect();
    by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut load = vec![0usize; folds.max(1) as usize];
    let mut fold_of: HashMap<&str, u32> = HashMap::new();
    for (event, n) in by_size {
        let (k, _) = load
            .iter()
            .enumerate()
            .min_by_key(|(k, l)| (**l, *k))
            .unwrap_or((0, &0));
        load[k] += n;
        fold_of.insert(event, k as u32 + 1);
    }
    events.iter().map(|e| fold_of[e.as_str()]).collect()
}

/// The folds and splits of the rows without a problem: folds from the fold lists when
/// `listed` has them, else the computed event folds; splits by time, from the split lists,
/// or by fold (`test_fold` is `test`, the other folds `train`; a row in no fold list, none).
pub(super) fn place(names: &[String], rows: &mut [Row], plan: &Plan, listed: &Listed) {
    let col = |name: &str| names.iter().position(|n| n == name);
    let (split_col, fold_col) = (col("split"), col("fold"));
    let kept: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].problem.is_none())
        .collect();
    let folds: Vec<Option<u32>> = match &listed.folds {
        Some(f) => kept.iter().map(|&i| f[i]).collect(),
        None => {
            // An event's text and a lone video's id must not meet as one key.
            let events: Vec<String> = kept
                .iter()
                .map(|&i| match event(&rows[i]) {
                    Some(e) => format!("e:{e}"),
                    None => format!("v:{}", rows[i].id.as_deref().unwrap_or_default()),
                })
                .collect();
            event_folds(&events, plan.folds)
                .into_iter()
                .map(Some)
                .collect()
        }
    };
    let splits: Vec<Option<String>> = match (plan.split_by, &listed.splits) {
        (SplitBy::Temporal, _) => {
            let times: Vec<i64> = kept
                .iter()
                .map(|&i| rows[i].time.as_ref().map_or(0, |t| t.ms))
                .collect();
            let at = temporal_splits(&times, &plan.shares);
            at.iter().map(|&k| Some(plan.names[k].clone())).collect()
        }
        (SplitBy::Files, Some(s)) => kept.iter().map(|&i| s[i].clone()).collect(),
        _ => folds
            .iter()
            .map(|f| f.map(|f| (if f == plan.test_fold { "test" } else { "train" }).to_string()))
            .collect(),
    };
    for ((&i, fold), split) in kept.iter().zip(folds).zip(splits) {
        if let Some(c) = fold_col {
            rows[i].extra[c] = fold.map(|f| f.to_string());
        }
        if let Some(c) = split_col {
            rows[i].extra[c] = split;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn publish_times_in_seconds_milliseconds_and_text_agree() {
        let at = |v: serde_json::Value| parse_time(&v).map(|p| p.rfc3339);
        let want = Ok("2021-03-04T05:06:07Z".to_string());
        assert_eq!(at(json!(1614834367)), want);
        assert_eq!(at(json!(1614834367000i64)), want);
        assert_eq!(at(json!("1614834367000")), want);
        assert_eq!(at(json!("2021-03-04 05:06:07")), want);
        assert_eq!(at(json!("2021/03/04 05:06:07")), want);
        assert_eq!(at(json!("2021-03-04T13:06:07+08:00")), want);
        assert_eq!(at(json!("2021-03-04")), Ok("2021-03-04T00:00:00Z".into()));
        assert!(
            at(json!("yesterday"))
                .unwrap_err()
                .to_string()
                .contains("`yesterday`")
        );
        assert!(at(json!([1])).is_err());
        assert_eq!(parse_time(&json!(1.5)).unwrap().ms, 1500);
    }

    #[test]
    fn temporal_split_cuts_the_time_order_by_share() {
        // Ten rows, times reversed against the file order: the earliest seven are train.
        let times: Vec<i64> = (0..10).rev().collect();
        let s = temporal_splits(&times, &[70.0, 15.0, 15.0]);
        // Cuts at 7, round(8.5) = 9 and 10: 7 train, 2 valid, 1 test.
        assert_eq!(s, vec![2, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
        // Equal times keep the file order.
        assert_eq!(
            temporal_splits(&[5, 5, 5, 5], &[1.0, 1.0]),
            vec![0, 0, 1, 1]
        );
        assert_eq!(temporal_splits(&[], &[1.0]), Vec::<usize>::new());
        assert_eq!(temporal_splits(&[1, 2], &[0.0, 1.0]), vec![1, 1]);
    }

    #[test]
    fn event_folds_keep_events_whole_and_balance_sizes() {
        let ev = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let events = ev(&["a", "b", "a", "c", "a", "b", "d", "e"]);
        let f = event_folds(&events, 3);
        // a (3) → 1, b (2) → 2, then c, d, e (1 each, by text): c → 3 (load 0), d → 3 (1 < 2),
        // e → 2 (2 = 2: the lower fold).
        assert_eq!(f, vec![1, 2, 1, 3, 1, 2, 3, 2]);
        // The file order does not change an event's fold.
        let mut rev = events.clone();
        rev.reverse();
        let mut g = event_folds(&rev, 3);
        g.reverse();
        assert_eq!(f, g);
        assert_eq!(event_folds(&ev(&["x", "y"]), 5), vec![1, 2]);
    }

    #[test]
    fn lines_are_rows_with_their_problems() {
        let (_d, f) = crate::store::test_support::file_with(
            "data.json",
            "\u{feff}{\"video_id\": 7, \"annotation\": \"假\", \"keywords\": \" e1 \"}\n\n\
             [1]\n{\"video_id\": \"x\", \"label\": \"真\", \"publish_time\": \"soon\"}\n{oops",
        );
        let rows = read(&f).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].id.as_deref(), Some("7"));
        assert_eq!(rows[0].raw_label.as_deref(), Some("假"));
        assert_eq!(event(&rows[0]), Some("e1"));
        assert!(rows[0].problem.is_none());
        assert_eq!(rows[1].line, 3);
        assert_eq!(rows[1].problem.as_ref().unwrap().reason, "bad_line");
        assert_eq!(rows[2].raw_label.as_deref(), Some("真"));
        assert!(
            rows[2]
                .time
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("soon")
        );
        let last = rows[3].problem.as_ref().unwrap();
        assert!(last.detail.contains("data.json:5:"), "{}", last.detail);
    }
}
