//! MultiHateClip's annotation TSVs (Social-AI-Studio/MultiHateClip, `English_data/annotation/`
//! and `Chinese_data/annotation/`: `train.tsv`, `valid.tsv`, `test.tsv`): tab-separated with a
//! header, CRLF line ends, CSV-style quoting where a cell holds a `"`. Columns: `Video_ID`
//! (YouTube or Bilibili id), `Majority_Voting` (Hateful / Offensive / Normal: the label), and
//! cells pandas wrote as Python literals: `Label` (each annotator's label), `Target_Victim`
//! (`['Woman', None]`), `Component` (the modalities that carry the hate) and `Duration` (the
//! hateful segments as `[(start, end)]` seconds).

use super::Row;
use crate::error::RunError;
use std::path::{Path, PathBuf};

const ID: &str = "Video_ID";
const LABEL: &str = "Majority_Voting";
/// The extra columns every MultiHateClip run has first; the files' other columns follow.
pub(super) const COLUMNS: [&str; 2] = ["label", "split"];
/// The dataset's list columns and their names here (`label` is taken by the majority vote, and
/// `Duration` holds segments, not a duration).
const LISTS: [(&str, &str); 4] = [
    ("Label", "annotator_labels"),
    ("Target_Victim", "target_victim"),
    ("Component", "component"),
    ("Duration", "segments"),
];
/// Nested lists deeper than this are refused rather than followed (the dataset's are 2 deep).
const MAX_DEPTH: usize = 16;

pub(super) fn default_labels() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Hateful", "Hateful"),
        ("Offensive", "Offensive"),
        ("Normal", "Normal"),
    ]
}

/// Where a file's column goes.
#[derive(Clone, Copy)]
enum Target {
    Skip,
    Title,
    Description,
    /// An extra column (its index among the names); `list`: always a Python list.
    Extra(usize, bool),
}

/// Every row of every file, each with its file's split; returns the extra columns' names (the
/// union of the files' columns, in first-seen order) and the rows.
pub(super) fn read(files: &[(PathBuf, String)]) -> Result<(Vec<String>, Vec<Row>), RunError> {
    let mut names: Vec<String> = COLUMNS.iter().map(|s| s.to_string()).collect();
    let mut rows = vec![];
    for (file, split) in files {
        read_file(file, split, &mut names, &mut rows)?;
    }
    // A column only a later file has: the earlier rows have no value in it.
    for r in &mut rows {
        r.extra.resize(names.len(), None);
    }
    Ok((names, rows))
}

fn column_name(header: &str) -> String {
    if let Some((_, ours)) = LISTS.iter().find(|(theirs, _)| *theirs == header) {
        return ours.to_string();
    }
    let name: String = header
        .to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect();
    if COLUMNS.contains(&name.as_str()) {
        format!("dataset_{name}")
    } else {
        name
    }
}

fn read_file(
    file: &Path,
    split: &str,
    names: &mut Vec<String>,
    rows: &mut Vec<Row>,
) -> Result<(), RunError> {
    let cfgerr = |msg: String| RunError::Config(format!("{}: {msg}", file.display()));
    let bytes = std::fs::read(file).map_err(|e| cfgerr(e.to_string()))?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    let mut records = records(bytes).into_iter();
    let Some((_, head)) = records.next() else {
        return Err(cfgerr("empty: no header line".into()));
    };
    let headers: Vec<String> = utf8_fields(head)
        .map_err(|e| cfgerr(format!("line 1: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let find = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            cfgerr(format!(
                "line 1: no `{name}` column (columns: {})",
                headers.join(", ")
            ))
        })
    };
    let (id_col, label_col) = (find(ID)?, find(LABEL)?);
    let targets = targets(&headers, [id_col, label_col], names);
    let shown = file.display().to_string();
    for (line, record) in records {
        let origin = format!("{shown}:{line}");
        let cells = match utf8_fields(record) {
            Ok(c) => c,
            Err(e) => {
                rows.push(Row::broken(origin, line, names.len(), "bad_line", e));
                continue;
            }
        };
        let get = |i: usize| cells.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
        let mut row = Row::new(origin, line, names.len());
        row.id = get(id_col).map(String::from);
        row.raw_label = get(label_col).map(String::from);
        row.split = Some(split.to_string());
        for (i, t) in targets.iter().enumerate() {
            let v = get(i);
            match *t {
                Target::Skip => {}
                Target::Title => row.title = v.map(String::from),
                Target::Description => row.description = v.map(String::from),
                Target::Extra(at, list) if list || v.is_some_and(|v| v.starts_with('[')) => {
                    match list_cell(v) {
                        Ok(json) => row.extra[at] = json,
                        Err(why) => row.reject(
                            "bad_list",
                            format!(
                                "column {} ({}): cannot read {:?} as a list: {why}",
                                i + 1,
                                headers[i],
                                v.unwrap_or_default()
                            ),
                        ),
                    }
                }
                Target::Extra(at, _) => row.extra[at] = v.map(String::from),
            }
        }
        rows.push(row);
    }
    Ok(())
}

