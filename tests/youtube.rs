//! The `youtube` source against a fake YouTube Data API v3 on 127.0.0.1 that replays the real
//! recorded bodies in tests/fixtures/youtube/, and the download stage against a local server.

use crate::fake_http::{FakeServer, Request, Response};
use crate::need_ffmpeg;
use crate::util::*;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A key that must never show up in a file, a log line or an error.
pub(crate) const KEY: &str = "AIzaSy-test-secret-4f9b2c";

fn fixture_json(name: &str) -> Value {
    let p = fixtures().join("youtube").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// The id the fake videos.list never returns (as if deleted).
const GONE: &str = "i2hewkFijuY";

pub(crate) struct YouTubeFake {
    pub(crate) server: FakeServer,
    /// After this many successful calls, answer 403 quotaExceeded (while `refuse` is set).
    quota_after: Arc<AtomicUsize>,
    refuse: Arc<AtomicBool>,
    /// Answer the next videos.list with a 503 backendError (a transient failure).
    fail_next_videos: Arc<AtomicBool>,
    /// Each query finds its own share of a page's videos (by a hash of the query and the id),
    /// so that queries added or removed change what a collection finds.
    pub(crate) by_query: Arc<AtomicBool>,
}

/// search.list: page 1 without a token, page 2 for `CBkQAA` (both real captures; the video
/// `-2IlD-x8wvY` is on both). videos.list: one item per requested id, built on the real
/// full-parts item with the search result's own title and description; every fourth id gets the
/// real snippet-and-player-only item shape (no contentDetails, no statistics).
pub(crate) fn youtube_fake() -> YouTubeFake {
    let p1 = fixture_json("search_by_keywords_p1.json");
    let p2 = fixture_json("search_by_keywords_p2.json");
    let full = fixture_json("videos_list_full_parts.json")["items"][0].clone();
    let partial = fixture_json("videos_list_snippet_player_only.json")["items"][0].clone();
    let key_invalid = std::fs::read(fixtures().join("youtube/error_400_keyInvalid.json")).unwrap();
    let mut snippets = std::collections::HashMap::new();
    for page in [&p1, &p2] {
        for it in page["items"].as_array().unwrap() {
            snippets.insert(
                it["id"]["videoId"].as_str().unwrap().to_string(),
                it["snippet"].clone(),
            );
        }
    }
    let ok_calls = Arc::new(AtomicUsize::new(0));
    let quota_after = Arc::new(AtomicUsize::new(usize::MAX));
    let refuse = Arc::new(AtomicBool::new(true));
    let fail_next_videos = Arc::new(AtomicBool::new(false));
    let by_query = Arc::new(AtomicBool::new(false));
    let (qa, rf, fv, bq) = (
        quota_after.clone(),
        refuse.clone(),
        fail_next_videos.clone(),
        by_query.clone(),
    );
    let server = FakeServer::start(move |r: &Request| {
        if r.query.get("key").map(String::as_str) != Some(KEY) {
            return Response::json(400, key_invalid.clone());
        }
        if rf.load(Ordering::SeqCst) && ok_calls.load(Ordering::SeqCst) >= qa.load(Ordering::SeqCst)
        {
            return Response::json(
                403,
                json!({"error": {"code": 403, "message": "The request cannot be completed because you have exceeded your <a href=\"/youtube/v3/getting-started#quota\">quota</a>.",
                  "errors": [{"message": "The request cannot be completed because you have exceeded your quota.", "domain": "youtube.quota", "reason": "quotaExceeded"}]}})
                .to_string(),
            );
        }
        let body = match r.path.as_str() {
            "/youtube/v3/search" => {
                assert_eq!(r.query.get("type").map(String::as_str), Some("video"));
                assert_eq!(r.query.get("maxResults").map(String::as_str), Some("50"));
                if let (Some(a), Some(b)) = (
                    r.query.get("publishedAfter"),
                    r.query.get("publishedBefore"),
                ) {
                    // Dated windows: longer than 3 days estimate 600 results (over the cap).
                    let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap();
                    let days = (t(b) - t(a)).num_hours() as f64 / 24.0;
                    let mut page = p1.clone();
                    page["pageInfo"]["totalResults"] = json!(if days > 3.0 { 600 } else { 25 });
                    page.as_object_mut().unwrap().remove("nextPageToken");
                    ok_calls.fetch_add(1, Ordering::SeqCst);
                    return Response::json(200, page.to_string());
                }
                let mut page = match r.query.get("pageToken").map(String::as_str) {
                    None => p1.clone(),
                    Some("CBkQAA") => p2.clone(),
                    Some(other) => panic!("unexpected page token {other}"),
                };
                if bq.load(Ordering::SeqCst) {
                    let q = r.query.get("q").cloned().unwrap_or_default();
                    let items = page["items"].as_array_mut().unwrap();
                    items.retain(|it| {
                        let id = it["id"]["videoId"].as_str().unwrap_or_default();
                        blake3::hash(format!("{q}/{id}").as_bytes()).as_bytes()[0].is_multiple_of(3)
                    });
                }
                page
            }
            "/youtube/v3/videos" if fv.swap(false, Ordering::SeqCst) => {
                return Response::json(
                    503,
                    json!({"error": {"code": 503, "message": "The service is currently unavailable.",
                      "errors": [{"message": "The service is currently unavailable.", "domain": "global", "reason": "backendError"}]}})
                    .to_string(),
                );
            }
            "/youtube/v3/videos" => {
                let ids: Vec<&str> = r.query["id"].split(',').collect();
                assert!(ids.len() <= 50);
                let items: Vec<Value> = ids
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| **id != GONE)
                    .map(|(i, id)| {
                        let mut it = if i % 4 == 3 {
                            partial.clone()
                        } else {
                            full.clone()
                        };
                        it["id"] = json!(id);
                        if let Some(sn) = snippets.get(*id) {
                            for k in [
                                "title",
                                "description",
                                "publishedAt",
                                "channelId",
                                "channelTitle",
                            ] {
                                it["snippet"][k] = sn[k].clone();
                            }
                        }
                        it
                    })
                    .collect();
                json!({"kind": "youtube#videoListResponse", "items": items,
                       "pageInfo": {"totalResults": ids.len(), "resultsPerPage": ids.len()}})
            }
            other => panic!("unexpected path {other}"),
        };
        ok_calls.fetch_add(1, Ordering::SeqCst);
        Response::json(200, body.to_string())
    });
    YouTubeFake {
        server,
        quota_after,
        refuse,
        fail_next_videos,
        by_query,
    }
}

