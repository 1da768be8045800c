//! Held rows (issue 66): a threshold raised so kept videos leave, then lowered again. After each
//! rerun the table folders hold what a clean run's hold, as our reader, pyarrow, DuckDB and
//! Polars read them (by the lines the book shows), and lowering the threshold again computes
//! nothing and calls nothing: the held rows and rejects come back.

use crate::fake_http::{FakeServer, Request};
use crate::judge::{err, openai_says, run_with_key};
use crate::need_ffmpeg;
use crate::release::reader;
use crate::util::*;
use std::path::Path;

const TABLES: &[&str] = &["source", "relevance", "probe", "frames", "rejects"];
const VOLATILE: &[&str] = &["rejected_at", "latency_ms", "cost_usd"];

/// Relevance (keep `min_score` and up), probe, and two frames a video.
fn pipeline(dir: &Path, url: &str, min_score: u32) {
    write(
        &dir.join("p.toml"),
        &crate::rerun::pipeline_text(url, min_score, Some(2)),
    );
}

/// The rerun into `out` and a clean run into a new folder: every table folder the same, read by
/// our reader and by the book's pyarrow, DuckDB and Polars lines. What the rerun said.
fn rerun_equals_clean(dir: &Path, out: &Path, step: &str) -> String {
    let o = run_with_key(&dir.join("p.toml"), out);
    assert!(
        [0, 3].contains(&o.status.code().unwrap()),
        "{step}: {}",
        err(&o)
    );
    let clean = dir.join(format!("clean-{step}"));
    let c = run_with_key(&dir.join("p.toml"), &clean);
    assert!(
        [0, 3].contains(&c.status.code().unwrap()),
        "{step}: {}",
        err(&c)
    );
    for t in TABLES {
        assert_eq!(
            table_rows(&out.join(t), VOLATILE),
            table_rows(&clean.join(t), VOLATILE),
            "{step}: table {t} differs from a clean run's"
        );
    }
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/guide/resume-and-repair.md");
    let read = |run: &Path| -> serde_json::Value {
        let mut args = vec![page.display().to_string(), run.display().to_string()];
        args.extend(TABLES.iter().map(|t| t.to_string()));
        serde_json::from_str(&reader("run_folder.py", &args)).unwrap()
    };
    let (a, b) = (read(out), read(&clean));
    for t in TABLES {
        for who in ["pyarrow", "duckdb", "polars"] {
            assert_eq!(a[t][who], b[t][who], "{step}: {who} reads {t} otherwise");
        }
    }
    let v = run(&["verify", out.to_str().unwrap()], dir);
    assert_eq!(v.status.code(), Some(0), "{step}: {}", err(&v));
    err(&o)
}

#[test]
fn a_threshold_raised_then_lowered_shows_readers_a_clean_run_and_costs_nothing() {
    need_ffmpeg!();
    // Titles with "high" score 8, the others 3.
    let server = FakeServer::start(|r: &Request| {
        let body = String::from_utf8_lossy(&r.body);
        openai_says(if body.contains("high") { "8" } else { "3" })
    });
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    small_clips(dir, 4);
    // A broken file that scores low: its probe reject is held and comes back too.
    std::fs::write(dir.join("v/broken.mp4"), b"not a video").unwrap();
    let mut csv = String::from("id,path,label,title\n");
    for (i, t) in ["high one", "low one", "high two", "low two"]
        .iter()
        .enumerate()
    {
        csv += &format!("c{i},v/c{i}.mp4,fake,{t}\n");
    }
    csv += "bad,v/broken.mp4,real,low broken\n";
    write(&dir.join("m.csv"), &csv);
    pipeline(dir, &server.url(), 1);
    let out = dir.join("run");
    let o = run_with_key(&dir.join("p.toml"), &out);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));

    // Raised: the low videos leave probe and frames, their rows held apart, nothing computed.
    pipeline(dir, &server.url(), 5);
    let said = rerun_equals_clean(dir, &out, "raised");
    for s in ["relevance", "probe", "frames"] {
        assert_eq!(computed(&out, s), 0, "{s} computed for a raised threshold");
    }
    assert!(out.join("probe/_held").is_dir() && out.join("rejects/_held").is_dir());
    assert_eq!(column(&out.join("probe"), "video_id").len(), 2, "{said}");
    let status = run(&["status", out.to_str().unwrap()], dir);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        status.contains("retired from probe by reruns: 3 held_not_selected"),
        "{status}"
    );

    // Lowered again: back as they were, no call, nothing computed.
    pipeline(dir, &server.url(), 1);
    let calls = server.requests().len();
    let o = run_with_key(&dir.join("p.toml"), &out);
    assert_eq!(
        o.status.code(),
        Some(3),
        "the broken video's reject: {}",
        err(&o)
    );
    assert_eq!(server.requests().len(), calls, "a call for held rows");
    let said = err(&o);
    assert!(
        said.contains("probe: 3 restored (held rows, selected again: uncomputed)")
            && said.contains("frames: 2 restored"),
        "{said}"
    );
    for s in ["relevance", "probe", "frames"] {
        assert_eq!(computed(&out, s), 0, "{s} computed for a lowered threshold");
    }
    let said = rerun_equals_clean(dir, &out, "lowered");
    assert!(!said.contains("restored"), "{said}");
    assert!(std::fs::read_dir(out.join("probe/_held")).map_or(true, |d| d.count() == 0));
}
