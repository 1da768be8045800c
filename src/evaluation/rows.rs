//! A predictions file (JSONL, CSV with a header, Parquet) read a row at a time for the columns
//! asked for, without a map or a string per row: a JSON line's fields are walked in place (a
//! string without escapes is borrowed from the line), a CSV record is reused, a Parquet column
//! is read as one Arrow string array. Where a row was read (`FILE:LINE`, `FILE: row N`) is
//! only made into text for an error message. At a million predictions this is most of what
//! `evaluate` costs, so it is not `read_rows`' map per row.
//!
//! Reads the file; writes, calls and caches nothing.

use crate::error::{RunError, io};
use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::path::Path;

/// The most columns one read asks for.
pub const MAX_COLUMNS: usize = 8;

/// Where a row was read, made into text only when asked (`Display`).
#[derive(Clone, Copy)]
pub struct Loc<'a> {
    pub file: &'a str,
    /// 1-based line of a text file, or row of a Parquet file.
    pub n: usize,
    pub parquet: bool,
}

impl std::fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.parquet {
            write!(f, "{}: row {}", self.file, self.n)
        } else {
            write!(f, "{}:{}", self.file, self.n)
        }
    }
}

/// One row's values of the asked columns, in the order asked (None: absent or null), trimmed.
pub type Fields<'a> = [Option<Cow<'a, str>>; MAX_COLUMNS];

/// What a read found besides the rows: the file's columns (a JSONL file's: its first line's
/// keys) and which of the asked columns any row has (null or not).
#[derive(Debug, Default)]
pub struct Found {
    pub columns: Vec<String>,
    pub seen: [bool; MAX_COLUMNS],
}

impl Found {
    /// A CSV's or Parquet file's `columns`, and which of `names` they hold.
    fn of(columns: Vec<String>, names: &[&str]) -> Found {
        let mut seen = [false; MAX_COLUMNS];
        for (s, n) in seen.iter_mut().zip(names) {
            *s = columns.iter().any(|c| c == n);
        }
        Found { columns, seen }
    }
}

/// The file as messages name it, and its extension in lower case (what says how to read it).
pub(crate) fn shown_and_ext(path: &Path) -> (String, String) {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    (path.display().to_string(), ext.to_ascii_lowercase())
}

/// A CSV file's reader and its header's columns, trimmed.
pub(crate) fn csv_header(
    path: &Path,
    shown: &str,
) -> Result<(csv::Reader<std::fs::File>, Vec<String>), RunError> {
    let bad = |e: csv::Error| RunError::Config(format!("{shown}: {e}"));
    let mut rdr = csv::Reader::from_path(path).map_err(bad)?;
    let columns = rdr
        .headers()
        .map_err(bad)?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    Ok((rdr, columns))
}

/// Calls `each` for every row of `path` with the values of `names`.
pub fn each_row(
    path: &Path,
    names: &[&str],
    mut each: impl FnMut(Loc, &Fields) -> Result<(), RunError>,
) -> Result<Found, RunError> {
    assert!(names.len() <= MAX_COLUMNS, "at most {MAX_COLUMNS} columns");
    let (shown, ext) = shown_and_ext(path);
    match ext.as_str() {
        "jsonl" | "json" => jsonl(path, &shown, names, &mut each),
        "csv" => csv_rows(path, &shown, names, &mut each),
        "parquet" => parquet_rows(path, &shown, names, &mut each),
        other => Err(RunError::Config(format!(
            "{shown}: predictions must be .csv, .jsonl or .parquet, not .{other}"
        ))),
    }
}