fn query_file(dir: &Path) {
    write(
        &dir.join("queries/surf.toml"),
        r#"domain = "surfing"
kind = "micro"
[[groups]]
template = "{spot} surfing"
cross = { spot = ["pipeline"] }
params = { region_code = "JP" }
"#,
    );
}

pub(crate) fn yt_pipeline(dir: &Path, url: &str, quota: &str) -> std::path::PathBuf {
    query_file(dir);
    let p = dir.join("p.toml");
    write(
        &p,
        &format!(
            r#"name = "yt"
[services.youtube]
base_url = "{url}"
api_key_env = "VIDCURATE_TEST_YT_KEY"
max_retries = 1

[source]
type = "youtube"
queries = "queries/surf.toml"
max_pages = 2

[source.quota]
ledger = "ledger/quota.sqlite"
{quota}
"#
        ),
    );
    p
}

pub(crate) fn run_yt(p: &Path, out: &Path, key: &str) -> std::process::Output {
    run_command(p, out)
        .env("VIDCURATE_TEST_YT_KEY", key)
        .output()
        .unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file under `dir`, as bytes, to look for a leaked secret.
fn any_file_contains(dir: &Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if let Some(f) = any_file_contains(&p, needle) {
                return Some(f);
            }
        } else if std::fs::read(&p)
            .unwrap()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            return Some(p);
        }
    }
    None
}

