//! MultiHateClip's `text.json` (Social-AI-Studio/MultiHateClip, `English_data/text.json` and
//! `Chinese_data/text.json`): one JSON object keyed by video id, each value an object with
//! `title`, `description`, `transcript`, `label` (an LLM's label as the model wrote it: mostly
//! Normal / Offensive / Hateful or 正常的 / 冒犯的 / 仇恨的, a few a sentence or "Output:
//! Normal") and `language_check` (true / false); some entries have only `title` and
//! `transcript`, and the files hold more ids than the TSVs (5,563 English entries for 1,000
//! annotated videos). Key names are read without regard to case, `_` or `-` (`LLM_label` is
//! the label too); other keys are left out.
//!
//! Reads the file whole. Writes into the rows (joined by id): title and description where the
//! TSVs give none, and the extra columns `dataset_transcript`, `llm_label` (as written) and
//! `language_check`. A value of another type, an entry that is no object, an id given twice
//! or a column given by two keys is a `bad_text` reject naming text.json:line, the id and the
//! key. Counts the entries without a row and the rows without an entry. Calls nothing;
//! caches nothing.

use super::Row;
use crate::error::RunError;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The extra columns text.json adds (the transcript is the dataset's, not a `transcript`
/// stage's, whose release column is `transcript`).
pub(super) const COLUMNS: [&str; 3] = ["dataset_transcript", "llm_label", "language_check"];

/// One of the columns an entry's keys fill.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Title,
    Description,
    Transcript,
    Label,
    LanguageCheck,
}

/// The field a key names: case, `_`, `-` and spaces aside.
fn field(key: &str) -> Option<Field> {
    let k: String = key
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect();
    Some(match k.as_str() {
        "title" => Field::Title,
        "description" => Field::Description,
        "transcript" => Field::Transcript,
        "label" | "llmlabel" => Field::Label,
        "languagecheck" => Field::LanguageCheck,
        _ => return None,
    })
}

/// Where an id and its keys are written.
#[derive(Debug, Default)]
struct Lines {
    /// Every line the id is a key on (more than one: given twice).
    at: Vec<u32>,
    /// The line of each key of the id's entry (the last, if one is given twice).
    keys: HashMap<String, u32>,
}

/// text.json, read.
pub(super) struct TextJson {
    shown: String,
    entries: serde_json::Map<String, Value>,
    lines: HashMap<String, Lines>,
}

/// What the join counted.
#[derive(Debug, Default)]
pub(super) struct Joined {
    /// Entries whose id no row has, each with its `file:line`, in file order.
    pub(super) no_row: Vec<(String, String)>,
    /// Rows without a problem that have no entry.
    pub(super) no_entry: usize,
}

/// Reads the file; one that is not JSON, or not an object, is a configuration error naming
/// its line.
pub(super) fn read(file: &Path) -> Result<TextJson, RunError> {
    let shown = file.display().to_string();
    let cfgerr = |msg: String| RunError::Config(format!("source text {shown}: {msg}"));
    let bytes = std::fs::read(file).map_err(|e| cfgerr(e.to_string()))?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| cfgerr(e.to_string()))?;
    let entries = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(cfgerr("not a JSON object keyed by video id".into())),
        Err(e) => {
            let at = format!("{shown}:{}:{}", e.line(), e.column());
            return Err(RunError::Config(format!("source text {at}: {e}")));
        }
    };
    Ok(TextJson {
        lines: key_lines(text),
        shown,
        entries,
    })
}

