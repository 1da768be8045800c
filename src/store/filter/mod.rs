//! `--where`: a SQL boolean expression, as in a WHERE clause, that keeps the rows of a table
//! for `analyze` and `annotate export` (`domain = 'demo-news' and text_len >= 10`,
//! `language in ('en', 'fr')`, `title ilike '%flood%'`, `score is not null`).
//!
//! sqlparser (DataFusion's own SQL parser) reads the text (`parse`); the columns are then
//! type-checked against a table's schema (`compile`) and evaluated a RecordBatch at a time with
//! Arrow's compute kernels (`eval`): comparisons, Kleene `and`/`or`/`not`, `like`, `is null`,
//! arithmetic, so a batch is filtered in a few vectorised passes, never row by row. A NULL
//! compares to unknown and an unknown row is dropped, as in SQL. DataFusion itself was measured
//! and not taken: docs/src/architecture.md, "Why sqlparser and Arrow kernels, not DataFusion".
//!
//! Every error that is the expression's fault is invalid input (exit 2) and quotes the
//! expression with a caret under the part at fault: a syntax error, a column the table lacks
//! (with the columns it has, and the quoting the old `domain = demo-news` form needs now), a
//! comparison of text with a number (with the column's type).
//!
//! Reads and writes nothing itself; `table_schema` reads one shard footer of a stage table so a
//! filter can be checked before a long read.

mod compile;
mod eval;
mod hints;
mod parse;
mod schema;
#[cfg(test)]
mod tests;

pub use schema::table_schema;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::Schema;

/// A filter that is wrong (invalid input: exit 2 where a command reports it), or an Arrow
/// kernel that failed on the data (an internal error).
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The whole message: the expression quoted with a caret, and what to do.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl From<FilterError> for crate::error::RunError {
    fn from(e: FilterError) -> Self {
        match e {
            FilterError::Invalid(m) => crate::error::RunError::Config(m),
            FilterError::Arrow(e) => crate::error::RunError::Internal(e.to_string()),
        }
    }
}

/// Where a part of the expression stands: characters (not bytes) from its start, end exclusive,
/// so the caret lines up under what a person typed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

/// What is wrong and where; rendered with the expression once, at the top.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub span: Span,
    pub message: String,
    /// Lines after the caret: the columns there are, how to write it instead.
    pub notes: Vec<String>,
}

impl Problem {
    fn render(&self, text: &str) -> FilterError {
        let chars: Vec<char> = text.chars().collect();
        // The line the problem starts on: an expression may span lines in a script.
        let start = self.span.start.min(chars.len());
        let line_start = chars[..start]
            .iter()
            .rposition(|c| *c == '\n')
            .map_or(0, |i| i + 1);
        let line_end = chars[start..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(chars.len(), |i| start + i);
        let line: String = chars[line_start..line_end].iter().collect();
        let width = self.span.end.min(line_end).saturating_sub(start).max(1);
        let mut out = format!(
            "--where: {}\n  {line}\n  {}{}",
            self.message,
            " ".repeat(start - line_start),
            "^".repeat(width)
        );
        for n in &self.notes {
            out.push('\n');
            out.push_str(n);
        }
        FilterError::Invalid(out)
    }
}

/// A parsed `--where`: what it says, ready to be checked against any table's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    root: parse::Node,
    pub text: String,
}

impl Filter {
    /// Reads the expression; an error quotes it with a caret where the syntax breaks.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        let root = parse::parse(text).map_err(|p| p.render(text))?;
        Ok(Self {
            root,
            text: text.to_string(),
        })
    }

    /// The columns the expression names, each once, in the order they appear: what a reader
    /// must decode for it.
    pub fn columns(&self) -> Vec<&str> {
        let mut out = vec![];
        self.root.columns(&mut out);
        let mut seen = std::collections::HashSet::new();
        out.retain(|c| seen.insert(*c));
        out
    }

    /// Whether the expression fits a table of `schema` (every column there, every type right),
    /// before any of its rows are read. `table` names it in the error ("the source table").
    pub fn check(&self, schema: &Schema, table: &str) -> Result<(), FilterError> {
        compile::compile(&self.root, schema, &self.text, table)
            .map(|_| ())
            .map_err(|p| p.render(&self.text))
    }

    /// The keep-mask of `b` (SQL's unknown is false), or None when `b` lacks a column the
    /// filter names: some callers skip such a table rather than fail.
    pub fn mask(&self, b: &RecordBatch) -> Result<Option<BooleanArray>, FilterError> {
        if self
            .columns()
            .iter()
            .any(|c| !has_column(b.schema_ref(), c))
        {
            return Ok(None);
        }
        let plan = compile::compile(&self.root, b.schema_ref(), &self.text, "the table")
            .map_err(|p| p.render(&self.text))?;
        Ok(Some(eval::mask(&plan, b)?))
    }

    /// The rows of `b` that pass, or None when `b` lacks a column the filter names.
    pub fn apply(&self, b: &RecordBatch) -> Result<Option<RecordBatch>, FilterError> {
        match self.mask(b)? {
            Some(m) => Ok(Some(arrow::compute::filter_record_batch(b, &m)?)),
            None => Ok(None),
        }
    }

    /// The rows of `b` that pass, where every column must be there: a missing one is an error
    /// naming it and the columns `table` has.
    pub fn apply_to(&self, b: &RecordBatch, table: &str) -> Result<RecordBatch, FilterError> {
        self.check(b.schema_ref(), table)?;
        Ok(self.apply(b)?.unwrap_or_else(|| b.clone()))
    }
}

/// Column names match exactly, quoted or not (SQL would fold an unquoted name to lower case;
/// these tables' names are already lower case, and a projection by name needs the exact one).
fn has_column(schema: &Schema, name: &str) -> bool {
    schema.index_of(name).is_ok()
}
