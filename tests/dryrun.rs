//! `run --dry-run` against what a run then does on fake servers: the model calls a relevance
//! stage makes (some answers need a repair, which the estimate leaves out), the frames a frames
//! stage writes, and the YouTube searches a collection makes; and a second dry run that counts
//! the finished work as free.

use crate::fake_http::{FakeServer, Request};
use crate::judge::{
    OPENAI_KEY, err, openai_says, prompt_of, relevance_pipeline_with, run_with_key, url_manifest,
};
use crate::need_ffmpeg;
use crate::util::*;
use crate::youtube::{KEY, run_yt, youtube_fake, yt_pipeline};
use std::path::Path;

/// The dry run's line for `stage`: its columns.
fn line(text: &str, stage: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(stage))
        .unwrap_or_else(|| panic!("no line for {stage}: {text}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn dry(p: &Path, out: &Path) -> String {
    let o = run_command(p, out)
        .arg("--dry-run")
        .env("VIDCURATE_TEST_OPENAI_KEY", OPENAI_KEY)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_dry_run_predicts_model_calls_within_ten_percent_and_counts_done_work_as_free() {
    let dir = tempfile::tempdir().unwrap();
    // 30 videos; three answer in prose first and need a repair (a second call).
    let titles: Vec<String> = (0..30)
        .map(|i| {
            if i % 10 == 3 {
                format!("prose{i}")
            } else {
                format!("clip{i}")
            }
        })
        .collect();
    let server = FakeServer::start(|r: &Request| {
        let prompt = prompt_of(r);
        if prompt.contains("Title: prose") && !prompt.contains("Your previous answer was") {
            return openai_says("I would say 6");
        }
        openai_says("6")
    });
    let t: Vec<&str> = titles.iter().map(String::as_str).collect();
    url_manifest(dir.path(), &t);
    let p = relevance_pipeline_with(
        dir.path(),
        &server.url(),
        "usd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0",
        "",
        "select = { min_score = 1 }",
    );
    let out = dir.path().join("run");
    let text = dry(&p, &out);
    assert!(text.contains("source local: 30 videos"), "{text}");
    let l = line(&text, "relevance");
    let (videos, free, calls) = (
        l[2].parse::<u64>().unwrap(),
        l[3].parse::<u64>().unwrap(),
        l[4].parse::<f64>().unwrap(),
    );
    assert_eq!((videos, free), (30, 0), "{text}");
    assert_eq!(server.requests().len(), 0, "a dry run calls nothing");
    assert!(!out.exists(), "a dry run writes nothing");
    // Price: live at the configured rates, batch at half.
    let (tin, tout) = (l[5].parse::<f64>().unwrap(), l[6].parse::<f64>().unwrap());
    let (live, batch) = (l[7].parse::<f64>().unwrap(), l[8].parse::<f64>().unwrap());
    assert!(
        (live - (tin * 2.5 + tout * 10.0) / 1e6).abs() < 1e-4 && (batch - live / 2.0).abs() < 1e-4,
        "{text}"
    );

    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let made = server.requests().len() as f64;
    assert_eq!(made, 33.0);
    // Three answers repaired: more than the calls, never more than the requests bound.
    let bound = number_after(&text, "model calls (");
    assert!(
        made <= bound && bound == 2.0 * calls,
        "{made} made, bound {bound}: {text}"
    );
    assert!(
        (calls - made).abs() / made <= 0.10,
        "estimated {calls} calls, made {made}"
    );

    // Everything is done: the next dry run says so.
    let text = dry(&p, &out);
    let l = line(&text, "relevance");
    assert_eq!((l[3].as_str(), l[4].as_str()), ("30", "0"), "{text}");
    assert!(
        text.contains("cache: 33 answers of service openai already paid for"),
        "{text}"
    );
}

#[test]
fn the_dry_run_predicts_frames_and_youtube_searches() {
    need_ffmpeg!();
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir_all(&media).unwrap();
    for i in 0..3 {
        plain_clip(
            &media.join(format!("c{i}.mp4")),
            2.0 + i as f64 * 0.5,
            "320x240",
        );
    }
    let p = dir.path().join("p.toml");
    write(&p, &pipeline("dir = \"media\"", "{ count = 4 }", ""));
    let out = dir.path().join("run");
    let text = dry(&p, &out);
    let l = line(&text, "frames");
    assert_eq!(l[9], "12", "3 videos x 4 frames: {text}");
    let o = run_into(&p, &out, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(table_rows_file_all(&out.join("frames")).len(), 12);

    // YouTube: 1 query x 2 pages.
    let fake = youtube_fake();
    let yd = tempfile::tempdir().unwrap();
    let p = yt_pipeline(yd.path(), &fake.server.url(), "");
    let yout = yd.path().join("run");
    let text = dry(&p, &yout);
    assert!(text.contains("at most 100 videos"), "{text}");
    assert!(text.contains("search.list  at most 2 calls"), "{text}");
    assert!(text.contains("videos.list  at most 2 calls"), "{text}");
    assert!(text.contains("quota: 0.02 days"), "{text}");
    assert_eq!(fake.server.requests().len(), 0);
    let _ = run_yt(&p, &yout, KEY);
    assert_eq!(
        fake.server.count("/search"),
        2,
        "the searches estimated are the searches made"
    );
    assert!(fake.server.count("/videos") <= 2);
    let text = dry(&p, &yout);
    assert!(text.contains("(2 already in the cache: free)"), "{text}");
}

/// Calls the fake server received for `model`.
fn calls_to(server: &FakeServer, model: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.0.body).unwrap_or_default();
            v["model"] == model
        })
        .count()
}

