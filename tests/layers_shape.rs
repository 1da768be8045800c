//! The layers test, second half: the shape of `src/`. No file over 600 lines, no function over
//! 80, no `Result<_, String>` (an error is a type that says what went wrong), no two modules of
//! one folder importing each other, and `commands/` (which only parse, call and print) under
//! 6,000 lines. Each excess is named (file, function, folder), so a change that adds one says
//! where to split.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;
const MAX_COMMANDS_LINES: usize = 6_000;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

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

fn rel(p: &Path) -> String {
    p.strip_prefix(src())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The code of a Rust file with comments, strings and character literals blanked (newlines
/// kept, so line numbers hold), so that braces and words in them are not seen as code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_lines = |s: &[char], out: &mut String| {
        out.extend(s.iter().filter(|&&ch| ch == '\n'));
    };
    while i < c.len() {
        let rest = &c[i..];
        let word_before = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if rest.starts_with(&['/', '/']) {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with(&['/', '*']) {
            let end = find(&c, i + 2, &['*', '/']).map_or(c.len(), |e| e + 2);
            keep_lines(&c[i..end], &mut out);
            i = end;
        } else if !word_before && raw_string_hashes(rest).is_some() {
            let (skip, hashes) = raw_string_hashes(rest).unwrap();
            let mut close = vec!['"'];
            close.extend(std::iter::repeat_n('#', hashes));
            let end = find(&c, i + skip, &close).map_or(c.len(), |e| e + close.len());
            out.push_str("\"\"");
            keep_lines(&c[i..end], &mut out);
            i = end;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            keep_lines(&c[i..j.min(c.len())], &mut out);
            i = j + 1;
        } else if c[i] == '\'' && rest.len() > 2 && rest[1] == '\\' {
            let end = find(&c, i + 2, &['\'']).map_or(c.len(), |e| e + 1);
            out.push_str("' '");
            i = end;
        } else if c[i] == '\'' && rest.len() > 2 && rest[2] == '\'' {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn find(c: &[char], from: usize, pat: &[char]) -> Option<usize> {
    (from..c.len()).find(|&k| c[k..].starts_with(pat))
}

/// `r"`, `r#"`, `br##"`...: how many characters open the literal and how many `#` close it.
fn raw_string_hashes(rest: &[char]) -> Option<(usize, usize)> {
    let mut k = if rest.first() == Some(&'b') { 1 } else { 0 };
    if rest.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let hashes = rest[k..].iter().take_while(|&&ch| ch == '#').count();
    (rest.get(k + hashes) == Some(&'"')).then_some((k + hashes + 1, hashes))
}

/// Every function with a body: its name, first line and length in lines.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = vec![];
    for (k, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let mut depth = 0i32;
        // `(`/`[` before the body: a `;` inside them (`[f64; 2]`) does not end a declaration.
        let mut nested = 0i32;
        let mut started = false;
        'scan: for (j, l) in lines.iter().enumerate().skip(k) {
            for ch in l.chars() {
                match ch {
                    '(' | '[' if !started => nested += 1,
                    ')' | ']' if !started => nested -= 1,
                    ';' if !started && depth == 0 && nested == 0 => break 'scan,
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => {
                        depth -= 1;
                        if started && depth == 0 {
                            out.push((name.clone(), k + 1, j - k + 1));
                            break 'scan;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

/// The name of the function a line declares (`pub(crate) async fn name<...>(`), if any.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        let qualifier = w.starts_with("pub")
            || matches!(w, "const" | "async" | "unsafe" | "extern")
            || w.starts_with('"');
        if w == "fn" {
            let name: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!name.is_empty()).then_some(name);
        }
        if !qualifier {
            return None;
        }
    }
    None
}

/// How many `Result<..., String>` the code names.
fn string_errors(code: &str) -> usize {
    let mut n = 0;
    let mut rest = code;
    while let Some(i) = rest.find("Result<") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "Result<".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let (mut depth, mut last_comma, mut end) = (0i32, None, None);
        for (k, ch) in rest.char_indices() {
            match ch {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(k),
                _ => {}
            }
        }
        if let (Some(c), Some(e)) = (last_comma, end) {
            if rest[c + 1..e].trim() == "String" {
                n += 1;
            }
        }
    }
    n
}

/// The first path segments after `prefix` (`super::a`, `super::{a, b::c}`).
fn segments_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            out.extend(group[..end].split(',').map(ident));
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

/// Per folder, its modules (files and subfolders, `mod.rs` aside) and the siblings each imports.
fn sibling_imports() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = vec![];
    rs_files(&src(), &mut files);
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let r = rel(f);
        let parts: Vec<&str> = r.trim_end_matches(".rs").split('/').collect();
        // Every folder above the file: the file belongs to the sibling module it sits under.
        for depth in 1..parts.len() + 1 {
            let (folder, module) = (parts[..depth - 1].join("/"), parts[depth - 1]);
            if module == "mod" || module == "lib" || module == "main" {
                continue;
            }
            let code = code_only(&std::fs::read_to_string(f).unwrap());
            // `super::` from the file climbs one folder per level below the module's folder.
            let own_depth = parts.len() - usize::from(parts.last() == Some(&"mod"));
            let below = own_depth + 1 - depth;
            let supers = "super::".repeat(below.max(1));
            let mut seen = segments_after(&code, &supers);
            if !folder.is_empty() {
                let full = format!("crate::{}::", folder.replace('/', "::"));
                seen.extend(segments_after(&code, &full));
            }
            seen.remove(module);
            out.entry(folder)
                .or_default()
                .entry(module.to_string())
                .or_default()
                .extend(seen);
        }
    }
    out
}

fn circles() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (folder, modules) in sibling_imports() {
        for (a, uses) in &modules {
            for b in uses {
                if a < b && modules.get(b).is_some_and(|u| u.contains(a)) {
                    let name = if folder.is_empty() { "src" } else { &folder };
                    found.insert(format!("{name}: {a} <-> {b}"));
                }
            }
        }
    }
    found
}

#[test]
fn src_keeps_its_shape() {
    let mut files = vec![];
    rs_files(&src(), &mut files);
    files.sort();
    let (mut long_files, mut long_fns, mut string_errs) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut commands_lines = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let r = rel(f);
        let n = text.lines().count();
        if r.starts_with("commands/") {
            commands_lines += n;
        }
        if n > MAX_FILE_LINES {
            long_files.insert(r.clone());
        }
        let code = code_only(&text);
        for (name, _, len) in functions(&code) {
            if len > MAX_FN_LINES {
                long_fns.insert(format!("{r} {name}"));
            }
        }
        let s = string_errors(&code);
        if s > 0 {
            string_errs.insert(format!("{r}: {s}"));
        }
    }
    let mut problems: Vec<String> = vec![];
    let named = |what: String, found: BTreeSet<String>| {
        found.into_iter().map(move |f| format!("{what}: {f}"))
    };
    problems.extend(named(
        format!("file over {MAX_FILE_LINES} lines"),
        long_files,
    ));
    problems.extend(named(
        format!("function over {MAX_FN_LINES} lines"),
        long_fns,
    ));
    problems.extend(named(
        "Result<_, String> (give the error a type)".into(),
        string_errs,
    ));
    problems.extend(named(
        "modules of one folder importing each other".into(),
        circles(),
    ));
    if commands_lines > MAX_COMMANDS_LINES {
        problems.push(format!(
            "src/commands/ has {commands_lines} lines (at most {MAX_COMMANDS_LINES}): what a command computes belongs in a layer below it"
        ));
    }
    assert!(problems.is_empty(), "src/ shape:\n{}", problems.join("\n"));
}

#[test]
fn the_shape_scanners_see_code_not_comments_or_strings() {
    let code = code_only(
        "fn a() {\n    let s = \"}{ fn x() {\";\n    // fn y() {\n    let c = '{';\n}\nconst R: &str = r#\"a \" { \"#;\npub(crate) async fn b<T>(x: T) -> Result<Vec<u8>, String> where T: Copy { x; }\ntrait T { fn decl(&self); }\nfn c(p: [f64; 2]) -> [u8; 4] {\n    [0; 4]\n}\n",
    );
    let f = functions(&code);
    let names: Vec<(&str, usize, usize)> = f.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    assert_eq!(names, vec![("a", 1, 5), ("b", 7, 1), ("c", 9, 3)]);
    assert_eq!(string_errors(&code), 1);
    assert_eq!(
        string_errors("Result<(), std::string::String> Result<String, E> MyResult<u8, String>"),
        0
    );
    let s = segments_after(
        "use super::{a, b::c};\nuse super::d::e; crate::x::super::z",
        "super::",
    );
    assert_eq!(s, ["a", "b", "d"].map(String::from).into());
}