/// Where each of a file's columns goes; new extra columns are added to `names`.
fn targets(headers: &[String], skip: [usize; 2], names: &mut Vec<String>) -> Vec<Target> {
    let mut out = vec![];
    for (i, h) in headers.iter().enumerate() {
        out.push(match column_name(h).as_str() {
            _ if skip.contains(&i) => Target::Skip,
            "title" => Target::Title,
            "description" => Target::Description,
            name => {
                let at = names.iter().position(|n| n == name).unwrap_or_else(|| {
                    names.push(name.to_string());
                    names.len() - 1
                });
                Target::Extra(at, LISTS.iter().any(|(theirs, _)| theirs == h))
            }
        });
    }
    out
}

/// The file's records with the line each starts on (from 1), blank lines left out. A record
/// is a line, unless a quote is open at its end (an odd number of `"` so far: CSV quoting
/// doubles a quote inside a quoted cell), when it goes on over the next line. Line numbers
/// are counted here because the csv crate's are off by one after a CRLF header.
fn records(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out = vec![];
    let mut open: Option<(u32, Vec<u8>)> = None;
    for (n, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match &mut open {
            Some((_, rec)) => {
                rec.push(b'\n');
                rec.extend_from_slice(line);
            }
            None => open = Some((n as u32 + 1, line.to_vec())),
        }
        let quotes = |r: &[u8]| r.iter().filter(|&&b| b == b'"').count();
        if open.as_ref().is_some_and(|(_, r)| quotes(r) % 2 == 0) {
            out.extend(open.take());
        }
    }
    // A quote never closed: the rest of the file is one record, as the csv crate reads it.
    out.extend(open);
    out.retain(|(_, r)| !r.iter().all(u8::is_ascii_whitespace));
    out
}

/// One record's cells (tab-separated, CSV quoting).
fn fields(record: &[u8]) -> Result<Vec<String>, csv::Error> {
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(b'\t')
        .has_headers(false)
        .flexible(true)
        .from_reader(record);
    match rdr.records().next() {
        Some(Ok(r)) => Ok(r.iter().map(String::from).collect()),
        Some(Err(e)) => Err(e),
        None => Ok(vec![]),
    }
}

/// A record's cells, the record first read as UTF-8 (the header's and every row's alike).
fn utf8_fields(record: Vec<u8>) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    Ok(fields(String::from_utf8(record)?.as_bytes())?)
}

/// A list cell as a JSON array (text); an empty cell, `None` or `nan` (what pandas writes for
/// a missing value) is no value.
pub(super) fn list_cell(cell: Option<&str>) -> Result<Option<String>, LiteralError> {
    let Some(s) = cell.map(str::trim) else {
        return Ok(None);
    };
    if matches!(s, "" | "None" | "nan" | "NaN") {
        return Ok(None);
    }
    match py_literal(s)? {
        v @ serde_json::Value::Array(_) => Ok(Some(v.to_string())),
        _ => Err(LiteralError::NotAList),
    }
}

/// A Python literal as `str()` of a list writes it: lists and tuples (both become JSON
/// arrays), strings in either quote with Python's escapes, numbers, `None` and `nan` (null),
/// `True` and `False`.
pub(super) fn py_literal(s: &str) -> Result<serde_json::Value, LiteralError> {
    let mut p = Lit { text: s, pos: 0 };
    let v = p.value(0)?;
    p.ws();
    match p.peek() {
        None => Ok(v),
        Some(c) => Err(p.err(format!("unexpected {c:?} after the value"))),
    }
}

/// Why a cell is no Python list: where reading stopped (the character, from 1, as people
/// count) and what was there, or a value that is not a list.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum LiteralError {
    #[error("{what} at character {at}")]
    At { what: String, at: usize },
    #[error("not a list")]
    NotAList,
}

struct Lit<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
}