/// Two paid stages: `relevance` scores a title by its first digits ("s9_3" → 9) and keeps 9
/// and up; `second` (another model) is asked only about what `relevance` keeps.
fn two_paid_stages(dir: &Path, url: &str, min_score: u8) -> std::path::PathBuf {
    relevance_pipeline_with(
        dir,
        url,
        "requests_per_minute = 6000\nusd_per_mtok_input = 2.5\nusd_per_mtok_output = 10.0",
        "",
        &format!(
            r#"select = {{ min_score = {min_score} }}

[[stages]]
id = "second"
type = "relevance"
compute = {{ service = "openai", model = "gpt-4o-mini", event = "a protest turning violent" }}
select = {{ min_score = 1 }}
"#
        ),
    )
}

#[test]
fn the_dry_run_after_an_edit_or_a_lowered_threshold_prices_exactly_what_the_run_then_calls() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(|r: &Request| {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        if v["model"] == "gpt-4o-mini" {
            return openai_says("7");
        }
        let title = crate::judge::title_of(&prompt_of(r));
        let score: String = title
            .chars()
            .skip(1)
            .take_while(char::is_ascii_digit)
            .collect();
        openai_says(&score)
    });
    // 5 videos score 9, 4 score 6, 3 score 3.
    let titles: Vec<String> = (0..12)
        .map(|i| match i {
            0..5 => format!("s9_{i}"),
            5..9 => format!("s6_{i}"),
            _ => format!("s3_{i}"),
        })
        .collect();
    let t: Vec<&str> = titles.iter().map(String::as_str).collect();
    url_manifest(dir.path(), &t);
    let p = two_paid_stages(dir.path(), &server.url(), 9);
    let out = dir.path().join("run");
    let first = dry(&p, &out);
    // Before any run the second stage is priced for every video (an upper bound).
    assert_eq!(line(&first, "second")[4], "12", "{first}");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        (
            calls_to(&server, "gpt-4o"),
            calls_to(&server, "gpt-4o-mini")
        ),
        (12, 5)
    );

    // Nothing changed: nothing to pay.
    let text = dry(&p, &out);
    assert_eq!(line(&text, "relevance")[3..5], ["12", "0"], "{text}");
    assert_eq!(line(&text, "second")[2..5], ["5", "5", "0"], "{text}");

    // A lower threshold: the second stage is priced for the 4 videos it now keeps, and
    // relevance for none (its rows hold).
    let p = two_paid_stages(dir.path(), &server.url(), 5);
    let text = dry(&p, &out);
    assert_eq!(line(&text, "relevance")[4], "0", "{text}");
    assert_eq!(line(&text, "second")[2..5], ["9", "5", "4"], "{text}");
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        calls_to(&server, "gpt-4o-mini"),
        5 + 4,
        "the calls priced are the calls made"
    );

    // A description edited: the source says so, and both stages recompute that one video.
    let m = std::fs::read_to_string(dir.path().join("m.csv")).unwrap();
    write(
        &dir.path().join("m.csv"),
        &m.replace("s9_0,a clip", "s9_0,another clip"),
    );
    let text = dry(&p, &out);
    assert!(
        text.contains("source: 1 changed since the last run"),
        "{text}"
    );
    assert!(
        text.contains("relevance: 1 recomputed (inputs changed)"),
        "{text}"
    );
    assert_eq!(line(&text, "relevance")[4], "1", "{text}");
    assert_eq!(line(&text, "second")[4], "1", "{text}");
    let before = server.requests().len();
    let o = run_with_key(&p, &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(server.requests().len() - before, 2, "one call per stage");
}