/// The file's columns and its first row's values of `names`, reading no further: what tells
/// which kind of predictions a file holds before it is read whole.
pub fn peek(path: &Path, names: &[&str]) -> Result<(Found, Option<Vec<Option<String>>>), RunError> {
    use std::io::BufRead;
    let (shown, ext) = shown_and_ext(path);
    let mut first = None;
    let mut keep = |f: &Fields| {
        first = Some(
            f[..names.len()]
                .iter()
                .map(|x| x.as_ref().map(|s| s.to_string()))
                .collect(),
        )
    };
    let found = match ext.as_str() {
        "jsonl" | "json" => {
            let file = std::fs::File::open(path).map_err(io(path))?;
            let mut found = Found::default();
            for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
                let line = line.map_err(io(path))?;
                if line.trim().is_empty() {
                    continue;
                }
                let at = Loc {
                    file: &shown,
                    n: n + 1,
                    parquet: false,
                };
                let fields = parse_line(&line, names, at, &mut found)?;
                keep(&fields);
                break;
            }
            found
        }
        // A CSV's header and a Parquet file's schema name every column; the first row is read
        // by stopping the full reader at it.
        _ => {
            let mut seen_one = false;
            let r = each_row(path, names, |_, f| {
                if seen_one {
                    return Err(RunError::Internal(STOP.into()));
                }
                seen_one = true;
                keep(f);
                Ok(())
            });
            match r {
                Ok(found) => found,
                Err(RunError::Internal(m)) if m == STOP => each_columns(path, names)?,
                Err(e) => return Err(e),
            }
        }
    };
    Ok((found, first))
}

/// What `peek` stops the reader with (never shown).
const STOP: &str = "\u{0}peek";

/// A CSV's or Parquet file's columns, and which of `names` it has.
fn each_columns(path: &Path, names: &[&str]) -> Result<Found, RunError> {
    let shown = path.display().to_string();
    let columns = if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        csv_header(path, &shown)?.1
    } else {
        let f = std::fs::File::open(path).map_err(io(path))?;
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .map_err(|e| RunError::Config(format!("{shown}: {e}")))?
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    };
    Ok(Found::of(columns, names))
}

fn trimmed(c: Cow<'_, str>) -> Cow<'_, str> {
    match c {
        Cow::Borrowed(s) => Cow::Borrowed(s.trim()),
        Cow::Owned(s) if s.trim().len() == s.len() => Cow::Owned(s),
        Cow::Owned(s) => Cow::Owned(s.trim().to_string()),
    }
}

fn jsonl(
    path: &Path,
    shown: &str,
    names: &[&str],
    each: &mut dyn FnMut(Loc, &Fields) -> Result<(), RunError>,
) -> Result<Found, RunError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut found = Found::default();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = Loc {
            file: shown,
            n: n + 1,
            parquet: false,
        };
        let fields = parse_line(line, names, at, &mut found)?;
        each(at, &fields)?;
    }
    Ok(found)
}

/// One JSON line's values of `names`; the first line's keys become the columns.
fn parse_line<'l>(
    line: &'l str,
    names: &[&str],
    at: Loc,
    found: &mut Found,
) -> Result<Fields<'l>, RunError> {
    let mut fields: Fields = Default::default();
    let mut keys = found.columns.is_empty().then(Vec::new);
    let mut de = serde_json::Deserializer::from_str(line);
    de.deserialize_map(LineVisitor {
        names,
        fields: &mut fields,
        keys: keys.as_mut(),
        seen: &mut found.seen,
    })
    .and_then(|()| de.end())
    .map_err(|e| {
        let why = if e.is_data() && e.to_string().contains("invalid type") {
            "not a JSON object".to_string()
        } else {
            e.to_string()
        };
        RunError::Config(format!("{at}: {why}"))
    })?;
    if let Some(k) = keys {
        found.columns = k;
    }
    Ok(fields)
}

/// Walks one JSON object: the asked fields kept, the rest skipped unread.
struct LineVisitor<'n, 'o, 'de> {
    names: &'n [&'n str],
    fields: &'o mut Fields<'de>,
    keys: Option<&'o mut Vec<String>>,
    seen: &'o mut [bool; MAX_COLUMNS],
}

impl<'de> Visitor<'de> for LineVisitor<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if let Some(k) = self.keys.as_mut() {
                k.push(key.to_string());
            }
            match self.names.iter().position(|n| *n == key) {
                Some(i) => {
                    self.seen[i] = true;
                    self.fields[i] = map.next_value_seed(FieldValue)?.map(trimmed);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A field's value as text: a string as it is (borrowed when it has no escapes), null as none,
/// anything else as its JSON.
struct FieldValue;

impl<'de> DeserializeSeed<'de> for FieldValue {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(serde_json::Value::from(v).to_string())))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(serde_json::Value::from(v).to_string())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(serde_json::Value::from(v).to_string())))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(a))?;
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(a))?;
        Ok(Some(Cow::Owned(v.to_string())))
    }
}