#[test]
fn collects_one_row_per_video_with_every_provenance_and_reruns_without_calls() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    let out = dir.path().join("run");
    let o = run_yt(&p, &out, KEY);
    // One id is not returned by videos.list: a reject, so exit code 3.
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(fake.server.count("/search"), 2);
    assert_eq!(fake.server.count("/videos"), 1);

    let rows = table_rows_file_all(&out.join("source"));
    // 25 + 25 results, one video on both pages, one unavailable.
    assert_eq!(rows.len(), 48);
    let twice = rows
        .iter()
        .find(|r| r["video_id"] == "-2IlD-x8wvY")
        .unwrap();
    let prov = &twice["provenance"];
    assert_eq!(prov.matches("rank").count(), 2, "{prov}");
    assert!(
        prov.contains("page: 1") && prov.contains("page: 2"),
        "{prov}"
    );
    assert!(prov.contains("pipeline surfing"), "{prov}");
    assert!(
        prov.contains("regionCode") || prov.contains("region_code"),
        "{prov}"
    );
    // HTML entities decoded in `title`, kept in `title_raw`.
    let amp = rows
        .iter()
        .find(|r| r["title_raw"].contains("&amp;"))
        .expect("a title with &amp;");
    assert!(amp["title"].contains(" & ") && !amp["title"].contains("&amp;"));
    // Full parts: duration in seconds, counts as integers; missing parts are nulls.
    let full = rows
        .iter()
        .find(|r| r["duration_iso"] == "PT21M7S")
        .unwrap();
    assert_eq!(full["duration_secs"], "1267.0");
    assert_eq!(full["view_count"], "7920");
    assert_eq!(full["privacy_status"], "public");
    assert_eq!(full["domain"], "surfing");
    assert!(full["url"].starts_with("https://www.youtube.com/watch?v="));
    let partial = rows.iter().filter(|r| r["view_count"] == "null").count();
    assert!(partial >= 10, "{partial} rows without statistics");
    assert!(
        rows.iter()
            .filter(|r| r["view_count"] == "null")
            .all(|r| r["duration_secs"] == "null")
    );
    let rejects = table_rows(&out.join("rejects"), &[]);
    assert_eq!(rejects.len(), 1);
    assert!(
        rejects[0].contains(GONE) && rejects[0].contains("unavailable"),
        "{rejects:?}"
    );

    // The rerun answers from the cache: no call at all.
    let before = fake.server.requests().len();
    let o = run_yt(&p, &out, KEY);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(fake.server.requests().len(), before);
    assert_eq!(table_rows_file_all(&out.join("source")).len(), 48);
    // The calls are the source's (its searches run in a task of their own), each paid once
    // and answered again from the cache by the rerun.
    let stats = run(&["cache", "stats", out.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&stats.stdout).to_string();
    let staged: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() == 10 && c[1] == "youtube")
        .collect();
    assert!(!staged.is_empty(), "{text}");
    assert!(staged.iter().all(|c| c[0] == "source"), "{text}");
    let sum = |i: usize| {
        staged
            .iter()
            .map(|c| c[i].parse::<u32>().unwrap())
            .sum::<u32>()
    };
    assert_eq!(
        (sum(3), sum(5), sum(6)),
        (3, 3, 3),
        "entries, hits, misses: {text}"
    );
    // The key is in no file of the run directory nor of the ledger, and in no message.
    assert_eq!(any_file_contains(dir.path(), KEY.as_bytes()), None);
    assert!(!stderr(&o).contains(KEY));
}

