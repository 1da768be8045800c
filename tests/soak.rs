//! Soak: hundreds of small generated clips through the whole demo chain with the smallest
//! channels, on one and on two CPU threads, with stages of very different speeds (probe takes
//! milliseconds, OCR a tenth of a second). Every video must end up done, filtered or rejected.
//! OCR detects at the frames' own 320x180 (`det_profile = "paddleocr"`): the default would
//! raise each frame to 1308x736 first, six times the suite's longest test for the same flow.
//! Before issue 10's fix this run stopped for good after a dozen videos, once the channel in
//! front of OCR filled.

use crate::util::*;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIPS: usize = 200;

fn soak_pipeline(threads: usize) -> String {
    let queries = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/protest.toml");
    let q = queries.display();
    format!(
        r#"name = "soak"
[source]
type = "local"
manifest = "corpus/manifest.csv"

[runtime]
channel_capacity = 2
cpu_threads = {threads}
# Far above any one video's time here; a stall report fails the test at once.
stall_secs = 60

[output]
flush_secs = 5

[[stages]]
id = "relevance"
type = "relevance"
compute = {{ service = "local", queries = "{q}" }}
select = {{ min_score = 9 }}

[[stages]]
id = "probe"
type = "probe"

[[stages]]
id = "frames"
type = "frames"
compute = {{ mode = "uniform", count = 2 }}

[[stages]]
id = "ocr_regions"
type = "ocr"
compute = {{ det_profile = "paddleocr" }}

[[stages]]
id = "ocr_videos"
type = "overlays"

[[stages]]
id = "shots"
type = "shots"

[[stages]]
id = "prescreen"
type = "prescreen"
compute = {{ queries = "{q}" }}
"#
    )
}

/// Runs the pipeline; fails the test when the run reports a stall or outlives `limit` (a stalled
/// run before the stall detector existed), with what it printed.
fn run_watched(p: &Path, out: &Path, cwd: &Path, limit: Duration) -> (i32, String) {
    let mut child = run_command(p, out)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stalled = Arc::new(Mutex::new(false));
    let reader = {
        let (log, stalled) = (log.clone(), stalled.clone());
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if line.contains("Stalled") {
                    *stalled.lock().unwrap() = true;
                }
                log.lock().unwrap().push_str(&line);
                line.clear();
            }
            let mut rest = String::new();
            let _ = r.read_to_string(&mut rest);
            log.lock().unwrap().push_str(&rest);
        })
    };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        // Give the report's lines a moment to arrive before killing.
        if *stalled.lock().unwrap() || t0.elapsed() > limit {
            std::thread::sleep(Duration::from_secs(1));
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            panic!(
                "the run did not finish ({} s, stall reported: {}):\n{}",
                t0.elapsed().as_secs(),
                stalled.lock().unwrap(),
                log.lock().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    reader.join().unwrap();
    let text = log.lock().unwrap().clone();
    (status.code().unwrap_or(-1), text)
}

fn ids(dir: &Path) -> BTreeSet<String> {
    column(dir, "video_id").into_iter().collect()
}

#[test]
fn hundreds_of_clips_finish_through_small_channels_on_one_and_two_threads() {
    let d = tempfile::tempdir().unwrap();
    make_corpus(
        &d.path().join("corpus"),
        &[
            "--profile",
            "soak",
            "--clips",
            &CLIPS.to_string(),
            "--seconds",
            "2",
        ],
    );
    for threads in [1, 2] {
        let p = d.path().join(format!("soak{threads}.toml"));
        write(&p, &soak_pipeline(threads));
        let out = d.path().join(format!("run{threads}"));
        let (code, log) = run_watched(&p, &out, d.path(), Duration::from_secs(20 * 60));
        // Exit 3: finished, with rejects (the files cut short).
        assert_eq!(code, 3, "threads {threads}:\n{log}");

        // The counts chain: what a stage forwards is what the next one received, and what a
        // stage received is settled one way or another.
        let m = manifest(&out);
        let stages: Vec<String> = m["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        let c = |s: &str, k: &str| counts(&out, s)[k].as_u64().unwrap_or(0);
        assert_eq!(c(&stages[0], "received"), CLIPS as u64);
        for w in stages.windows(2) {
            assert_eq!(
                c(&w[0], "forwarded"),
                c(&w[1], "received"),
                "threads {threads}: {} forwarded, {} received",
                w[0],
                w[1]
            );
        }
        for s in &stages[1..] {
            assert_eq!(
                c(s, "received"),
                c(s, "computed") + c(s, "reused") + c(s, "rejected") + c(s, "rejected_before"),
                "threads {threads}: stage {s}"
            );
            assert_eq!(
                c(s, "forwarded"),
                c(s, "computed") + c(s, "reused") - c(s, "filtered"),
                "threads {threads}: stage {s}"
            );
        }

        // The tables tell the same story, video by video: every clip is in exactly one of
        // filtered by relevance, rejected (the files cut short), or finished the chain.
        let all = ids(&out.join("source"));
        assert_eq!(all.len(), CLIPS);
        let rel = out.join("relevance");
        let relevant: BTreeSet<String> = column(&rel, "video_id")
            .into_iter()
            .zip(column(&rel, "score"))
            .filter(|(_, s)| s.parse::<u8>().unwrap() >= 9)
            .map(|(id, _)| id)
            .collect();
        let filtered: BTreeSet<String> = all.difference(&relevant).cloned().collect();
        assert!(
            filtered.len() >= CLIPS / 4 && relevant.len() >= CLIPS / 2,
            "the relevance filter should drop the talk titles only: {} dropped",
            filtered.len()
        );
        let broken: BTreeSet<String> = (39..CLIPS)
            .step_by(40)
            .map(|n| format!("soak{n:03}"))
            .collect();
        let rejected = ids(&out.join("rejects"));
        assert_eq!(
            rejected,
            broken.intersection(&relevant).cloned().collect(),
            "threads {threads}"
        );
        let finished = ids(&out.join("prescreen"));
        assert_eq!(
            finished,
            relevant.difference(&rejected).cloned().collect(),
            "threads {threads}: some videos are unaccounted for"
        );
        // The text was read: the clips with a line of text have OCR regions.
        let with_text = ids(&out.join("ocr_regions"));
        assert!(
            with_text.is_subset(&finished) && with_text.len() * 3 >= finished.len(),
            "threads {threads}: only {} of {} finished clips have text",
            with_text.len(),
            finished.len()
        );
        assert!(!log.contains("Stalled"), "{log}");
    }
}
