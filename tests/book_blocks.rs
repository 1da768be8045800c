//! Every shell block of the README and the book is run on the demo or says what stands in for
//! it (issue 67). A block right after `<!-- runs on the demo -->` runs as a bash script, in book
//! order, in a folder laid out like the repository after `./scripts/demo.sh`'s run of
//! `pipelines/demo.toml` over the demo corpus; a block after `<!-- stands in: ... -->` names the
//! test files (or scripts) that run what it shows instead (a YouTube collection, a cluster, a
//! server), and those must exist. An unmarked block fails. Usage lines are `text` blocks. Every
//! `vidcurate` line of every block parses as the binary parses it (src/main.rs,
//! `shown_commands`). The numbers the quick start states about the demo are computed from the
//! same run.

use crate::util::{bin, column, copy_dir, make_corpus};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const RUNS: &str = "<!-- runs on the demo -->";
const STANDS_IN: &str = "<!-- stands in: ";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README, then the book's pages in SUMMARY.md's order (links in list items and lines).
fn pages() -> Vec<PathBuf> {
    let src = repo().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let mut out = vec![repo().join("README.md")];
    for line in summary.lines() {
        if let Some(t) = line.split("](").nth(1).and_then(|r| r.split(')').next()) {
            out.push(src.join(t));
        }
    }
    out
}

/// A fenced block: its page line, language, the marker line before it, and its text.
struct Block {
    line: usize,
    lang: String,
    marker: String,
    text: String,
}

