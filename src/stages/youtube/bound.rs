//! What a collection can cost, for `run --dry-run` and for the collection loop that follows the
//! same plan: each query's date windows (`published_after`/`published_before` cut into
//! `window_days` pieces) and pages (the group's `max_pages`, else the source's), and the worst
//! case of `split_above`: every dated window over the cap, halved until the halves would be
//! shorter than `min_window_hours`, each halving costing the one search that found it too big.
//! Reads the expanded queries; calls nothing; caches nothing.

use super::parse_time;
use crate::config::queries::Query;
use chrono::{DateTime, Utc};

/// A dated window of a search, or none (no range, or an open end: sent as is, never split).
pub(super) type Window = Option<(DateTime<Utc>, DateTime<Utc>)>;

/// The query's date range cut into `window_days` pieces (or one piece, or no range at all).
pub(super) fn initial_windows(q: &Query) -> Vec<Window> {
    let after = q.params.get("published_after").and_then(|v| parse_time(v));
    let before = q.params.get("published_before").and_then(|v| parse_time(v));
    let days = q
        .params
        .get("window_days")
        .and_then(|d| d.parse::<i64>().ok())
        .filter(|d| *d > 0);
    match (after, before) {
        (Some(a), Some(b)) if a < b => match days {
            Some(d) => {
                let mut out = vec![];
                let mut t = a;
                while t < b {
                    let e = (t + chrono::Duration::days(d)).min(b);
                    out.push(Some((t, e)));
                    t = e;
                }
                out
            }
            None => vec![Some((a, b))],
        },
        _ => vec![None],
    }
}

/// Pages of 50 per window of query `q`: its group's `max_pages`, else `default`.
pub(super) fn pages_of(q: &Query, default: u32) -> u32 {
    q.params
        .get("max_pages")
        .and_then(|p| p.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// The search calls of a collection.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Searches {
    /// Every window to its last page, none split: exact when every page is there.
    pub unsplit: u64,
    /// And every dated window over `split_above` down to `min_window_hours`: the bound.
    pub at_most: u64,
    pub windows: u64,
}

/// YouTube reports at most a million results: a cap at or above that never splits a window.
const MAX_REPORTED: u32 = 1_000_000;

pub(super) fn searches(
    queries: &[Query],
    max_pages: u32,
    split_above: u32,
    min_window_hours: u32,
) -> Searches {
    let mut s = Searches::default();
    let min_secs = i64::from(min_window_hours) * 3600;
    for q in queries {
        let pages = u64::from(pages_of(q, max_pages));
        for w in initial_windows(q) {
            s.windows += 1;
            s.unsplit += pages;
            s.at_most += match w {
                Some((a, b)) if split_above < MAX_REPORTED => {
                    worst((b - a).num_seconds(), pages, min_secs)
                }
                _ => pages,
            };
        }
    }
    s
}

/// The most searches a window of `secs` costs: split while its halves are at least `min_secs`
/// long (the collection's rule, in hours), one search for each split, `pages` for each leaf.
fn worst(secs: i64, pages: u64, min_secs: i64) -> u64 {
    // The collection compares whole hours.
    if secs / 3600 >= 2 * (min_secs / 3600) && secs >= 2 {
        let left = secs / 2;
        1 + worst(left, pages, min_secs) + worst(secs - left, pages, min_secs)
    } else {
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(params: &[(&str, &str)]) -> Query {
        Query {
            group: "g".into(),
            text: "q".into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            vars: Default::default(),
        }
    }

    #[test]
    fn windows_pages_and_the_worst_split_are_counted() {
        // The file: a year in 30-day windows (13 of them), 4 pages, three places.
        let year = [
            ("published_after", "2023-01-01"),
            ("published_before", "2024-01-01"),
            ("window_days", "30"),
        ];
        let qs = vec![query(&year); 3];
        let s = searches(&qs, 4, 500, 24);
        assert_eq!((s.windows, s.unsplit), (39, 156));
        // A 30-day window halves to 15, 7.5, 3.75 and 1.875 days (45 h < 48 h): 15 splits and
        // 16 windows of 4 pages; the last window (5 days) splits twice into 4 of 30 h.
        assert_eq!(s.at_most, 3 * (12 * (15 + 16 * 4) + (3 + 4 * 4)));
        // A group's own max_pages; no window, no split; a cap no count reaches never splits.
        let mixed = vec![query(&[("max_pages", "2")]), query(&[])];
        assert_eq!(searches(&mixed, 5, 500, 24).at_most, 7);
        assert_eq!(searches(&qs, 4, MAX_REPORTED, 24).at_most, 156);
    }
}