impl Lit<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// A message naming the character where reading stopped (from 1), as people count.
    fn err(&self, what: impl std::fmt::Display) -> LiteralError {
        LiteralError::At {
            what: what.to_string(),
            at: self.text[..self.pos].chars().count() + 1,
        }
    }

    fn value(&mut self, depth: usize) -> Result<serde_json::Value, LiteralError> {
        self.ws();
        match self.peek() {
            None => Err(self.err("a value expected")),
            Some('[') => self.seq(']', depth),
            Some('(') => self.seq(')', depth),
            Some(q @ ('\'' | '"')) => self.string(q).map(serde_json::Value::String),
            Some(c) if c.is_ascii_digit() || matches!(c, '-' | '+' | '.') => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => self.word(),
            Some(c) => Err(self.err(format!("unexpected {c:?}"))),
        }
    }

    fn seq(&mut self, close: char, depth: usize) -> Result<serde_json::Value, LiteralError> {
        if depth >= MAX_DEPTH {
            return Err(self.err(format!("lists nested deeper than {MAX_DEPTH}")));
        }
        self.bump();
        let mut items = vec![];
        loop {
            self.ws();
            // Also closes after a trailing comma, as Python allows.
            if self.peek() == Some(close) {
                self.bump();
                return Ok(serde_json::Value::Array(items));
            }
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(',') => {}
                Some(c) if c == close => {}
                Some(c) => return Err(self.err(format!("{c:?} where ',' or {close:?} belongs"))),
                None => return Err(self.err(format!("no closing {close:?}"))),
            }
            if self.bump() == Some(close) {
                return Ok(serde_json::Value::Array(items));
            }
        }
    }

    fn string(&mut self, quote: char) -> Result<String, LiteralError> {
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.err("the string is not closed")),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => self.escape(&mut out)?,
                Some(c) => out.push(c),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), LiteralError> {
        let c = self
            .bump()
            .ok_or_else(|| self.err("the string is not closed"))?;
        let hex = |p: &mut Self, n: usize| -> Result<char, LiteralError> {
            let start = p.pos;
            for _ in 0..n {
                p.bump()
                    .filter(char::is_ascii_hexdigit)
                    .ok_or_else(|| p.err(format!("\\{c} needs {n} hex digits")))?;
            }
            u32::from_str_radix(&p.text[start..p.pos], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| p.err(format!("\\{c} names no character")))
        };
        match c {
            '\\' | '\'' | '"' => out.push(c),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            'x' => out.push(hex(self, 2)?),
            'u' => out.push(hex(self, 4)?),
            'U' => out.push(hex(self, 8)?),
            // A backslash before a line end continues the line.
            '\n' => {}
            // Python keeps an unknown escape as written.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
        Ok(())
    }

    fn number(&mut self) -> Result<serde_json::Value, LiteralError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E' | '_'))
        {
            self.bump();
        }
        let text = self.text[start..self.pos].replace('_', "");
        if let Ok(i) = text.parse::<i64>() {
            return Ok(i.into());
        }
        text.parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(serde_json::Value::Number)
            .ok_or_else(|| self.err(format!("{text:?} is not a number")))
    }

    fn word(&mut self) -> Result<serde_json::Value, LiteralError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            self.bump();
        }
        match &self.text[start..self.pos] {
            "None" | "nan" | "NaN" => Ok(serde_json::Value::Null),
            "True" => Ok(true.into()),
            "False" => Ok(false.into()),
            w => Err(self.err(format!("`{w}` is not a value (a string needs quotes)"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(s: &str) -> Result<Option<String>, LiteralError> {
        list_cell(Some(s))
    }

    #[test]
    fn python_lists_become_json_arrays() {
        let ok = |s: &str| cell(s).unwrap().unwrap();
        assert_eq!(ok("['Women', 'LGBTQ']"), r#"["Women","LGBTQ"]"#);
        assert_eq!(ok("[]"), "[]");
        assert_eq!(ok("  [ ]  "), "[]");
        assert_eq!(ok("['Woman', None]"), r#"["Woman",null]"#);
        assert_eq!(ok("[(30, 39), (0, 1.5)]"), "[[30,39],[0,1.5]]");
        assert_eq!(ok("[nan, True, False, -2]"), "[null,true,false,-2]");
        assert_eq!(ok("['a',]"), r#"["a"]"#);
        // Quotes of the other kind, escaped quotes, escapes, non-ASCII.
        assert_eq!(ok(r#"["Mama's Boy"]"#), r#"["Mama's Boy"]"#);
        assert_eq!(ok(r"['Mama\'s', 'a\\b']"), r#"["Mama's","a\\b"]"#);
        assert_eq!(ok(r#"['say "hi"']"#), r#"["say \"hi\""]"#);
        assert_eq!(ok(r"['\u5973\x41\n', '\d']"), r#"["女A\n","\\d"]"#);
        assert_eq!(ok("['女性', '同性恋']"), r#"["女性","同性恋"]"#);
    }

    #[test]
    fn missing_values_are_no_value() {
        for s in ["", "None", "nan", "NaN", "  "] {
            assert_eq!(cell(s), Ok(None), "{s:?}");
        }
        assert_eq!(list_cell(None), Ok(None));
    }

    #[test]
    fn broken_lists_say_where() {
        let bad = |s: &str| cell(s).unwrap_err().to_string();
        let deep = "[".repeat(40);
        for (s, says) in [
            ("['Woman'", "no closing ']'"),
            ("['Woman]", "not closed"),
            ("[Woman]", "`Woman` is not a value"),
            ("['a' 'b']", "at character 6"),
            ("['a'] x", "after the value"),
            (r"['\x4']", "hex digits"),
            (deep.as_str(), "nested deeper"),
        ] {
            assert!(bad(s).contains(says), "{s:?}: {}", bad(s));
        }
        assert_eq!(bad("'Woman'"), "not a list");
    }

    #[test]
    fn records_keep_their_first_line_and_quoted_line_breaks() {
        let text = b"h1\th2\r\na\t\"x\r\ny\"\r\n\r\nb\t\"\"\"q\"\"\"\nc\td";
        let recs: Vec<(u32, String)> = records(text)
            .into_iter()
            .map(|(n, r)| (n, String::from_utf8(r).unwrap()))
            .collect();
        let want = [
            (1, "h1\th2"),
            (2, "a\t\"x\ny\""),
            (5, "b\t\"\"\"q\"\"\""),
            (6, "c\td"),
        ];
        let want: Vec<(u32, String)> = want.iter().map(|(n, r)| (*n, r.to_string())).collect();
        assert_eq!(recs, want);
        assert_eq!(fields(recs[1].1.as_bytes()).unwrap(), ["a", "x\ny"]);
        assert_eq!(fields(recs[2].1.as_bytes()).unwrap(), ["b", "\"q\""]);
    }

    #[test]
    fn tsv_rows_carry_their_file_split_and_list_columns() {
        let d = crate::store::test_support::folder_with([
            (
                "train.tsv",
                "\u{feff}Video_ID\tMajority_Voting\tLabel\tTarget_Victim\tSplit\r\n\
                 a1\tHateful\t['Hateful', 'Normal']\t\"[\"\"Mama's Boy\"\"]\"\tx\r\n\
                 a2\tNormal\t[]\t['Woman'\ty",
            ),
            (
                "test.tsv",
                "Video_ID\tMajority_Voting\tNote\nb1\tOffensive\tseen",
            ),
        ]);
        let files = [
            (d.path().join("train.tsv"), "train".into()),
            (d.path().join("test.tsv"), "test".into()),
        ];
        let (names, rows) = read(&files).unwrap();
        assert_eq!(
            names,
            [
                "label",
                "split",
                "annotator_labels",
                "target_victim",
                "dataset_split",
                "note"
            ]
        );
        assert_eq!(rows[0].id.as_deref(), Some("a1"));
        assert_eq!(rows[0].raw_label.as_deref(), Some("Hateful"));
        assert_eq!(rows[0].split.as_deref(), Some("train"));
        assert_eq!(rows[0].extra[2].as_deref(), Some(r#"["Hateful","Normal"]"#));
        assert_eq!(rows[0].extra[3].as_deref(), Some(r#"["Mama's Boy"]"#));
        assert_eq!(rows[0].extra[5], None);
        let p = rows[1].problem.as_ref().unwrap();
        assert_eq!(p.reason, "bad_list");
        assert!(
            p.detail.contains("train.tsv:3: column 4 (Target_Victim)"),
            "{}",
            p.detail
        );
        assert_eq!((rows[2].line, rows[2].split.as_deref()), (2, Some("test")));
        assert_eq!(rows[2].extra[5].as_deref(), Some("seen"));
        let none = read(&[(d.path().join("test.tsv"), "t".into())]);
        assert!(none.is_ok());
        std::fs::write(d.path().join("x.tsv"), "id\tlabel\n").unwrap();
        let e = read(&[(d.path().join("x.tsv"), "t".into())]).unwrap_err();
        assert!(e.to_string().contains("no `Video_ID` column"), "{e}");
    }
}
