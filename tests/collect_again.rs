//! Collecting again a month later (issue 69): a query group whose windows end at `now`
//! (`published_before = "now"`, weekly windows counted from `published_after`) searches, on the
//! second collection, only the windows that are new or were not complete the first time; the
//! others come from the response cache at no quota. The dry run says that number first, and
//! the collection again ends with the tables a clean collection as of that day writes.

use crate::judge::err;
use crate::util::*;
use crate::youtube::{KEY, youtube_fake, yt_pipeline};
use std::path::Path;

/// Two queries from 2026-09-01 to `now`, a window a week, one page each, never split.
fn pipeline(dir: &Path, url: &str) -> std::path::PathBuf {
    let p = yt_pipeline(dir, url, "search_calls_per_day = 100000");
    write(
        &dir.join("queries/surf.toml"),
        "domain = \"surfing\"\nkind = \"micro\"\nparams = { published_after = \"2026-09-01\", published_before = \"now\", window_days = 7 }\n[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"a\", \"b\"] }\n",
    );
    let text = std::fs::read_to_string(&p).unwrap();
    write(
        &p,
        &text.replace("max_pages = 2\n", "max_pages = 1\nsplit_above = 1000000\n"),
    );
    p
}

/// `vidcurate run` of `p` into `out` as of `day` (VIDCURATE_NOW), with `more` arguments.
fn run_on(p: &Path, out: &Path, day: &str, more: &[&str]) -> std::process::Output {
    run_command(p, out)
        .args(more)
        .env("VIDCURATE_TEST_YT_KEY", KEY)
        .env("VIDCURATE_NOW", day)
        .output()
        .unwrap()
}

#[test]
fn collecting_again_a_month_later_searches_only_the_new_windows() {
    let fake = youtube_fake();
    let d = tempfile::tempdir().unwrap();
    let p = pipeline(d.path(), &fake.server.url());
    let out = d.path().join("run");
    // 2026-11-07: Sep 1, 8, ... Oct 27 (9 whole weeks) and Nov 3 to 7, for each query.
    let o = run_on(&p, &out, "2026-11-07", &[]);
    assert!([0, 3].contains(&o.status.code().unwrap()), "{}", err(&o));
    assert_eq!(fake.server.count("/search"), 20);

    // A month later: Nov 3 to 10 (complete now), 10, 17, 24 and Dec 1 to 7 are new.
    let o = run_on(&p, &out, "2026-12-07", &["--dry-run"]);
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        said.contains("in 28 date windows, 10 new or not complete before (18 searched before: in the cache, free)"),
        "{said}"
    );
    assert_eq!(crate::dryrun::search_bound(&said), 10, "{said}");
    assert_eq!(
        fake.server.count("/search"),
        20,
        "a dry run searches nothing"
    );
    let o = run_on(&p, &out, "2026-12-07", &[]);
    assert!([0, 3].contains(&o.status.code().unwrap()), "{}", err(&o));
    assert_eq!(fake.server.count("/search"), 20 + 10);
    let windows: std::collections::BTreeSet<String> = (fake.server.requests().iter())
        .filter(|(r, _)| r.path.ends_with("/search"))
        .skip(20)
        .map(|(r, _)| r.query["publishedAfter"].clone())
        .collect();
    let expected = ["11-03", "11-10", "11-17", "11-24", "12-01"];
    let expected: std::collections::BTreeSet<String> = (expected.iter())
        .map(|d| format!("2026-{d}T00:00:00.000Z"))
        .collect();
    assert_eq!(windows, expected);

    // The same day again: nothing to search. And a clean collection as of that day writes
    // the same source table.
    let o = run_on(&p, &out, "2026-12-07", &[]);
    assert!([0, 3].contains(&o.status.code().unwrap()), "{}", err(&o));
    assert_eq!(fake.server.count("/search"), 30);
    let clean = d.path().join("clean");
    let o = run_on(&p, &clean, "2026-12-07", &[]);
    assert!([0, 3].contains(&o.status.code().unwrap()), "{}", err(&o));
    let rows = |dir: &Path| {
        let mut r = table_rows_file_all(&dir.join("source"));
        for row in &mut r {
            row.remove("fetched_at");
        }
        r.sort_by(|a, b| a["video_id"].cmp(&b["video_id"]));
        r
    };
    assert_eq!(rows(&out), rows(&clean));
}

/// `published_before = "now"` without a `published_after` has no windows to keep: refused at
/// the key, naming the query.
#[test]
fn now_without_a_start_is_refused_at_the_key() {
    let fake = youtube_fake();
    let d = tempfile::tempdir().unwrap();
    let p = pipeline(d.path(), &fake.server.url());
    write(
        &d.path().join("queries/surf.toml"),
        "domain = \"surfing\"\nkind = \"micro\"\nparams = { published_before = \"now\" }\n[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"a\"] }\n",
    );
    let o = run_on(&p, &d.path().join("run"), "2026-12-07", &["--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("published_before")
            && e.contains("needs a published_after")
            && e.contains("a surfing"),
        "{e}"
    );
}