/// The fenced blocks of a page.
fn blocks(text: &str) -> Vec<Block> {
    let (mut out, mut cur, mut last): (Vec<Block>, Option<Block>, &str) = (vec![], None, "");
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut cur, fence) {
            (None, Some(lang)) => {
                cur = Some(Block {
                    line: n + 1,
                    lang: lang.trim().to_string(),
                    marker: last.trim().to_string(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => out.extend(cur.take()),
            (Some(b), None) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            _ => {}
        }
        if !line.trim().is_empty() {
            last = line;
        }
    }
    out
}

fn is_shell(lang: &str) -> bool {
    matches!(lang, "sh" | "bash" | "console" | "shell")
}

/// What a stand-in marker names must exist: each `tests/….rs` and `scripts/…` path in it.
fn stand_ins(marker: &str) -> Result<Vec<String>, String> {
    let named: Vec<String> = marker
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '(' || c == ')')
        .map(|w| w.trim_end_matches([':', '.']))
        .filter(|w| w.starts_with("tests/") || w.starts_with("scripts/"))
        .map(str::to_string)
        .collect();
    if named.is_empty() {
        return Err("names no tests/… file or scripts/… that stands in".into());
    }
    for n in &named {
        let (file, test) = n.split_once("::").unwrap_or((n, ""));
        let Ok(text) = std::fs::read_to_string(repo().join(file)) else {
            return Err(format!("names {file}, which does not exist"));
        };
        if !test.is_empty() && !text.contains(&format!("fn {test}(")) {
            return Err(format!("names {n}, but {file} has no such test"));
        }
    }
    Ok(named)
}

/// The folder the blocks run in: pipelines/, queries/, the demo corpus and the readers' Python
/// where the repository has them, with `vidcurate` on PATH as the binary under test, after the
/// demo's run.
fn demo_root(root: &Path) -> String {
    for d in ["pipelines", "queries"] {
        copy_dir(&repo().join(d), &root.join(d));
    }
    // The demo corpus's generator, for the page that grows it.
    let script = "scripts/make_demo_corpus.py";
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::copy(repo().join(script), root.join(script)).unwrap();
    make_corpus(&root.join("data/demo"), &[]);
    let readers = repo().join("data/venv-readers");
    if readers.exists() {
        std::os::unix::fs::symlink(&readers, root.join("data/venv-readers")).unwrap();
    }
    let bin_dir = root.join(".bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(bin(), bin_dir.join("vidcurate")).unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let o = Command::new(bin())
        .args(["run", "pipelines/demo.toml"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 3)),
        "the demo run: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    path
}

/// A block as a bash script: it stops at the first command that fails (vidcurate's exit 3,
/// done with rejects, is not a failure).
fn run_block(root: &Path, path: &str, script: &str) -> std::process::Output {
    let prelude = "set -e\nvidcurate() { command vidcurate \"$@\" || { rc=$?; [ $rc -eq 3 ] || return $rc; }; }\n";
    Command::new("bash")
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .current_dir(root)
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn every_shell_block_runs_on_the_demo_or_names_its_stand_in() {
    crate::need_ffmpeg!();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let path = demo_root(root);
    let (mut ran, mut stood, mut unmarked, mut bad) = (0, 0, vec![], vec![]);
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        for b in blocks(&text).into_iter().filter(|b| is_shell(&b.lang)) {
            let at = format!("{name}:{}", b.line);
            if b.marker == RUNS {
                let o = run_block(root, &path, &b.text);
                if !o.status.success() {
                    bad.push(format!(
                        "{at}: exited {:?}:\n{}\n{}",
                        o.status.code(),
                        b.text,
                        String::from_utf8_lossy(&o.stderr)
                    ));
                }
                ran += 1;
            } else if let Some(what) = b.marker.strip_prefix(STANDS_IN) {
                match stand_ins(what) {
                    Ok(_) => stood += 1,
                    Err(e) => bad.push(format!("{at}: the stand-in {e}")),
                }
            } else {
                unmarked.push(at);
            }
        }
    }
    println!(
        "book: {ran} shell blocks run on the demo, {stood} checked by a stand-in, {} unmarked",
        unmarked.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
    assert!(
        unmarked.is_empty(),
        "shell blocks neither run nor standing in (put `{RUNS}` or `{STANDS_IN}tests/….rs: why -->` \
         on the line before each; a usage line is a `text` block):\n{}",
        unmarked.join("\n")
    );
    assert!(
        ran >= 15,
        "only {ran} blocks run: the book teaches by running"
    );
    demo_claims_hold(root);
    grown_demo_claims_hold(root);
}

/// "Keeping a dataset alive": the grown demo's second version adds the two new clips, and
/// only those, as a minor version.
fn grown_demo_claims_hold(root: &Path) {
    let v2 = root.join("data/releases/demo-v2");
    let changes = std::fs::read_to_string(v2.join("CHANGES.md")).unwrap();
    assert!(
        changes.contains("## 1.1.0 (from 1.0.0)") && changes.contains("- added: 2\n"),
        "{changes}"
    );
    let added = column(&v2.join("changes"), "video_id");
    assert_eq!(added, ["demo012", "demo013"]);
    let page = std::fs::read_to_string(repo().join("docs/src/guide/keeping-alive.md")).unwrap();
    assert!(page.contains("version 1.1.0") && page.contains("`1.0.0 → 1.1.0: 2 added`"));
}

/// The quick start's numbers about the demo are this run's: the creator-added regions per
/// label, their colour and how many are wider than 15:1; the local judge against arson.
fn demo_claims_hold(root: &Path) {
    let run = root.join("data/runs/demo/ocr_regions");
    let (labels, colours, added, aspect) = (
        column(&run, "label"),
        column(&run, "text_color"),
        column(&run, "creator_added"),
        column(&run, "aspect_ratio"),
    );
    let mut per: BTreeMap<&str, (usize, BTreeMap<&str, usize>, usize)> = BTreeMap::new();
    for i in 0..labels.len() {
        if added[i] != "true" {
            continue;
        }
        let e = per.entry(labels[i].as_str()).or_default();
        e.0 += 1;
        *e.1.entry(colours[i].as_str()).or_default() += 1;
        e.2 += (aspect[i].parse::<f64>().unwrap() > 15.0) as usize;
    }
    let said = |label: &str| {
        let (n, cs, wide) = &per[label];
        let (colour, k) = cs.iter().max_by_key(|(_, k)| **k).unwrap();
        let most = if k == n {
            format!("all {n} {colour}")
        } else {
            format!("{k} of {n} creator-added regions {colour}")
        };
        (most, (100 * wide + n / 2) / n)
    };
    let (fake, _) = said("fake");
    let (real, wide) = said("real");
    let want = format!("(fake: {fake}; real: {real}, {wide} % of them wider than 15:1)");
    for page in ["README.md", "docs/src/guide/quick-start.md"] {
        let text = collapsed(&std::fs::read_to_string(repo().join(page)).unwrap());
        assert!(
            text.contains(&want),
            "{page} does not say the demo's {want:?}"
        );
    }
    let scores = column(&root.join("data/runs/demo-flood/relevance"), "score");
    let kept = scores
        .iter()
        .filter(|s| s.parse::<u32>().unwrap() >= 9)
        .count();
    let want = format!("{kept} of {} still pass", scores.len());
    let page = "docs/src/guide/new-split.md";
    let text = collapsed(&std::fs::read_to_string(repo().join(page)).unwrap());
    assert!(
        text.contains(&want),
        "{page} does not say the demo's {want:?}"
    );
}

fn collapsed(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every key a query file takes, as the parser's own types serialize them (a new field does not
/// compile here until it is added, and then fails until the page shows it).
fn query_file_keys() -> BTreeSet<String> {
    use vidcurate::config::queries::{EventText, Group, QueryFile};
    let v = |s: &str| toml::Value::String(s.into());
    let map = |k: &str| BTreeMap::from([(k.to_string(), v("x"))]);
    let full = QueryFile {
        domain: "d".into(),
        kind: "micro".into(),
        event: Some(EventText {
            name: "n".into(),
            positive: vec!["p".into()],
            negative: vec!["n".into()],
        }),
        params: map("order"),
        exclude: vec!["e".into()],
        groups: vec![Group {
            name: Some("g".into()),
            template: "{x}".into(),
            rows: vec![map("x")],
            cross: BTreeMap::from([("y".to_string(), vec![v("y")])]),
            skip: vec![map("x")],
            limit: Some(1),
            exclude: vec!["e".into()],
            params: map("order"),
        }],
    };
    fn keys(prefix: &str, t: &toml::Table, out: &mut BTreeSet<String>) {
        for (k, val) in t {
            let at = format!("{prefix}{k}");
            match val {
                // Tables of the user's own names (params, cross, rows) stop at their key.
                toml::Value::Table(sub) if !["params", "cross"].contains(&k.as_str()) => {
                    keys(&format!("{at}."), sub, out)
                }
                toml::Value::Array(a) if k == "groups" => {
                    keys(&format!("{at}."), a[0].as_table().unwrap(), out)
                }
                _ => {}
            }
            out.insert(at);
        }
    }
    let mut out = BTreeSet::new();
    keys("", &toml::Table::try_from(&full).unwrap(), &mut out);
    out
}

/// The query-file page's example expands with `vidcurate queries` as it stands, and shows
/// every key the parser takes.
#[test]
fn the_query_file_example_expands_and_shows_every_key() {
    let page = repo().join("docs/src/reference/query-files.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let examples: Vec<Block> = blocks(&text)
        .into_iter()
        .filter(|b| b.lang == "toml")
        .collect();
    assert_eq!(examples.len(), 1, "{}: one example", page.display());
    let (line, example) = (examples[0].line, &examples[0].text);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("example.toml");
    std::fs::write(&file, example).unwrap();
    let o = Command::new(bin())
        .arg("queries")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}:{line}: `vidcurate queries` on the example: {}",
        page.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let shown: BTreeSet<String> = {
        let mut s = BTreeSet::new();
        fn walk(prefix: &str, t: &toml::Table, s: &mut BTreeSet<String>) {
            for (k, v) in t {
                let at = format!("{prefix}{k}");
                match v {
                    toml::Value::Table(sub) => walk(&format!("{at}."), sub, s),
                    toml::Value::Array(a) if a.iter().all(|x| x.is_table()) && k == "groups" => {
                        for g in a {
                            walk(&format!("{at}."), g.as_table().unwrap(), s);
                        }
                    }
                    _ => {}
                }
                s.insert(at);
            }
        }
        walk("", &toml::from_str(example).unwrap(), &mut s);
        s
    };
    let missing: Vec<_> = query_file_keys().difference(&shown).cloned().collect();
    assert!(
        missing.is_empty(),
        "{}:{line}: the example does not show {missing:?}",
        page.display()
    );
}

#[test]
fn blocks_and_markers_are_read_as_written() {
    let md = "x\n<!-- runs on the demo -->\n\n```sh\na\n```\n```text\nb\n```\n";
    let b = blocks(md);
    assert_eq!(b.len(), 2);
    assert_eq!(
        (b[0].line, b[0].marker.as_str(), b[0].text.as_str()),
        (4, RUNS, "a\n")
    );
    assert_eq!((b[1].lang.as_str(), b[1].marker.as_str()), ("text", "```"));
    assert!(stand_ins("tests/book_blocks.rs: this file").is_ok());
    assert!(stand_ins("tests/nope.rs").is_err());
    assert!(stand_ins("nothing named").is_err());
    assert!(stand_ins("tests/book_blocks.rs::no_such_test").is_err());
}
