//! The error for a column the table lacks: the column named with a caret, the columns there
//! are, and, when the name stands where a value belongs (`domain = demo-news`, the filter
//! syntax before SQL, or `label = "real"`, a double-quoted value), the whole expression again
//! with those values in single quotes, ready to paste.
//!
//! Reads and writes nothing.

use super::Problem;
use super::parse::{Kind, Node};
use arrow::datatypes::Schema;

pub(super) fn unknown_column(
    root: &Node,
    schema: &Schema,
    chars: &[char],
    table: &str,
    at: &Node,
    name: &str,
) -> Problem {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut notes = vec![format!("{table} has the columns: {}", names.join(", "))];
    if let Some(same) = names.iter().find(|c| c.eq_ignore_ascii_case(name)) {
        notes.push(format!(
            "names match exactly: did you mean `{same}`? (\"{same}\" in double quotes if need be)"
        ));
    }
    let mut spans = vec![];
    values(root, schema, &mut spans);
    if !spans.is_empty() {
        notes.push(format!(
            "text takes single quotes in SQL (double quotes name a column): {}",
            quoted(chars, spans)
        ));
    }
    Problem {
        span: at.span,
        message: format!("no column `{name}` in {table}"),
        notes,
    }
}

/// Whether every column under `n` is in `schema` (`Some(true)`), none is (`Some(false)`), or
/// it names no column or some of each (None).
fn resolves(n: &Node, schema: &Schema) -> Option<bool> {
    let mut cols = vec![];
    n.columns(&mut cols);
    let known = cols.iter().filter(|c| schema.index_of(c).is_ok()).count();
    match (cols.len(), known) {
        (0, _) => None,
        (all, k) if k == all => Some(true),
        (_, 0) => Some(false),
        _ => None,
    }
}

/// The spans of operands that stand where a value belongs and name only unknown columns: what
/// the writer meant as text.
fn values(n: &Node, schema: &Schema, out: &mut Vec<super::Span>) {
    let known = |x: &Node| resolves(x, schema) == Some(true);
    let unknown = |x: &Node| resolves(x, schema) == Some(false);
    match &n.kind {
        Kind::And(a, b) | Kind::Or(a, b) => {
            values(a, schema, out);
            values(b, schema, out);
        }
        Kind::Not(a) => values(a, schema, out),
        Kind::Cmp(a, _, b) if known(a) && unknown(b) => out.push(b.span),
        Kind::Cmp(a, _, b) if known(b) && unknown(a) => out.push(a.span),
        Kind::In { subject, list, .. } if known(subject) => {
            out.extend(list.iter().filter(|x| unknown(x)).map(|x| x.span));
        }
        Kind::Between {
            subject, low, high, ..
        } if known(subject) => {
            out.extend([low, high].iter().filter(|x| unknown(x)).map(|x| x.span));
        }
        Kind::Like {
            subject, pattern, ..
        } if known(subject) && unknown(pattern) => out.push(pattern.span),
        _ => {}
    }
}

/// The expression with each span's text in single quotes (a double-quoted one unwrapped first,
/// a quote inside doubled as SQL escapes it).
fn quoted(chars: &[char], mut spans: Vec<super::Span>) -> String {
    spans.sort_by_key(|s| s.start);
    let mut out = String::new();
    let mut at = 0;
    for s in spans {
        let (start, end) = (s.start.max(at).min(chars.len()), s.end.min(chars.len()));
        out.extend(&chars[at..start]);
        let mut v: String = chars[start..end.max(start)].iter().collect();
        if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
            v = v[1..v.len() - 1].replace("\"\"", "\"");
        }
        out.push('\'');
        out.push_str(&v.replace('\'', "''"));
        out.push('\'');
        at = end.max(start);
    }
    out.extend(&chars[at..]);
    out
}
