//! The book in docs/ and the README: the generated reference pages equal what the binary
//! writes, every internal link and anchor resolves, the README stays short, and the costs the
//! book states are what the dry run prints (`CLAIMS`). Its shell blocks run in
//! tests/book_blocks.rs.

use crate::util::{bin, copy_dir};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

fn md_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            md_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

#[test]
fn generated_reference_pages_equal_what_the_binary_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .args(["reference", "--out"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut pages = 0;
    for e in std::fs::read_dir(tmp.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap();
        let want = std::fs::read_to_string(&p).unwrap();
        let checked_in = book_src().join("reference").join(name);
        let got = std::fs::read_to_string(&checked_in).unwrap_or_default();
        assert!(
            got == want,
            "{} differs from what the binary writes: run `cargo run -- reference` and commit it",
            checked_in.display()
        );
        pages += 1;
    }
    assert_eq!(pages, 2, "commands.md and stage-types.md");
}

#[test]
fn the_readme_is_short() {
    let n = std::fs::read_to_string(repo().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        n <= 300,
        "README.md has {n} lines: the book in docs/ is where detail goes"
    );
}

/// Markdown outside fenced code blocks (links inside code are examples, not links).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = vec![];
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((n + 1, line));
        }
    }
    out
}

/// The targets of inline links `[text](target)` and images on a line, inline code skipped.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = vec![];
    let mut in_code = false;
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && b.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    let t = line[i + 2..i + 2 + end].split_whitespace().next();
                    out.extend(t.map(str::to_string));
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The ids mdBook gives a page's headings: lower case, spaces to `-`, other punctuation
/// dropped, and `-1`, `-2`... on repeats.
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut ids = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let plain: String = h.replace(['`', '*'], "");
        let id = vidcurate::report::reference::anchor(&plain);
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let mut files = vec![repo().join("README.md")];
    md_files(&book_src(), &mut files);
    let summary = std::fs::read_to_string(book_src().join("SUMMARY.md")).unwrap();
    let in_summary: BTreeSet<PathBuf> = prose(&summary)
        .iter()
        .flat_map(|(_, l)| link_targets(l))
        .map(|t| book_src().join(t))
        .collect();
    let mut broken = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in prose(&text) {
            for t in link_targets(line) {
                if t.contains("://") || t.starts_with("mailto:") {
                    continue;
                }
                let (path, frag) = t.split_once('#').unwrap_or((&t, ""));
                let target = if path.is_empty() {
                    f.clone()
                } else {
                    f.parent().unwrap().join(path)
                };
                let at = format!("{}:{n}: ({t})", f.strip_prefix(repo()).unwrap().display());
                if !target.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                let is_page = target.extension().is_some_and(|x| x == "md");
                let canon = target.canonicalize().unwrap();
                let in_book = canon.starts_with(book_src().canonicalize().unwrap());
                if is_page
                    && in_book
                    && !in_summary
                        .iter()
                        .any(|s| s.canonicalize().ok() == Some(canon.clone()))
                {
                    broken.push(format!(
                        "{at}: page not in SUMMARY.md, so mdBook does not build it"
                    ));
                }
                if !frag.is_empty() && is_page {
                    let ids = heading_ids(&std::fs::read_to_string(&target).unwrap());
                    if !ids.contains(frag) {
                        broken.push(format!("{at}: no heading with id `{frag}`"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_scanner_skips_code_and_finds_anchors() {
    assert_eq!(
        link_targets("see [a](x.md#y) and `[b](no.md)` and ![i](img.png \"t\")"),
        vec!["x.md#y".to_string(), "img.png".to_string()]
    );
    let ids = heading_ids("# A b\n```\n# not a heading\n```\n## `vidcurate run`\n## A b\n");
    let want: BTreeSet<String> = ["a-b", "a-b-1", "vidcurate-run"].map(String::from).into();
    assert_eq!(ids, want);
}

/// A number the book states and the dry run that must print it.
struct Claim {
    page: &'static str,
    /// What the page says (whitespace as in prose: line breaks match spaces).
    says: &'static str,
    /// The pipeline file, and an edit of it (from, to) for a setting the page names.
    pipeline: &'static str,
    edit: (&'static str, &'static str),
    /// A query file the claim is about (written as `queries/claim.toml`, the pipeline's own
    /// query file pointed at it), if not the shipped one.
    queries: Option<&'static str>,
    /// What `run --dry-run` must print (whitespace collapsed).
    prints: &'static [&'static str],
}

const YEAR_IN_WINDOWS: &str = "domain = \"arson\"\nkind = \"micro\"\n[event]\nname = \"arson\"\npositive = [\"a fire set\"]\nnegative = [\"a lecture\"]\n[[groups]]\ntemplate = \"{place} arson\"\ncross = { place = [\"a\", \"b\", \"c\"] }\nparams = { published_after = \"2023-01-01\", published_before = \"2024-01-01\", window_days = 30, max_pages = 4 }\n";

const CLAIMS: &[Claim] = &[
    Claim {
        page: "reference/sources.md",
        says: "crash file needs 0.60 days of quota at `max_pages = 1` (60 searches)",
        pipeline: "pipelines/riskcue-car_crash.toml",
        edit: ("max_pages = 4", "max_pages = 1"),
        queries: None,
        prints: &["search.list at most 60 calls", "quota: 0.60 days"],
    },
    Claim {
        page: "reference/sources.md",
        says: "2.40 days at `max_pages = 4` (240 searches",
        pipeline: "pipelines/riskcue-car_crash.toml",
        edit: ("", ""),
        queries: None,
        prints: &["search.list at most 240 calls", "quota: 2.40 days"],
    },
    Claim {
        page: "reference/sources.md",
        says: "a year in 30-day windows at 4 pages: 156 searches unsplit, at most 2,901 split",
        pipeline: "pipelines/riskcue-arson.toml",
        edit: ("", ""),
        queries: Some(YEAR_IN_WINDOWS),
        prints: &[
            "search.list at most 2901 calls",
            "with none split: 156 searches",
        ],
    },
];

fn collapsed(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The numbers the book states about what a run costs are what `run --dry-run` prints.
#[test]
fn the_numbers_the_book_states_are_what_the_dry_run_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for d in ["pipelines", "queries"] {
        copy_dir(&repo().join(d), &root.join(d));
    }
    for (i, c) in CLAIMS.iter().enumerate() {
        let page = collapsed(&std::fs::read_to_string(book_src().join(c.page)).unwrap());
        assert!(
            page.contains(c.says),
            "{}: no longer says {:?}",
            c.page,
            c.says
        );
        let mut text = std::fs::read_to_string(repo().join(c.pipeline)).unwrap();
        if !c.edit.0.is_empty() {
            assert!(text.contains(c.edit.0), "{}: {:?}", c.pipeline, c.edit.0);
            text = text.replace(c.edit.0, c.edit.1);
        }
        if let Some(q) = c.queries {
            std::fs::write(root.join("queries/claim.toml"), q).unwrap();
            let own = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("queries = "))
                .unwrap()
                .to_string();
            text = text.replace(&own, "\"../queries/claim.toml\"");
        }
        let p = root.join(format!("pipelines/claim{i}.toml"));
        std::fs::write(&p, text).unwrap();
        let o = Command::new(bin())
            .args(["run", p.to_str().unwrap(), "--dry-run", "--out"])
            .arg(root.join(format!("run{i}")))
            .current_dir(root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = collapsed(&String::from_utf8_lossy(&o.stdout));
        for want in c.prints {
            assert!(
                out.contains(want),
                "{} says {:?}, but the dry run prints no {want:?}:\n{out}",
                c.page,
                c.says
            );
        }
    }
}
