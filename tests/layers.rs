//! The crate's layers, written once (here and in the book, docs/src/architecture.md): each
//! top-level module of `src/` may import only the modules listed before it. The test reads every
//! `.rs` file under `src/` and fails, naming the file, line and import, when a module reaches one
//! above it, so an import cycle between top-level modules cannot come back unnoticed. The shape
//! of the files (their length, their functions', their error types, imports inside a folder) is
//! `layers_shape.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bottom first. `runtime` knows no engine, client, stage or plan: it runs a chain it is
/// handed; `plan` (the planner) builds that chain from `config` and the `stages` registry;
/// `report`, `release`, `annotation` and `evaluation` read what runs wrote; `commands` sit on
/// top, each parsing, calling one of them and printing, and `main.rs` dispatches to them.
const LAYERS: &[&str] = &[
    "error",
    "profile",
    "secrets",
    "tls",
    "paths",
    "record",
    "config",
    "store",
    "runtime",
    "engines",
    "clients",
    "benchmark",
    "stages",
    "plan",
    "report",
    "release",
    "annotation",
    "evaluation",
    "commands",
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`src/store/shards.rs` → `store`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::NAME` (or `vidcurate::NAME` in the binary) outside comments, with its line.
fn imports(text: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().next_back();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((n + 1, name));
            }
        }
    }
    out
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank: BTreeMap<&str, usize> = LAYERS.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let mut files = vec![];
    rs_files(&src, &mut files);
    files.sort();
    let mut seen = std::collections::BTreeSet::new();
    let mut wrong = vec![];
    for f in &files {
        let module = top_module(&src, f);
        if module == "lib" || module == "main" {
            continue;
        }
        seen.insert(module.clone());
        let Some(&own) = rank.get(module.as_str()) else {
            wrong.push(format!(
                "{}: top-level module `{module}` has no place in LAYERS (tests/layers.rs)",
                f.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (line, target) in imports(&text, "crate::") {
            if target == module {
                continue;
            }
            match rank.get(target.as_str()) {
                Some(&t) if t < own => {}
                Some(_) => wrong.push(format!(
                    "{}:{line}: `{module}` imports `{target}`, which is not below it",
                    f.display()
                )),
                None => wrong.push(format!(
                    "{}:{line}: `crate::{target}` is no top-level module in LAYERS",
                    f.display()
                )),
            }
        }
    }
    // The binary may use any layer, but only through the library's public paths.
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap();
    assert!(
        imports(&main, "crate::").is_empty(),
        "main.rs is the binary: it reaches the library as vidcurate::"
    );
    for m in LAYERS {
        assert!(
            seen.contains(*m),
            "LAYERS names `{m}`, which src/ no longer has"
        );
    }
    assert!(
        wrong.is_empty(),
        "layer order (bottom first): {}\n{}",
        LAYERS.join(" < "),
        wrong.join("\n")
    );
}

#[test]
fn the_import_scanner_sees_paths_and_skips_comments() {
    let text = "use crate::store::Store;\n// crate::plan in a comment\nlet x = crate::runtime::backoff(1, \"k\"); // crate::stages\nnotcrate::x";
    assert_eq!(
        imports(text, "crate::"),
        vec![(1, "store".to_string()), (3, "runtime".to_string())]
    );
}

/// One command never imports another: what two commands share lives in a layer below
/// `commands/`, so a command can change without another breaking.
#[test]
fn no_command_imports_another() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let mut files = vec![];
    rs_files(&dir, &mut files);
    files.sort();
    let command_of = |f: &Path| top_module(&dir, f);
    let commands: std::collections::BTreeSet<String> = files
        .iter()
        .map(|f| command_of(f))
        .filter(|c| c != "mod")
        .collect();
    let mut pairs = std::collections::BTreeMap::<(String, String), String>::new();
    for f in &files {
        let own = command_of(f);
        if own == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        // `crate::commands::X`, and `super::X` from a file directly under commands/.
        let mut found: Vec<(usize, String)> = vec![];
        for (line, l) in text.lines().enumerate() {
            let code = l.split("//").next().unwrap_or("");
            for (prefix, top_level_only) in [("crate::commands::", false), ("super::", true)] {
                if top_level_only && f.parent() != Some(dir.as_path()) {
                    continue;
                }
                for (_, name) in imports(code, prefix) {
                    found.push((line + 1, name));
                }
            }
        }
        for (line, target) in found {
            if target != own && commands.contains(&target) {
                pairs
                    .entry((own.clone(), target))
                    .or_insert(format!("{}:{line}", f.display()));
            }
        }
    }
    let new: Vec<String> = pairs
        .iter()
        .map(|((a, b), at)| format!("{at}: command `{a}` imports command `{b}`"))
        .collect();
    assert!(
        new.is_empty(),
        "shared logic belongs in a layer below commands/ (src/benchmark, store, stages):\n{}",
        new.join("\n")
    );
}