#[test]
fn a_spent_budget_stops_and_the_next_run_resumes_without_repeating_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    // One search call a day: page 1 is fetched, page 2 would overspend.
    let p = yt_pipeline(dir.path(), &fake.server.url(), "search_calls_per_day = 1");
    let out = dir.path().join("run");
    let o = run_yt(&p, &out, KEY);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("search.list budget") && err.contains("1 of 1 used"),
        "{err}"
    );
    assert!(err.contains("resets in"), "{err}");
    assert_eq!(fake.server.count("/search"), 1);
    assert!(!out.join("source").exists() || table_rows_file_all(&out.join("source")).is_empty());

    // A bigger budget (as after the reset): page 1 comes from the cache, page 2 and videos.list
    // are new; nothing is asked twice.
    let p = yt_pipeline(dir.path(), &fake.server.url(), "search_calls_per_day = 10");
    let o = run_yt(&p, &out, KEY);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(fake.server.count("/search"), 2);
    assert_eq!(fake.server.count("/videos"), 1);
    assert_eq!(fake.server.repeated_successes(), Vec::<String>::new());
    assert_eq!(table_rows_file_all(&out.join("source")).len(), 48);
}

#[test]
fn quota_exceeded_from_the_api_stops_until_the_reset_and_then_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    fake.quota_after.store(1, Ordering::SeqCst);
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    let out = dir.path().join("run");
    let o = run_yt(&p, &out, KEY);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("quotaExceeded"), "{err}");
    let calls = fake.server.requests().len();
    assert_eq!(calls, 2, "page 1, then page 2 refused");

    // Same day: the ledger knows the bucket is spent, so not even one call is tried.
    let o = run_yt(&p, &out, KEY);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert_eq!(fake.server.requests().len(), calls);

    // After the reset (a fresh ledger stands in for the next Pacific day).
    fake.refuse.store(false, Ordering::SeqCst);
    std::fs::remove_dir_all(dir.path().join("ledger")).unwrap();
    let o = run_yt(&p, &out, KEY);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(fake.server.repeated_successes(), Vec::<String>::new());
    assert_eq!(
        fake.server.count("/search"),
        3,
        "page 1 once, page 2 refused then fetched"
    );
    assert_eq!(table_rows_file_all(&out.join("source")).len(), 48);
}

#[test]
fn an_invalid_key_stops_at_once_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    let bad = "AIzaSy-wrong-key-0000";
    let o = run_yt(&p, &dir.path().join("run"), bad);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("keyInvalid") && err.contains("$VIDCURATE_TEST_YT_KEY"),
        "{err}"
    );
    assert!(!err.contains(bad));
    assert_eq!(
        fake.server.requests().len(),
        1,
        "no retry of an invalid key"
    );
    // Without the variable: a configuration error naming it, before any call.
    let o = run_command(&p, &dir.path().join("run2"))
        .env_remove("VIDCURATE_TEST_YT_KEY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("VIDCURATE_TEST_YT_KEY"));
    assert_eq!(fake.server.requests().len(), 1);
}

#[test]
fn a_window_over_the_result_cap_is_split_until_it_fits() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    write(
        &dir.path().join("queries/surf.toml"),
        r#"domain = "surfing"
kind = "macro"
[[groups]]
template = "surfing {year}"
rows = [{ year = 2019 }]
params = { published_after = "{year}-01-01", published_before = "{year}-01-09" }
"#,
    );
    let text = std::fs::read_to_string(&p).unwrap() + "";
    write(
        &p,
        &text.replace("max_pages = 2", "max_pages = 2\nmin_window_hours = 48"),
    );
    let out = dir.path().join("run");
    let o = run_yt(&p, &out, KEY);
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(3),
        "{}",
        stderr(&o)
    );
    let windows: Vec<(String, String)> = fake
        .server
        .requests()
        .iter()
        .filter(|(r, _)| r.path.ends_with("/search"))
        .map(|(r, _)| {
            (
                r.query["publishedAfter"].clone(),
                r.query["publishedBefore"].clone(),
            )
        })
        .collect();
    // 8 days → 2 × 4 days (still estimated over 500) → 4 × 2 days, depth first.
    let day = |s: &str| s[..10].to_string();
    let got: Vec<(String, String)> = windows.iter().map(|(a, b)| (day(a), day(b))).collect();
    let want: Vec<(String, String)> = [
        ("01", "09"),
        ("01", "05"),
        ("01", "03"),
        ("03", "05"),
        ("05", "09"),
        ("05", "07"),
        ("07", "09"),
    ]
    .iter()
    .map(|(a, b)| (format!("2019-01-{a}"), format!("2019-01-{b}")))
    .collect();
    assert_eq!(got, want);
    let rows = table_rows_file_all(&out.join("source"));
    assert_eq!(rows.len(), 24, "p1's 25 videos minus the unavailable one");
    // Each video was found by the 8-day window (page 1 before the split) and by one 2-day window.
    assert!(
        rows[0]["provenance"].contains("2019-01-03T00:00:00Z")
            && rows[0]["provenance"].contains("2019-01-09T00:00:00Z"),
        "{}",
        rows[0]["provenance"]
    );
}