/// The line of every key of the outer object (the ids) and of the objects right inside it.
/// Run on text serde_json has read, so strings and brackets are well formed.
fn key_lines(text: &str) -> HashMap<String, Lines> {
    let b = text.as_bytes();
    let (mut depth, mut line, mut i) = (0usize, 1u32, 0usize);
    let mut id: Option<String> = None;
    let mut out: HashMap<String, Lines> = HashMap::new();
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let end = (i + 1).min(b.len());
                let colon = b[end..].iter().find(|c| !c.is_ascii_whitespace()) == Some(&b':');
                if colon && (depth == 1 || depth == 2) {
                    let key: String = serde_json::from_str(&text[start..end]).unwrap_or_default();
                    if depth == 1 {
                        out.entry(key.clone()).or_default().at.push(line);
                        id = Some(key);
                    } else if let Some(l) = id.as_ref().and_then(|id| out.get_mut(id)) {
                        l.keys.insert(key, line);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Why an entry cannot be joined: the message names text.json:line, the id and the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadText(String);

/// What a JSON value is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl TextJson {
    /// `file:line` of an id's entry, or of one of its keys.
    fn at(&self, id: &str, key: Option<&str>) -> String {
        let l = self.lines.get(id);
        let line = key.and_then(|k| l.and_then(|l| l.keys.get(k)));
        match line.or_else(|| l.and_then(|l| l.at.last())) {
            Some(n) => format!("{}:{n}", self.shown),
            None => self.shown.clone(),
        }
    }

    /// Joins the entries to the rows by id, into `names`' text.json columns.
    pub(super) fn join(&self, names: &[String], rows: &mut [Row]) -> Joined {
        let cols: Vec<Option<usize>> = COLUMNS.iter().map(|c| super::col(names, c)).collect();
        let mut out = Joined::default();
        let mut have: HashSet<&str> = HashSet::new();
        for row in rows.iter_mut() {
            let Some(id) = row.id.clone() else {
                continue;
            };
            if let Some((k, _)) = self.entries.get_key_value(&id) {
                have.insert(k.as_str());
            }
            if row.problem.is_some() {
                continue;
            }
            match self.entries.get(&id) {
                None => out.no_entry += 1,
                Some(v) => {
                    if let Err(why) = self.fill(&id, v, &cols, row) {
                        row.reject("bad_text", why);
                    }
                }
            }
        }
        let mut no_row: Vec<(u32, String)> = (self.entries.keys())
            .filter(|k| !have.contains(k.as_str()))
            .map(|k| {
                let line = self.lines.get(k).and_then(|l| l.at.first().copied());
                (line.unwrap_or(0), k.clone())
            })
            .collect();
        no_row.sort();
        out.no_row = no_row
            .into_iter()
            .map(|(line, id)| (id, format!("{}:{line}", self.shown)))
            .collect();
        out
    }

    /// One entry into one row; the first problem is returned, naming file:line, id and key.
    fn fill(
        &self,
        id: &str,
        v: &Value,
        cols: &[Option<usize>],
        row: &mut Row,
    ) -> Result<(), BadText> {
        let bad = |msg: String| Err(BadText(msg));
        let lines = self
            .lines
            .get(id)
            .map(|l| l.at.as_slice())
            .unwrap_or_default();
        if lines.len() > 1 {
            let at: Vec<String> = lines.iter().map(|n| n.to_string()).collect();
            return bad(format!(
                "{}: id {id:?} is given on lines {}",
                self.shown,
                at.join(", ")
            ));
        }
        let Value::Object(o) = v else {
            let at = self.at(id, None);
            return bad(format!(
                "{at}: the entry of id {id:?} is {}, not an object",
                kind(v)
            ));
        };
        let mut seen: Vec<(Field, &str)> = vec![];
        for (key, value) in o {
            let Some(f) = field(key) else {
                continue;
            };
            let at = self.at(id, Some(key));
            if let Some((_, other)) = seen.iter().find(|(g, _)| *g == f) {
                return bad(format!(
                    "{at}: id {id:?}: keys `{other}` and `{key}` give one column"
                ));
            }
            seen.push((f, key));
            let text = match (f, value) {
                (_, Value::Null) => None,
                (Field::LanguageCheck, Value::Bool(b)) => Some(b.to_string()),
                (Field::LanguageCheck, other) => {
                    let got = kind(other);
                    return bad(format!(
                        "{at}: id {id:?}, key `{key}`: {got} where true or false belongs"
                    ));
                }
                (_, Value::String(s)) => Some(s.clone()),
                (_, other) => {
                    let got = kind(other);
                    return bad(format!(
                        "{at}: id {id:?}, key `{key}`: {got} where text belongs"
                    ));
                }
            };
            // Titles and descriptions the TSVs give stay; an empty one is none.
            let text = text.filter(|s| !s.is_empty());
            match f {
                Field::Title => row.title = row.title.take().or(text),
                Field::Description => row.description = row.description.take().or(text),
                Field::Transcript => set(row, cols[0], text),
                Field::Label => set(row, cols[1], text),
                Field::LanguageCheck => set(row, cols[2], text),
            }
        }
        Ok(())
    }
}

fn set(row: &mut Row, col: Option<usize>, value: Option<String>) {
    if let Some(c) = col {
        row.extra[c] = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_on_their_lines() {
        let text = "{\n  \"a\": {\"Title\": \"x \\\" :\", \"n\": [1, {\"deep\": 2}],\n   \"label\": \"y\"},\n  \"b\": \"c\",\n  \"a\": {}\n}";
        let l = key_lines(text);
        assert_eq!(l["a"].at, [2, 5]);
        assert_eq!(l["a"].keys["Title"], 2);
        assert_eq!(l["a"].keys["label"], 3);
        assert!(!l["a"].keys.contains_key("deep"));
        assert_eq!(l["b"].at, [4]);
        assert_eq!(field("LLM_label"), Some(Field::Label));
        assert_eq!(field("Language-Check"), Some(Field::LanguageCheck));
        assert_eq!(field("titles"), None);
    }
}
