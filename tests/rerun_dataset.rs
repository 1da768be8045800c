//! A rerun equals a clean run for a published dataset's source (issue 57): random scripts of
//! edits to a FakeSV `data.json` (labels fixed, titles, rows added and removed, publish times
//! fixed: these move other videos' temporal cut), its published split lists swapped for
//! another set, the media URL template, the relevance threshold and the service's base_url.
//! After each script, `run` into the old directory and a clean run into a new one give equal
//! tables, and (every few scripts) equal `split --from-column` files and release data files.

use crate::fake_http::{FakeServer, Request};
use crate::judge::{err, openai_says, run_with_key};
use crate::rerun::Rng;
use crate::util::*;
use std::path::Path;

const TABLES: &[&str] = &["source", "relevance", "rejects"];
const VOLATILE: &[&str] = &["rejected_at", "latency_ms", "cost_usd"];

#[derive(Clone, Debug)]
struct Row {
    id: String,
    label: usize,
    event: usize,
    title: String,
    /// Publish time, seconds.
    time: i64,
}

/// The inputs an edit script changes.
#[derive(Clone, Debug)]
struct Ds {
    rows: Vec<Row>,
    next_id: usize,
    /// None: FakeSV's temporal cut; Some(k): the published lists of set k.
    lists: Option<usize>,
    url: usize,
    min_score: u32,
    server: usize,
}

impl Ds {
    fn write(&self, dir: &Path, url: &str) {
        let mut lines = String::new();
        for r in &self.rows {
            lines += &format!(
                "{{\"video_id\": \"{}\", \"annotation\": \"{}\", \"keywords\": \"E{}\", \"title\": \"{}\", \"description\": \"d\", \"publish_time\": {}}}\n",
                r.id,
                ["真", "假", "辟谣"][r.label],
                r.event,
                r.title,
                r.time * 1000
            );
        }
        write(&dir.join("data.json"), &lines);
        let mut split_lines = String::new();
        if let Some(k) = self.lists {
            // Each set places every row by a hash of its id and the set.
            let mut lists: [Vec<&str>; 3] = Default::default();
            for r in &self.rows {
                let h = blake3::hash(format!("{k}{}", r.id).as_bytes()).as_bytes()[0] as usize;
                lists[h % 3].push(&r.id);
            }
            for (name, ids) in ["train", "valid", "test"].iter().zip(&lists) {
                write(&dir.join(format!("lists{k}/{name}.txt")), &ids.join("\n"));
            }
            split_lines = format!(
                "split_by = \"files\"\nsplit_files = {{ train = \"lists{k}/train.txt\", valid = \"lists{k}/valid.txt\", test = \"lists{k}/test.txt\" }}\n"
            );
        }
        let host = ["a.example.org", "b.example.org"][self.url];
        let openai = crate::judge::openai_service(url);
        write(
            &dir.join("p.toml"),
            &format!(
                r#"name = "ds"
[output]
flush_secs = 0

{openai}
[source]
type = "dataset"
format = "fakesv"
annotations = "data.json"
media_url = "https://{host}/v/{{id}}.mp4"
{split_lines}
[[stages]]
id = "relevance"
type = "relevance"
retries = 0
compute = {{ service = "openai", model = "gpt-4o", event = "a protest turning violent" }}
select = {{ min_score = {} }}
"#,
                self.min_score
            ),
        );
    }

    fn new_row(&mut self, rng: &mut Rng) -> Row {
        self.next_id += 1;
        Row {
            id: format!("v{}", self.next_id),
            label: rng.below(3),
            event: rng.below(3),
            title: format!("title {}", rng.below(1000)),
            time: 1_600_000_000 + rng.below(100_000) as i64,
        }
    }
}

