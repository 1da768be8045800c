//! `--where`: a small filter language over table columns, so an analysis (or an annotation
//! export) can be restricted
//! (`domain = "demo-news" and score >= 0.8`, `language in (en, fr)`).
//!
//! Conditions are joined by `and`; each is `column op value` with op one of `=`, `!=`, `<`,
//! `<=`, `>`, `>=`, or `column in (v1, v2, ...)`. Values may be quoted; numeric comparisons
//! apply when both sides are numbers, string equality otherwise.

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};

/// A filter that does not parse (invalid input: exit 2 where a command reports it), or a
/// column that cannot be read as text.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{0}")]
    Syntax(String),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl From<FilterError> for crate::error::RunError {
    fn from(e: FilterError) -> Self {
        match e {
            FilterError::Syntax(m) => crate::error::RunError::Config(m),
            FilterError::Arrow(e) => crate::error::RunError::Internal(e.to_string()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
}

#[derive(Debug, Clone, PartialEq)]
struct Cond {
    column: String,
    op: Op,
    values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    conds: Vec<Cond>,
    pub text: String,
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
        .unwrap_or(s)
        .to_string()
}

impl Filter {
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        let mut conds = vec![];
        for part in split_and(text) {
            let part = part.trim();
            if part.is_empty() {
                return Err(FilterError::Syntax(format!(
                    "--where {text:?}: empty condition"
                )));
            }
            let lower = part.to_ascii_lowercase();
            if let Some(pos) = lower.find(" in ") {
                let column = part[..pos].trim().to_string();
                let list = part[pos + 4..].trim();
                let inner = list
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| {
                        FilterError::Syntax(format!(
                            "--where {text:?}: `in` needs a list in parentheses"
                        ))
                    })?;
                conds.push(Cond {
                    column,
                    op: Op::In,
                    values: inner.split(',').map(unquote).collect(),
                });
                continue;
            }
            let ops = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("!=", Op::Ne),
                ("=", Op::Eq),
                (">", Op::Gt),
                ("<", Op::Lt),
            ];
            let (pos, len, op) = ops
                .iter()
                .filter_map(|(s, op)| part.find(s).map(|p| (p, s.len(), op.clone())))
                .min_by_key(|(p, l, _)| (*p, usize::MAX - l))
                .ok_or_else(|| {
                    FilterError::Syntax(format!(
                        "--where {text:?}: no operator in {part:?} (use =, !=, <, <=, >, >= or in)"
                    ))
                })?;
            let column = part[..pos].trim().to_string();
            if column.is_empty() {
                return Err(FilterError::Syntax(format!(
                    "--where {text:?}: no column before the operator in {part:?}"
                )));
            }
            conds.push(Cond {
                column,
                op,
                values: vec![unquote(&part[pos + len..])],
            });
        }
        Ok(Self {
            conds,
            text: text.to_string(),
        })
    }

    pub fn columns(&self) -> Vec<&str> {
        self.conds.iter().map(|c| c.column.as_str()).collect()
    }

    /// The rows of `b` that pass, or None when `b` lacks a column the filter names.
    pub fn apply(&self, b: &RecordBatch) -> Result<Option<RecordBatch>, FilterError> {
        let mut keep = vec![true; b.num_rows()];
        for c in &self.conds {
            let Some(col) = b.column_by_name(&c.column) else {
                return Ok(None);
            };
            let s = arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8)?;
            let s = s.as_string::<i32>();
            for (i, k) in keep.iter_mut().enumerate() {
                if !*k {
                    continue;
                }
                let v = if s.is_valid(i) { s.value(i) } else { "" };
                *k = test(v, &c.op, &c.values);
            }
        }
        let mask = BooleanArray::from(keep);
        Ok(Some(arrow::compute::filter_record_batch(b, &mask)?))
    }
}

fn test(v: &str, op: &Op, values: &[String]) -> bool {
    let num = |s: &str| s.trim().parse::<f64>().ok();
    match op {
        Op::In => values
            .iter()
            .any(|w| w == v || matches!((num(v), num(w)), (Some(a), Some(b)) if a == b)),
        _ => {
            let w = &values[0];
            match (num(v), num(w)) {
                (Some(a), Some(b)) => match op {
                    Op::Eq => a == b,
                    Op::Ne => a != b,
                    Op::Lt => a < b,
                    Op::Le => a <= b,
                    Op::Gt => a > b,
                    Op::Ge => a >= b,
                    Op::In => unreachable!(),
                },
                _ => match op {
                    Op::Eq => v == w,
                    Op::Ne => v != w,
                    Op::Lt => v < w.as_str(),
                    Op::Le => v <= w.as_str(),
                    Op::Gt => v > w.as_str(),
                    Op::Ge => v >= w.as_str(),
                    Op::In => unreachable!(),
                },
            }
        }
    }
}

/// Splits on the word `and` outside quotes and parentheses.
fn split_and(text: &str) -> Vec<String> {
    let mut parts = vec![];
    let mut cur = String::new();
    let (mut depth, mut quote) = (0i32, None::<char>);
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            _ => {}
        }
        let rest: String = chars[i..]
            .iter()
            .take(5)
            .collect::<String>()
            .to_ascii_lowercase();
        if quote.is_none() && depth == 0 && rest.starts_with(" and ") {
            parts.push(std::mem::take(&mut cur));
            i += 5;
            continue;
        }
        cur.push(c);
        i += 1;
    }
    parts.push(cur);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn filters_rows_by_string_number_and_list() {
        let b = RecordBatch::try_from_iter([
            (
                "label",
                Arc::new(StringArray::from(vec!["fake", "real", "real", "fake"])) as _,
            ),
            (
                "score",
                Arc::new(Float32Array::from(vec![0.9, 0.4, 0.95, 0.7])) as _,
            ),
            (
                "domain",
                Arc::new(StringArray::from(vec!["a and b", "x", "y", "x"])) as _,
            ),
        ])
        .unwrap();
        let n = |e: &str| {
            Filter::parse(e)
                .unwrap()
                .apply(&b)
                .unwrap()
                .unwrap()
                .num_rows()
        };
        assert_eq!(n("label = real"), 2);
        assert_eq!(n("label = 'real' and score >= 0.9"), 1);
        assert_eq!(n("score < 0.8"), 2);
        assert_eq!(n("domain in (x, 'a and b')"), 3);
        assert_eq!(n("label != fake"), 2);
        assert!(
            Filter::parse("label = real")
                .unwrap()
                .apply(&b.project(&[1]).unwrap())
                .unwrap()
                .is_none()
        );
        assert!(Filter::parse("label real").is_err());
    }
}