#[test]
fn with_youtube_downloads_off_nothing_after_the_download_is_priced() {
    let fake = youtube_fake();
    let yd = tempfile::tempdir().unwrap();
    let p = yt_pipeline(yd.path(), &fake.server.url(), "");
    let text = std::fs::read_to_string(&p).unwrap();
    write(
        &p,
        &format!(
            "{text}\n[[stages]]\nid = \"download\"\ntype = \"download\"\n\n[[stages]]\nid = \"probe\"\ntype = \"probe\"\n\n[[stages]]\nid = \"frames\"\ntype = \"frames\"\ncompute = {{ count = 4 }}\n"
        ),
    );
    let out = yd.path().join("run");
    let text = dry(&p, &out);
    assert_eq!(line(&text, "download")[2], "100", "{text}");
    assert_eq!(line(&text, "probe")[2], "0", "{text}");
    assert_eq!(
        line(&text, "frames")[9],
        "0",
        "no frames are priced: {text}"
    );
    assert!(
        text.contains("download: 100 of 100 videos stop here, nothing after it is priced for them: downloading from YouTube is off"),
        "{text}"
    );
}

/// The `search.list` bound a dry run prints.
pub(crate) fn search_bound(text: &str) -> usize {
    let l = text
        .lines()
        .find(|l| l.trim_start().starts_with("search.list"))
        .unwrap_or_else(|| panic!("no search.list line: {text}"));
    l.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// Query files with per-group pages, dated windows, and windows the fake reports over
/// `split_above` (longer than 3 days: 600 results): the dry run's bound is at least the searches
/// the collection then makes, and equal to them where no window is split.
#[test]
fn the_search_bound_covers_windows_group_pages_and_split_windows() {
    let cases = [
        (
            "pages per group",
            "[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"a\", \"b\"] }\nparams = { max_pages = 1 }\n[[groups]]\ntemplate = \"{spot} waves\"\ncross = { spot = [\"c\"] }\n",
            "",
            true,
        ),
        (
            "dated windows",
            "params = { published_after = \"2024-01-01\", published_before = \"2024-01-07\", window_days = 2 }\n[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"a\", \"b\"] }\n",
            "max_pages = 1\nsplit_above = 1000000",
            true,
        ),
        (
            "split windows",
            "params = { published_after = \"2024-01-01\", published_before = \"2024-03-01\", window_days = 30 }\n[[groups]]\ntemplate = \"{spot} surfing\"\ncross = { spot = [\"a\"] }\n",
            "max_pages = 1",
            false,
        ),
    ];
    for (what, groups, source, exact) in cases {
        let fake = youtube_fake();
        let d = tempfile::tempdir().unwrap();
        let p = yt_pipeline(
            d.path(),
            &fake.server.url(),
            "search_calls_per_day = 100000",
        );
        write(
            &d.path().join("queries/surf.toml"),
            &format!("domain = \"surfing\"\nkind = \"micro\"\n{groups}"),
        );
        let text = std::fs::read_to_string(&p).unwrap();
        let text = text.replace("max_pages = 2\n", &format!("max_pages = 2\n{source}\n"));
        let text = text.replace("max_pages = 2\nmax_pages = 1", "max_pages = 1");
        write(&p, &text);
        let out = d.path().join("run");
        let dry_text = dry(&p, &out);
        let bound = search_bound(&dry_text);
        let o = run_yt(&p, &out, KEY);
        // 3: the fake's videos.list leaves one id out (a deleted video).
        assert!(
            [0, 3].contains(&o.status.code().unwrap()),
            "{what}: {}",
            err(&o)
        );
        let made = fake.server.count("/search");
        assert!(
            made <= bound,
            "{what}: {made} searches made, bound {bound}\n{dry_text}"
        );
        if exact {
            assert_eq!(made, bound, "{what}: {dry_text}");
        } else {
            assert!(made > 2, "{what}: the windows were split ({made} searches)");
        }
    }
}