#[test]
fn a_transient_server_error_is_retried_and_charged_to_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    fake.fail_next_videos.store(true, Ordering::SeqCst);
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    let out = dir.path().join("run");
    let o = run_yt(&p, &out, KEY);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let videos: Vec<u16> = fake
        .server
        .requests()
        .iter()
        .filter(|(r, _)| r.path.ends_with("/videos"))
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(videos, vec![503, 200]);
    assert_eq!(table_rows_file_all(&out.join("source")).len(), 48);
    // Both attempts count against the units bucket (YouTube charges failed requests too).
    let ledger = rusqlite_units(&dir.path().join("ledger/quota.sqlite"));
    assert_eq!(ledger, 2);
}

/// Units charged today in a ledger file (read with the sqlite3 CLI-free path: via vidcurate's
/// own ledger type).
fn rusqlite_units(path: &Path) -> u64 {
    let l = vidcurate::clients::youtube::QuotaLedger::open(path).unwrap();
    let day = vidcurate::clients::youtube::pacific_day(chrono::Utc::now());
    l.used(&vidcurate::clients::youtube::key_id(KEY), day, "units")
        .unwrap()
}

#[test]
fn durations_parse_like_the_upstream_tests() {
    let cases = fixture_json("iso8601_duration_cases.json");
    for c in cases["cases"].as_array().unwrap() {
        let input = c["input"].as_str().unwrap();
        let got = vidcurate::clients::youtube::parse_duration(input);
        match c["seconds"].as_f64() {
            Some(want) => {
                let got = got.unwrap_or_else(|| panic!("{input} did not parse"));
                assert!((got - want).abs() < 1e-9, "{input}: {got} != {want}");
            }
            None => assert_eq!(got, None, "{input} should not parse"),
        }
    }
    for (input, want) in cases["computed_from_real_file_not_upstream_asserted"]
        .as_object()
        .unwrap()
    {
        if let Some(want) = want.as_f64() {
            assert_eq!(
                vidcurate::clients::youtube::parse_duration(input),
                Some(want),
                "{input}"
            );
        }
    }
}

#[test]
fn queries_command_expands_the_four_domain_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, min) in [
        ("protest", 20),
        ("car_crash", 40),
        ("arson", 40),
        ("cruise_collision", 30),
    ] {
        let o = run(&["queries", &format!("queries/{file}.toml")], root);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        let n = text.lines().count();
        assert!(n >= min, "{file}: {n} queries");
        assert!(
            stderr(&o).contains(&format!("{n} queries")),
            "{}",
            stderr(&o)
        );
        // Exclusions are rendered in YouTube's syntax on every line.
        assert!(text.lines().all(|l| l.contains(" -")), "{file}");
    }
    let o = run(&["queries", "queries/protest.toml"], root);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Hong Kong protest 2019"), "{text}");
    assert!(text.contains("published_after=2019-01-01"), "{text}");
}