fn csv_rows(
    path: &Path,
    shown: &str,
    names: &[&str],
    each: &mut dyn FnMut(Loc, &Fields) -> Result<(), RunError>,
) -> Result<Found, RunError> {
    let (mut rdr, columns) = csv_header(path, shown)?;
    let index: Vec<Option<usize>> = names
        .iter()
        .map(|n| columns.iter().position(|c| c == n))
        .collect();
    let mut rec = csv::StringRecord::new();
    let mut n = 1;
    loop {
        n += 1;
        let at = Loc {
            file: shown,
            n,
            parquet: false,
        };
        if !rdr
            .read_record(&mut rec)
            .map_err(|e| RunError::Config(format!("{at}: {e}")))?
        {
            break;
        }
        let mut fields: Fields = Default::default();
        for (f, i) in fields.iter_mut().zip(&index) {
            *f = i.and_then(|i| rec.get(i)).map(|v| Cow::Borrowed(v.trim()));
        }
        each(at, &fields)?;
    }
    Ok(Found::of(columns, names))
}

fn parquet_rows(
    path: &Path,
    shown: &str,
    names: &[&str],
    each: &mut dyn FnMut(Loc, &Fields) -> Result<(), RunError>,
) -> Result<Found, RunError> {
    let mut columns: Vec<String> = vec![];
    let mut row = 0;
    for b in super::parquet_batches(path)? {
        for f in b.schema().fields() {
            if !columns.contains(f.name()) {
                columns.push(f.name().clone());
            }
        }
        let cols: Vec<Option<arrow::array::ArrayRef>> = names
            .iter()
            .map(|n| {
                b.column_by_name(n)
                    .and_then(|c| arrow::compute::cast(c, &DataType::Utf8).ok())
            })
            .collect();
        for i in 0..b.num_rows() {
            row += 1;
            let mut fields: Fields = Default::default();
            for (f, c) in fields.iter_mut().zip(&cols) {
                *f = c.as_ref().and_then(|c| {
                    let s = c.as_string::<i32>();
                    s.is_valid(i).then(|| Cow::Borrowed(s.value(i).trim()))
                });
            }
            let at = Loc {
                file: shown,
                n: row,
                parquet: true,
            };
            each(at, &fields)?;
        }
    }
    Ok(Found::of(columns, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str, text: &str, names: &[&str]) -> (Vec<String>, Vec<Vec<Option<String>>>) {
        let (_d, p) = crate::store::test_support::file_with(name, text);
        let mut rows = vec![];
        let found = each_row(&p, names, |_, f| {
            rows.push(
                f[..names.len()]
                    .iter()
                    .map(|x| x.as_ref().map(|s| s.to_string()))
                    .collect(),
            );
            Ok(())
        })
        .unwrap();
        (found.columns, rows)
    }

    #[test]
    fn json_lines_give_strings_trimmed_other_values_as_json_and_null_as_absent() {
        let (cols, rows) = read(
            "p.jsonl",
            "{\"item_id\": \"a\", \"prediction\": \" B \", \"x\": [1]}\n\n{\"item_id\": \"b\\u0041\", \"prediction\": [[1, 2.5]], \"model\": null}\n{\"prediction\": 7, \"item_id\": \"c\"}\n",
            &["item_id", "prediction", "model"],
        );
        assert_eq!(cols, ["item_id", "prediction", "x"]);
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            rows,
            [
                vec![s("a"), s("B"), None],
                vec![s("bA"), s("[[1,2.5]]"), None],
                vec![s("c"), s("7"), None],
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_an_object_is_named() {
        let (_d, p) =
            crate::store::test_support::file_with("p.jsonl", "{\"item_id\": \"a\"}\n[1, 2]\n");
        let e = each_row(&p, &["item_id"], |_, _| Ok(())).unwrap_err();
        assert!(
            e.to_string().ends_with("p.jsonl:2: not a JSON object"),
            "{e}"
        );
    }

    #[test]
    fn csv_rows_name_their_line() {
        let (cols, rows) = read(
            "p.csv",
            "item_id,prediction\na, C \nb,\n",
            &["prediction", "item_id"],
        );
        assert_eq!(cols, ["item_id", "prediction"]);
        assert_eq!(rows[0], [Some("C".to_string()), Some("a".to_string())]);
        assert_eq!(rows[1], [Some(String::new()), Some("b".to_string())]);
    }
}
