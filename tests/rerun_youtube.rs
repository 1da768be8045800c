//! A rerun equals a clean run for a YouTube collection (issue 57): random scripts of edits to
//! the query file (a query added, a query removed), `max_pages` and the relevance threshold,
//! against the fake YouTube Data API replaying real recorded bodies (each query finding its own
//! share of them). After each script, `run` into the old directory (its searches from the
//! response cache where they were made before) and a clean run into a new one give equal
//! tables; a query added is searched, and the videos only a removed query found leave.

use crate::fake_http::{FakeServer, Request};
use crate::judge::{err, openai_says};
use crate::rerun::Rng;
use crate::util::*;
use crate::youtube::{KEY, youtube_fake};
use std::path::Path;
use std::sync::atomic::Ordering;

const TABLES: &[&str] = &["source", "relevance", "rejects"];
const VOLATILE: &[&str] = &["rejected_at", "latency_ms", "cost_usd", "fetched_at"];
const SPOTS: &[&str] = &["pipeline", "uluwatu", "nazare", "mavericks", "jeffreys"];

#[derive(Clone, Debug)]
struct Yt {
    spots: Vec<&'static str>,
    max_pages: u32,
    min_score: u32,
}

impl Yt {
    fn write(&self, dir: &Path, yt: &str, llm: &str) {
        let spots: Vec<String> = self.spots.iter().map(|s| format!("\"{s}\"")).collect();
        write(
            &dir.join("queries/surf.toml"),
            &format!(
                "domain = \"surfing\"\nkind = \"micro\"\n[[groups]]\ntemplate = \"{{spot}} surfing\"\ncross = {{ spot = [{}] }}\n",
                spots.join(", ")
            ),
        );
        let openai = crate::judge::openai_service(llm);
        write(
            &dir.join("p.toml"),
            &format!(
                r#"name = "yt"
[output]
flush_secs = 0

[services.youtube]
base_url = "{yt}"
api_key_env = "VIDCURATE_TEST_YT_KEY"

{openai}
[source]
type = "youtube"
queries = "queries/surf.toml"
max_pages = {}

[source.quota]
ledger = "ledger/quota.sqlite"
units_per_day = 100000000
search_calls_per_day = 100000000

[[stages]]
id = "relevance"
type = "relevance"
retries = 0
compute = {{ service = "openai", model = "gpt-4o", event = "a protest turning violent" }}
select = {{ min_score = {} }}
"#,
                self.max_pages, self.min_score
            ),
        );
    }
}

fn edit(s: &mut Yt, rng: &mut Rng) -> &'static str {
    match rng.below(4) {
        0 if s.spots.len() < SPOTS.len() => {
            let free: Vec<&'static str> = SPOTS
                .iter()
                .copied()
                .filter(|p| !s.spots.contains(p))
                .collect();
            s.spots.push(free[rng.below(free.len())]);
            "query added"
        }
        1 if s.spots.len() > 1 => {
            s.spots.remove(rng.below(s.spots.len()));
            "query removed"
        }
        2 => {
            s.max_pages = 3 - s.max_pages;
            "max_pages"
        }
        _ => {
            s.min_score = if s.min_score == 1 { 6 } else { 1 };
            "threshold"
        }
    }
}

fn run(dir: &Path, out: &Path) -> std::process::Output {
    run_command(&dir.join("p.toml"), out)
        .env("VIDCURATE_TEST_YT_KEY", KEY)
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .output()
        .unwrap()
}