/// A clip served by a local server that honours Range, fetched by the download stage with
/// reqwest and (the same URL) with yt-dlp; both land in the content-addressed store once.
#[test]
fn download_stage_fetches_direct_links_resumably_and_through_yt_dlp() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    plain_clip(&clip, 2.0, "160x90");
    let bytes = Arc::new(std::fs::read(&clip).unwrap());
    let b2 = bytes.clone();
    let server = FakeServer::start(move |r: &Request| match r.path.as_str() {
        "/media/clip.mp4" => match r.headers.get("range") {
            Some(range) => {
                let from: usize = range
                    .trim_start_matches("bytes=")
                    .trim_end_matches('-')
                    .parse()
                    .unwrap();
                Response::bytes(206, "video/mp4", b2[from..].to_vec()).header(
                    "Content-Range",
                    &format!("bytes {from}-{}/{}", b2.len() - 1, b2.len()),
                )
            }
            None => Response::bytes(200, "video/mp4", b2.to_vec()),
        },
        _ => Response::bytes(404, "text/plain", b"no".to_vec()),
    });
    let url = format!("{}media/clip.mp4", server.url());
    let missing = format!("{}media/gone.mp4", server.url());
    write(
        &dir.path().join("m.csv"),
        &format!(
            "id,path\nhttp,{url}\nmissing,{missing}\nyt,https://www.youtube.com/watch?v=abc\n"
        ),
    );
    let ytdlp = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/venv-tools/bin/yt-dlp");
    let p = dir.path().join("p.toml");
    let pipeline = |youtube: bool| {
        format!(
            "name = \"dl\"\n[source]\ntype = \"local\"\nmanifest = \"m.csv\"\nurls = true\n\n[[stages]]\nid = \"download\"\ntype = \"download\"\ncompute = {{ youtube = {youtube}, yt_dlp = \"{}\" }}\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n",
            ytdlp.display()
        )
    };
    write(&p, &pipeline(false));
    // A partial file from an interrupted earlier attempt: the stage asks only for the rest.
    let out = dir.path().join("run");
    let key = &blake3::hash(url.as_bytes()).to_hex()[..16];
    write(&out.join(format!("media/partial/http-{key}.part")), "");
    std::fs::write(
        out.join(format!("media/partial/http-{key}.part")),
        &bytes[..1000],
    )
    .unwrap();
    let o = run_into(&p, &out, dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let ranged: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|(r, _)| r.headers.get("range").cloned())
        .collect();
    assert_eq!(ranged, vec!["bytes=1000-".to_string()]);
    let rows = table_rows_file_all(&out.join("download"));
    assert_eq!(rows.len(), 1);
    let hash = blake3::hash(&bytes).to_hex().to_string();
    assert_eq!(rows[0]["blake3"], hash);
    assert_eq!(
        rows[0]["path"],
        format!("media/objects/{}/{hash}.mp4", &hash[..2])
    );
    assert_eq!(std::fs::read(out.join(&rows[0]["path"])).unwrap(), *bytes);
    // The probe read the downloaded file.
    let probe = table_rows_file_all(&out.join("probe"));
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0]["width"], "160");
    let rejects = table_rows(&out.join("rejects"), &[]).join("\n");
    assert!(
        rejects.contains("http_status") && rejects.contains("404"),
        "{rejects}"
    );
    assert!(rejects.contains("youtube_download_off"), "{rejects}");

    // yt-dlp on the same direct link (its generic extractor), into a fresh run: same object.
    if ytdlp.exists() {
        write(
            &dir.path().join("m.csv"),
            &format!("id,path\nviaytdlp,{url}\n"),
        );
        let p2 = dir.path().join("p2.toml");
        let text =
            pipeline(true).replace("compute = {", "compute = { yt_dlp_hosts = [\"127.0.0.1\"],");
        write(&p2, &text);
        let out2 = dir.path().join("run2");
        let o = run_into(&p2, &out2, dir.path());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let rows = table_rows_file_all(&out2.join("download"));
        assert_eq!(rows[0]["method"], "yt-dlp");
        assert_eq!(rows[0]["blake3"], hash);
    } else {
        eprintln!("yt-dlp part skipped: scripts/setup.sh installs data/venv-tools/bin/yt-dlp");
    }
}