/// One edit, applied to `s`; its name.
fn edit(s: &mut Ds, rng: &mut Rng) -> &'static str {
    let i = rng.below(s.rows.len());
    match rng.below(9) {
        0 => {
            s.rows[i].label = (s.rows[i].label + 1) % 3;
            "label fixed"
        }
        1 => {
            s.rows[i].title = format!("title {}", rng.below(1000));
            "title"
        }
        2 => {
            let r = s.new_row(rng);
            s.rows.insert(rng.below(s.rows.len() + 1), r);
            "row added"
        }
        3 if s.rows.len() > 3 => {
            s.rows.remove(i);
            "row removed"
        }
        4 => {
            s.rows[i].time = 1_600_000_000 + rng.below(100_000) as i64;
            "publish time fixed"
        }
        5 => {
            s.lists = match s.lists {
                None => Some(0),
                Some(0) => Some(1),
                Some(_) => None,
            };
            "split lists swapped"
        }
        6 => {
            s.url = 1 - s.url;
            "url"
        }
        7 => {
            s.min_score = if s.min_score == 1 { 6 } else { 1 };
            "threshold"
        }
        _ => {
            s.server = 1 - s.server;
            "base_url"
        }
    }
}

/// `split --from-column split` then `release`: the split file's rows and the release's data.
fn split_and_release(run: &Path, dir: &Path, why: &str) -> (Vec<String>, Vec<String>) {
    let r = run.to_str().unwrap();
    let names = ["--names", "train,valid,test", "--name", "published"];
    let o = std::process::Command::new(bin())
        .args(["split", r, "--from-column", "split"])
        .args(names)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "split: {why}: {}", err(&o));
    let rel = run.with_extension("release");
    let _ = std::fs::remove_dir_all(&rel);
    let o = std::process::Command::new(bin())
        .args([
            "release",
            r,
            "--split",
            "published",
            "--frames",
            "none",
            "--out",
        ])
        .arg(&rel)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "release: {why}: {}", err(&o));
    (
        table_rows(&run.join("splits"), &[]),
        table_rows(&rel.join("data"), &[]),
    )
}

#[test]
fn random_dataset_edit_scripts_rerun_as_a_clean_run_does() {
    // The score follows the prompt (so a threshold filters some); the two servers score alike
    // prompts differently.
    let servers: Vec<FakeServer> = (0..2usize)
        .map(|n| {
            FakeServer::start(move |r: &Request| {
                let score = 1 + blake3::hash(&r.body).as_bytes()[n] % 10;
                openai_says(&score.to_string())
            })
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let mut rng = Rng(0x0da7_a5e7);
    let mut s = Ds {
        rows: vec![],
        next_id: 0,
        lists: None,
        url: 0,
        min_score: 1,
        server: 0,
    };
    for _ in 0..6 {
        let r = s.new_row(&mut rng);
        s.rows.push(r);
    }
    s.write(dir, &urls[s.server]);
    let out = dir.join("run");
    let code = |o: &std::process::Output| o.status.code().unwrap_or(-1);
    let first = run_with_key(&dir.join("p.toml"), &out);
    assert_eq!(code(&first), 0, "{}", err(&first));
    for k in 0..100 {
        let before = s.clone();
        let n = 1 + rng.below(3);
        let edits: Vec<&str> = (0..n).map(|_| edit(&mut s, &mut rng)).collect();
        s.write(dir, &urls[s.server]);
        let rerun = run_with_key(&dir.join("p.toml"), &out);
        let clean_dir = dir.join(format!("clean{}", k % 2));
        let _ = std::fs::remove_dir_all(&clean_dir);
        let clean = run_with_key(&dir.join("p.toml"), &clean_dir);
        let why = format!("script {k} {edits:?} from {before:?}: {}", err(&rerun));
        assert_eq!(code(&rerun), 0, "{why}");
        assert_eq!(code(&clean), 0, "{why}");
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
        if n == 1 {
            let c = |stage: &str| counts(&out, stage)["computed"].as_u64().unwrap_or(0);
            match edits[0] {
                // What relevance reads did not change: no call.
                "label fixed"
                | "row removed"
                | "publish time fixed"
                | "split lists swapped"
                | "threshold" => assert_eq!(c("relevance"), 0, "{why}"),
                "title" | "row added" => assert_eq!(c("relevance"), 1, "{why}"),
                _ => {}
            }
        }
        if k % 5 == 4 {
            assert_eq!(
                split_and_release(&out, dir, &why),
                split_and_release(&clean_dir, dir, &why),
                "split or release differs from a clean run's after {why}"
            );
        }
    }
}
