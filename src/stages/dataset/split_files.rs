//! A dataset's published split or fold lists (FakeSV's `data-split/temporal/vid_time3_*.txt`
//! and `data-split/event/vid_fold_{1..5}.txt`): one video id a line. Reads the list files
//! (blank lines skipped; a BOM, CRLF and a last line without a newline are fine); writes
//! nothing itself: it tells the source which list holds each row, rejects the rows whose id
//! is listed more than once (`listed_twice`, naming every file:line), and finds the listed ids
//! no row has. Calls nothing; caches nothing.

use super::Row;
use crate::error::RunError;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// How many of the listed ids without a row a message names.
const NAMED: usize = 5;

/// What a set of lists gave the rows.
#[derive(Debug, Default)]
pub(super) struct Assigned {
    /// Per row (aligned with the rows): the index of the list that holds its id, for the rows
    /// without a problem (a row rejected here has none).
    pub(super) of_row: Vec<Option<usize>>,
    /// Listed ids that no row of the annotations has, each with its first `file:line`.
    pub(super) no_row: Vec<(String, String)>,
}

/// Every id of one list file with its line (from 1).
fn read_list(file: &Path, what: &str) -> Result<Vec<(u32, String)>, RunError> {
    let bytes = std::fs::read(file)
        .map_err(|e| RunError::Config(format!("source {what}: {}: {e}", file.display())))?;
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&bytes);
    let mut out = vec![];
    for (n, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = String::from_utf8_lossy(line);
        let id = line.trim();
        if !id.is_empty() {
            out.push((n as u32 + 1, id.to_string()));
        }
    }
    Ok(out)
}

/// Reads `lists` (each a file; its index is what `of_row` gives) and matches them to the
/// rows by id. A row without a problem whose id is listed more than once (twice in one list,
/// or in two) is rejected as `listed_twice`; `what` names the setting in messages.
pub(super) fn assign(
    lists: &[PathBuf],
    what: &str,
    rows: &mut [Row],
) -> Result<Assigned, RunError> {
    // Per id, every place it is listed: (list, "file:line").
    let mut places: HashMap<String, Vec<(usize, String)>> = HashMap::new();
    let mut order: Vec<String> = vec![];
    for (k, file) in lists.iter().enumerate() {
        let shown = file.display().to_string();
        for (line, id) in read_list(file, what)? {
            let at = places.entry(id.clone()).or_default();
            if at.is_empty() {
                order.push(id);
            }
            at.push((k, format!("{shown}:{line}")));
        }
    }
    let mut out = Assigned {
        of_row: vec![None; rows.len()],
        ..Default::default()
    };
    let mut have: HashSet<&str> = HashSet::new();
    for (i, row) in rows.iter_mut().enumerate() {
        let Some(id) = row.id.as_deref() else {
            continue;
        };
        let listed = places.get(id);
        if let Some((key, _)) = places.get_key_value(id) {
            have.insert(key.as_str());
        }
        if row.problem.is_some() {
            continue;
        }
        match listed.map(Vec::as_slice) {
            None | Some([]) => {}
            Some([(k, _)]) => out.of_row[i] = Some(*k),
            Some(many) => {
                let at: Vec<&str> = many.iter().map(|(_, at)| at.as_str()).collect();
                let why = format!(
                    "id {id:?} is listed {} times in {what}: {}",
                    many.len(),
                    at.join(", ")
                );
                row.reject("listed_twice", why);
            }
        }
    }
    out.no_row = order
        .into_iter()
        .filter(|id| !have.contains(id.as_str()))
        .map(|id| {
            let at = places[&id][0].1.clone();
            (id, at)
        })
        .collect();
    Ok(out)
}

/// The listed ids without a row, for a warning: how many, and the first few with their place.
pub(super) fn named(no_row: &[(String, String)]) -> String {
    let first: Vec<String> = no_row
        .iter()
        .take(NAMED)
        .map(|(id, at)| format!("{id:?} ({at})"))
        .collect();
    let more = match no_row.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!("{}{more}", first.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, line: u32) -> Row {
        let mut r = Row::new(format!("data.json:{line}"), line, 0);
        r.id = Some(id.into());
        r
    }

    #[test]
    fn rows_get_their_list_and_every_bad_line_is_named() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.txt");
        let b = d.path().join("b.txt");
        std::fs::write(&a, "\u{feff}x\r\n\r\ny\r\nd\r\ny\r\nghost").unwrap();
        std::fs::write(&b, "z\nd\n  \nspook\n").unwrap();
        let mut rows = vec![
            row("x", 1),
            row("y", 2),
            row("z", 3),
            row("d", 4),
            row("u", 5),
        ];
        let mut bad = row("spook", 6);
        bad.reject("unknown_label", "no label");
        rows.push(bad);
        let got = assign(&[a, b], "fold_files", &mut rows).unwrap();
        assert_eq!(got.of_row, [Some(0), None, Some(1), None, None, None]);
        let y = rows[1].problem.as_ref().unwrap();
        assert_eq!(y.reason, "listed_twice");
        assert!(
            y.detail.starts_with("data.json:2: ")
                && y.detail.contains("a.txt:3, ")
                && y.detail.contains("a.txt:5"),
            "{}",
            y.detail
        );
        let d4 = &rows[3].problem.as_ref().unwrap().detail;
        assert!(d4.contains("a.txt:4") && d4.contains("b.txt:2"), "{d4}");
        // A rejected row still has its id: only `ghost` has no row.
        assert_eq!(got.no_row.len(), 1);
        assert!(got.no_row[0].1.ends_with("a.txt:6"));
        assert!(named(&got.no_row).starts_with("\"ghost\" ("));
        let many: Vec<(String, String)> = (0..7).map(|i| (i.to_string(), "f:1".into())).collect();
        assert!(named(&many).ends_with("and 2 more"));
        let e = assign(&[d.path().join("nope.txt")], "split_files", &mut rows).unwrap_err();
        assert!(
            e.to_string().contains("split_files: ") && e.to_string().contains("nope.txt"),
            "{e}"
        );
    }
}