#[test]
fn a_ranked_run_collects_once_on_rank_0_and_every_rank_reads_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let fake = youtube_fake();
    let p = yt_pipeline(dir.path(), &fake.server.url(), "");
    let out = dir.path().join("run");
    let worker = |rank: u32| {
        run_command(&p, &out)
            .args(["--rank", &rank.to_string(), "--world", "3"])
            .env("VIDCURATE_TEST_YT_KEY", KEY)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Ranks 1 and 2 start first: they wait for rank 0's collection and call nothing themselves.
    let waiting = [worker(1), worker(2)];
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(fake.server.requests().len(), 0);
    let first = worker(0).wait_with_output().unwrap();
    // 3 when the unavailable video is rank 0's, 0 otherwise.
    assert!(
        matches!(first.status.code(), Some(0 | 3)),
        "{}",
        stderr(&first)
    );
    for mut w in waiting {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while w.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = w.kill();
                let o = w.wait_with_output().unwrap();
                panic!(
                    "a waiting rank did not finish: {}\nrun: {:?}",
                    stderr(&o),
                    std::fs::read_dir(out.join("source"))
                        .map(|d| d.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let o = w.wait_with_output().unwrap();
        assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    }
    // One collection for the whole run, as a single process makes.
    assert_eq!(fake.server.count("/search"), 2);
    assert_eq!(fake.server.count("/videos"), 1);
    let rows = table_rows_file_all(&out.join("source"));
    assert_eq!(rows.len(), 48);
    // Each rank passed on exactly its own videos, and together all of them.
    let mut forwarded = 0;
    for r in 0..3 {
        let m: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join(format!("ranks/r{r:04}/manifest.json"))).unwrap(),
        )
        .unwrap();
        let n = m["invocations"][0]["counts"]["source"]["forwarded"]
            .as_u64()
            .unwrap();
        assert!(n > 5, "rank {r} forwarded {n}");
        forwarded += n;
    }
    assert_eq!(forwarded, 48);
}

