//! What a collection can cost, for `run --dry-run` and for the collection loop that follows the
//! same plan: each query's date windows (`published_after`/`published_before` cut into
//! `window_days` pieces) and pages (the group's `max_pages`, else the source's), and the worst
//! case of `split_above`: every dated window over the cap, halved until the halves would be
//! shorter than `min_window_hours`, each halving costing the one search that found it too big.
//! A window searched before (its first page in the response cache) costs nothing: a collection
//! again (`published_before = "now"`) pays for the new windows and the one not complete before.
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
        // An empty range (a start at or after its end, as `now` can be): nothing to search,
        // rather than a search without dates.
        (Some(_), Some(_)) => vec![],
        _ => vec![None],
    }
}

/// The environment variable that says what `now` is (a date or an RFC 3339 time): to collect
/// as of a day, again.
pub const NOW_ENV: &str = "VIDCURATE_NOW";

/// Why `now` could not be read, or a query cannot end at it.
#[derive(Debug)]
pub(super) struct NowError(pub String);

/// What `published_before = "now"` stands for: the start of today (UTC), or of the day
/// `VIDCURATE_NOW` names. A whole day, so a rerun the same day searches nothing again.
pub(super) fn today() -> Result<DateTime<Utc>, NowError> {
    let now = match std::env::var(NOW_ENV) {
        Ok(v) => parse_time(&v).ok_or_else(|| {
            NowError(format!(
                "{NOW_ENV}={v:?} is neither YYYY-MM-DD nor an RFC 3339 time"
            ))
        })?,
        Err(_) => Utc::now(),
    };
    Ok(now
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap_or_default()
        .and_utc())
}

/// `published_before = "now"` made `today`, with windows of 30 days unless the query sets
/// `window_days`: windows counted from `published_after` keep their bounds as `now` moves, so
/// the earlier ones are the same searches (answered from the cache).
pub(super) fn resolve_now(q: &mut Query, today: DateTime<Utc>) -> Result<(), NowError> {
    if q.params.get("published_before").map(String::as_str) != Some("now") {
        return Ok(());
    }
    if !q.params.contains_key("published_after") {
        return Err(NowError(format!(
            "query {:?}: published_before = \"now\" needs a published_after (the date windows are counted from it)",
            q.text
        )));
    }
    q.params.insert(
        "published_before".into(),
        today.format("%Y-%m-%d").to_string(),
    );
    q.params
        .entry("window_days".into())
        .or_insert_with(|| "30".into());
    Ok(())
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
    /// Of the windows, those searched before (free): not in the counts above.
    pub searched: u64,
}

/// YouTube reports at most a million results: a cap at or above that never splits a window.
const MAX_REPORTED: u32 = 1_000_000;

/// The searches of `queries`' windows that `searched` says were not made before.
pub(super) fn searches(
    queries: &[Query],
    (max_pages, split_above, min_window_hours): (u32, u32, u32),
    searched: impl Fn(&Query, Window) -> bool,
) -> Searches {
    let mut s = Searches::default();
    let min_secs = i64::from(min_window_hours) * 3600;
    for q in queries {
        let pages = u64::from(pages_of(q, max_pages));
        for w in initial_windows(q) {
            s.windows += 1;
            if searched(q, w) {
                s.searched += 1;
                continue;
            }
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
        let none = |_: &Query, _: Window| false;
        let s = searches(&qs, (4, 500, 24), none);
        assert_eq!((s.windows, s.unsplit), (39, 156));
        // A 30-day window halves to 15, 7.5, 3.75 and 1.875 days (45 h < 48 h): 15 splits and
        // 16 windows of 4 pages; the last window (5 days) splits twice into 4 of 30 h.
        assert_eq!(s.at_most, 3 * (12 * (15 + 16 * 4) + (3 + 4 * 4)));
        // A group's own max_pages; no window, no split; a cap no count reaches never splits.
        let mixed = vec![query(&[("max_pages", "2")]), query(&[])];
        assert_eq!(searches(&mixed, (5, 500, 24), none).at_most, 7);
        assert_eq!(searches(&qs, (4, MAX_REPORTED, 24), none).at_most, 156);
        // Windows searched before cost nothing: the five that end by June (Jan 31 to May 31).
        let june = parse_time("2023-06-01").unwrap();
        let before_june = |_: &Query, w: Window| w.is_some_and(|(_, b)| b < june);
        let s = searches(&qs, (4, MAX_REPORTED, 24), before_june);
        assert_eq!((s.windows, s.searched, s.unsplit), (39, 15, (39 - 15) * 4));
    }

    #[test]
    fn now_is_the_start_of_today_and_windows_keep_their_bounds_as_it_moves() {
        let mut q = query(&[
            ("published_after", "2026-09-01"),
            ("published_before", "now"),
        ]);
        let nov = parse_time("2026-11-07").unwrap();
        resolve_now(&mut q, nov).unwrap();
        assert_eq!(q.params["published_before"], "2026-11-07");
        assert_eq!(q.params["window_days"], "30");
        let then = initial_windows(&q);
        let mut q2 = query(&[
            ("published_after", "2026-09-01"),
            ("published_before", "now"),
        ]);
        resolve_now(&mut q2, parse_time("2026-12-07").unwrap()).unwrap();
        let now = initial_windows(&q2);
        // Sep 1 + 30 d, + 60 d, then Nov 7 (not complete); a month later it is complete.
        assert_eq!((then.len(), now.len()), (3, 4));
        assert_eq!(then[..2], now[..2]);
        assert_ne!(then[2], now[2]);
        // A start on or after today: no window, no search without dates.
        let mut late = query(&[
            ("published_after", "2026-12-07"),
            ("published_before", "now"),
        ]);
        resolve_now(&mut late, parse_time("2026-12-07").unwrap()).unwrap();
        assert!(initial_windows(&late).is_empty());
        let mut open = query(&[("published_before", "now")]);
        assert!(
            resolve_now(&mut open, nov)
                .unwrap_err()
                .0
                .contains("needs a published_after")
        );
    }
}