/// A folder with the query file of `spots` and its pipeline, run once into `run/`.
fn first_run(spots: &[&'static str], yt: &str, llm: &str) -> (tempfile::TempDir, Yt) {
    let d = tempfile::tempdir().unwrap();
    let s = Yt {
        spots: spots.to_vec(),
        max_pages: 2,
        min_score: 1,
    };
    s.write(d.path(), yt, llm);
    let first = run(d.path(), &d.path().join("run"));
    assert_eq!(first.status.code(), Some(0), "{}", err(&first));
    (d, s)
}

#[test]
fn random_query_file_edits_rerun_as_a_clean_run_does() {
    let fake = youtube_fake();
    fake.by_query.store(true, Ordering::SeqCst);
    let llm = FakeServer::start(|r: &Request| {
        openai_says(&(1 + blake3::hash(&r.body).as_bytes()[0] % 10).to_string())
    });
    let (yt, url) = (fake.server.url(), llm.url());
    let (d, mut s) = first_run(&["pipeline", "nazare"], &yt, &url);
    let (dir, out) = (d.path(), d.path().join("run"));
    let mut rng = Rng(0x7007_ab1e);
    let mut sizes = std::collections::BTreeSet::new();
    for k in 0..40 {
        let before = s.clone();
        let n = 1 + rng.below(3);
        let edits: Vec<&str> = (0..n).map(|_| edit(&mut s, &mut rng)).collect();
        s.write(dir, &yt, &url);
        let searches = fake.server.count("/search");
        let rerun = run(dir, &out);
        let searched = fake.server.count("/search") - searches;
        let clean_dir = dir.join(format!("clean{}", k % 2));
        let _ = std::fs::remove_dir_all(&clean_dir);
        let clean = run(dir, &clean_dir);
        let why = format!("script {k} {edits:?} from {before:?}: {}", err(&rerun));
        assert_eq!(rerun.status.code(), Some(0), "{why}");
        assert_eq!(clean.status.code(), Some(0), "{why}");
        let (a, b) = (
            snapshot(&out, TABLES, VOLATILE),
            snapshot(&clean_dir, TABLES, VOLATILE),
        );
        for (i, t) in TABLES.iter().enumerate() {
            assert_eq!(
                a[i], b[i],
                "table {t} differs from a clean run's after {why}"
            );
        }
        assert_eq!(
            table_rows(&out.join("collection"), VOLATILE),
            table_rows(&clean_dir.join("collection"), VOLATILE),
            "the collection's provenance differs after {why}"
        );
        let provenance = table_rows(&out.join("collection"), VOLATILE);
        assert!(!provenance.is_empty(), "{why}");
        sizes.insert(a[0].len());
        // Searches made before come from the cache: a threshold costs none.
        if edits.iter().all(|e| *e == "threshold") {
            assert_eq!(searched, 0, "{why}");
        }
    }
    assert!(
        sizes.len() >= 3,
        "the edits changed what was found: {sizes:?}"
    );
}

/// The dry run before a query-file edit names the videos only the removed query found, and
/// the run that follows drops exactly those.
#[test]
fn the_dry_run_names_the_videos_a_removed_query_takes_out() {
    let fake = youtube_fake();
    fake.by_query.store(true, Ordering::SeqCst);
    let llm = FakeServer::start(|_: &Request| openai_says("7"));
    let (yt, url) = (fake.server.url(), llm.url());
    let (d, mut s) = first_run(&["pipeline", "nazare", "uluwatu"], &yt, &url);
    let (dir, out) = (d.path(), d.path().join("run"));
    let before: std::collections::BTreeSet<String> = column(&out.join("source"), "video_id")
        .into_iter()
        .collect();
    s.spots.retain(|p| *p != "nazare");
    s.write(dir, &yt, &url);
    let dry = run_command(&dir.join("p.toml"), &out)
        .arg("--dry-run")
        .env("VIDCURATE_TEST_YT_KEY", KEY)
        .env("VIDCURATE_TEST_OPENAI_KEY", crate::judge::OPENAI_KEY)
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", err(&dry));
    let said = String::from_utf8_lossy(&dry.stdout).to_string();
    let rerun = run(dir, &out);
    assert_eq!(rerun.status.code(), Some(0), "{}", err(&rerun));
    let after: std::collections::BTreeSet<String> = column(&out.join("source"), "video_id")
        .into_iter()
        .collect();
    let gone: Vec<String> = before.difference(&after).cloned().collect();
    assert!(
        !gone.is_empty(),
        "the removed query found videos of its own"
    );
    assert!(
        said.contains(&format!("source: leaving the run: {}", gone.join(", "))),
        "the dry run names {gone:?}:\n{said}"
    );
    assert!(said.contains(&format!("{} removed", gone.len())), "{said}");
}