/// Three queries of 25 distinct videos each; the third query's search answers late. The chain
/// behind the source (a relevance stage on a fake OpenAI endpoint of the same server) must get
/// the first batch of 50 while that search is still unanswered.
#[test]
fn collection_streams_so_judging_starts_while_searching_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let p1 = fixture_json("search_by_keywords_p1.json");
    let full = fixture_json("videos_list_full_parts.json")["items"][0].clone();
    let mut chat = fixture_json("../llm/openai/chat_completion_text.json");
    chat["choices"][0]["message"]["content"] = json!("9");
    const SLOW: std::time::Duration = std::time::Duration::from_millis(3000);
    let started = std::time::Instant::now();
    // (path, query, when the handler was entered)
    let seen: Arc<std::sync::Mutex<Vec<(String, String, std::time::Duration)>>> = Arc::default();
    let log = seen.clone();
    let server = crate::fake_http::FakeServer::start(move |r: &Request| {
        let q = r.query.get("q").cloned().unwrap_or_default();
        log.lock()
            .unwrap()
            .push((r.path.clone(), q.clone(), started.elapsed()));
        match r.path.as_str() {
            "/youtube/v3/search" => {
                // Ids made distinct per query: its first letter replaces the id's first one.
                let tag = q.chars().next().unwrap();
                let mut page = p1.clone();
                page.as_object_mut().unwrap().remove("nextPageToken");
                for it in page["items"].as_array_mut().unwrap() {
                    let id = it["id"]["videoId"].as_str().unwrap().to_string();
                    it["id"]["videoId"] = json!(format!("{tag}{}", &id[1..]));
                }
                let resp = Response::json(200, page.to_string());
                if q.starts_with('n') {
                    resp.delayed(SLOW)
                } else {
                    resp
                }
            }
            "/youtube/v3/videos" => {
                let items: Vec<Value> = r.query["id"]
                    .split(',')
                    .map(|id| {
                        let mut it = full.clone();
                        it["id"] = json!(id);
                        it["snippet"]["title"] = json!(format!("clip {id}"));
                        it
                    })
                    .collect();
                Response::json(
                    200,
                    json!({"kind": "youtube#videoListResponse", "items": items}).to_string(),
                )
            }
            "/v1/chat/completions" => Response::json(200, chat.to_string()),
            other => panic!("unexpected path {other}"),
        }
    });
    write(
        &dir.path().join("queries/surf.toml"),
        "domain = \"surfing\"\nkind = \"micro\"\n[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"pipeline\", \"teahupoo\", \"nazare\"] }\n",
    );
    let url = server.url();
    let pipeline = |name: &str, quota: &str| {
        let p = dir.path().join(name);
        write(
            &p,
            &format!(
                r#"name = "yt-stream"
[services.youtube]
base_url = "{url}"
api_key_env = "VIDCURATE_TEST_YT_KEY"
[services.openai]
base_url = "{url}v1/"
api_key_env = "VIDCURATE_TEST_OPENAI_KEY"
requests_per_minute = 60000

[source]
type = "youtube"
queries = "queries/surf.toml"
max_pages = 1

{quota}

[[stages]]
id = "relevance"
type = "relevance"
compute = {{ service = "openai", model = "gpt-4o", event = "big wave surfing" }}
"#
            ),
        );
        p
    };
    let p = pipeline("p.toml", "");
    let out = dir.path().join("run");
    let run_at = |p: &Path, out: &Path| {
        run_command(p, out)
            .env("VIDCURATE_TEST_YT_KEY", KEY)
            .env("VIDCURATE_TEST_OPENAI_KEY", "sk-test-stream")
            .output()
            .unwrap()
    };
    let run = || run_at(&p, &out);
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let calls = seen.lock().unwrap().clone();
    let searches: Vec<_> = calls.iter().filter(|c| c.0.ends_with("/search")).collect();
    assert_eq!(searches.len(), 3, "{calls:?}");
    let slow = searches.iter().find(|c| c.1.starts_with('n')).unwrap().2;
    let first_judged = calls
        .iter()
        .filter(|c| c.0.ends_with("/chat/completions"))
        .map(|c| c.2)
        .min()
        .expect("no relevance call");
    assert!(
        first_judged < slow + SLOW,
        "the first relevance call came at {first_judged:?}, after the last search was answered ({:?})",
        slow + SLOW
    );
    // Two batches as before streaming (50 in the order found, then the other 25).
    assert_eq!(calls.iter().filter(|c| c.0.ends_with("/videos")).count(), 2);
    assert_eq!(column(&out.join("source"), "video_id").len(), 75);
    assert_eq!(column(&out.join("relevance"), "score").len(), 75);
    // Every hit is in the provenance table of the complete collection.
    let hits = table_rows_file(&out.join("collection/provenance.parquet"));
    assert_eq!(hits.len(), 75);
    assert!(hits.iter().any(|h| h["query"] == "nazare surfing"));

    // A rerun answers everything from the cache.
    let before = seen.lock().unwrap().len();
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(seen.lock().unwrap().len(), before);

    // A budget of two searches: the first batch is judged and committed, then the run stops
    // with exit 4 (the third search would overspend).
    let p = pipeline(
        "p2.toml",
        "[source.quota]\nledger = \"ledger2.sqlite\"\nsearch_calls_per_day = 2",
    );
    let out = dir.path().join("run2");
    let o = run_at(&p, &out);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("search.list budget"), "{}", stderr(&o));
    assert_eq!(column(&out.join("source"), "video_id").len(), 50);
    assert_eq!(column(&out.join("relevance"), "score").len(), 50);
    assert!(!out.join("collection/provenance.parquet").exists());
}
