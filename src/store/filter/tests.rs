//! The `--where` engine on small in-memory batches: every operator, SQL's NULLs, and each error
//! message in full with its caret. Reads and writes no files.

use super::*;
use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float32Array, Int64Array, ListArray, StringArray,
    UInt32Array,
};
use arrow::datatypes::Int32Type;
use std::sync::Arc;

/// Six rows with a NULL in most columns, so every operator meets one.
fn batch() -> RecordBatch {
    let hist = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1)]),
        None,
        Some(vec![]),
        Some(vec![Some(2)]),
        Some(vec![Some(3)]),
        Some(vec![Some(4)]),
    ]);
    let source: DictionaryArray<Int32Type> = vec!["yt", "tt", "yt", "yt", "tt", "yt"]
        .into_iter()
        .collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        (
            "video_id",
            Arc::new(StringArray::from(vec!["v0", "v1", "v2", "v3", "v4", "v5"])),
        ),
        (
            "label",
            Arc::new(StringArray::from(vec![
                "fake", "real", "real", "fake", "real", "fake",
            ])),
        ),
        (
            "domain",
            Arc::new(StringArray::from(vec![
                Some("demo-news"),
                Some("a and b"),
                None,
                Some("Flood_50%"),
                Some("it's"),
                Some("demo-sport"),
            ])),
        ),
        (
            "score",
            Arc::new(Float32Array::from(vec![0.9, 0.4, 0.95, 0.7, 0.2, 1.0])),
        ),
        (
            "text_len",
            Arc::new(UInt32Array::from(vec![12, 3, 40, 0, 10, 7])),
        ),
        (
            "n",
            Arc::new(Int64Array::from(vec![
                Some(1),
                None,
                Some(-2),
                Some(3),
                Some(1),
                None,
            ])),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                None,
                Some(true),
                Some(false),
                None,
            ])),
        ),
        ("hist", Arc::new(hist)),
        ("source", Arc::new(source)),
        (
            "text len",
            Arc::new(UInt32Array::from(vec![1, 2, 3, 4, 5, 6])),
        ),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

/// The video ids of the rows `expr` keeps.
fn kept(expr: &str) -> Vec<String> {
    let b = batch();
    let out = Filter::parse(expr)
        .unwrap_or_else(|e| panic!("{e}"))
        .apply(&b)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("every column is there");
    let ids = out
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    ids.iter().map(|s| s.unwrap().to_string()).collect()
}

fn ids(list: &[usize]) -> Vec<String> {
    list.iter().map(|i| format!("v{i}")).collect()
}

/// The whole message of an expression that is wrong for `batch()`.
fn error(expr: &str) -> String {
    let e = match Filter::parse(expr) {
        Err(e) => e,
        Ok(f) => f.apply_to(&batch(), "the test table").expect_err(expr),
    };
    match e {
        FilterError::Invalid(m) => m,
        FilterError::Arrow(e) => panic!("{expr}: internal error {e}"),
    }
}

#[test]
fn comparisons_of_numbers_text_and_booleans() {
    assert_eq!(kept("text_len = 10"), ids(&[4]));
    assert_eq!(kept("text_len != 10"), ids(&[0, 1, 2, 3, 5]));
    assert_eq!(kept("text_len <> 10"), ids(&[0, 1, 2, 3, 5]));
    assert_eq!(kept("text_len < 7"), ids(&[1, 3]));
    assert_eq!(kept("text_len <= 7"), ids(&[1, 3, 5]));
    assert_eq!(kept("text_len > 10"), ids(&[0, 2]));
    assert_eq!(kept("text_len >= 10"), ids(&[0, 2, 4]));
    assert_eq!(kept("label = 'real'"), ids(&[1, 2, 4]));
    assert_eq!(kept("'real' = label"), ids(&[1, 2, 4]));
    assert_eq!(kept("label > 'f' and label < 'g'"), ids(&[0, 3, 5]));
    assert_eq!(kept("flag = true"), ids(&[0, 3]));
    assert_eq!(kept("flag"), ids(&[0, 3]));
    // Integers and floats compare as numbers; a UInt32 column meets a negative literal.
    assert_eq!(kept("text_len > 9.5"), ids(&[0, 2, 4]));
    assert_eq!(kept("n > -3 and n < 0"), ids(&[2]));
    assert_eq!(kept("text_len > n"), ids(&[0, 2, 4]));
    // A dictionary column is text; a quoted name reaches a column with a space.
    assert_eq!(kept("source = 'tt'"), ids(&[1, 4]));
    assert_eq!(kept("\"text len\" >= 5"), ids(&[4, 5]));
    // SQL's doubled quote is a quote inside text.
    assert_eq!(kept("domain = 'it''s'"), ids(&[4]));
}

#[test]
fn a_float32_column_meets_a_literal_in_its_own_type() {
    // 0.9 stored as Float32 is 0.8999999761 as a Float64: it must still be >= 0.9.
    assert_eq!(kept("score >= 0.9"), ids(&[0, 2, 5]));
    assert_eq!(kept("score = 0.9"), ids(&[0]));
    assert_eq!(kept("score between 0.4 and 0.9"), ids(&[0, 1, 3]));
}

#[test]
fn and_or_not_and_parentheses() {
    assert_eq!(kept("label = 'real' and text_len >= 10"), ids(&[2, 4]));
    assert_eq!(kept("label = 'real' or text_len >= 10"), ids(&[0, 1, 2, 4]));
    assert_eq!(kept("not label = 'real'"), ids(&[0, 3, 5]));
    // `and` binds tighter than `or`, as in SQL; parentheses change it.
    assert_eq!(
        kept("text_len = 0 or label = 'real' and text_len >= 10"),
        ids(&[2, 3, 4])
    );
    assert_eq!(
        kept("(text_len = 0 or label = 'real') and text_len >= 10"),
        ids(&[2, 4])
    );
    assert_eq!(kept("NOT (label = 'fake' OR text_len < 5)"), ids(&[2, 4]));
}

#[test]
fn in_and_not_in() {
    assert_eq!(kept("label in ('real')"), ids(&[1, 2, 4]));
    assert_eq!(kept("text_len in (0, 7, 99)"), ids(&[3, 5]));
    assert_eq!(kept("domain in ('a and b', 'it''s')"), ids(&[1, 4]));
    // A NULL subject matches nothing, in or not in.
    assert_eq!(
        kept("domain not in ('demo-news', 'it''s')"),
        ids(&[1, 3, 5])
    );
    assert_eq!(kept("n in (1, 3)"), ids(&[0, 3, 4]));
    assert_eq!(kept("n not in (1, 3)"), ids(&[2]));
    // With a NULL in the list, `not in` is never true (x != NULL is unknown), as in SQL.
    assert_eq!(kept("n in (1, null)"), ids(&[0, 4]));
    assert_eq!(kept("n not in (1, null)"), ids(&[]));
    // Mixed integer and float items widen the comparison.
    assert_eq!(kept("text_len in (3, 7.0)"), ids(&[1, 5]));
}

#[test]
fn between_and_not_between() {
    assert_eq!(kept("text_len between 7 and 12"), ids(&[0, 4, 5]));
    assert_eq!(kept("text_len not between 7 and 12"), ids(&[1, 2, 3]));
    assert_eq!(kept("label between 'a' and 'g'"), ids(&[0, 3, 5]));
    assert_eq!(kept("n not between 0 and 2"), ids(&[2, 3]));
}

#[test]
fn like_and_ilike() {
    assert_eq!(kept("domain like 'demo-%'"), ids(&[0, 5]));
    assert_eq!(kept("domain not like 'demo-%'"), ids(&[1, 3, 4]));
    assert_eq!(kept("domain like '_lood%'"), ids(&[3]));
    assert_eq!(kept("domain like 'flood%'"), ids(&[]));
    assert_eq!(kept("domain ilike 'flood%'"), ids(&[3]));
    assert_eq!(kept("domain not ilike 'FLOOD%'"), ids(&[0, 1, 4, 5]));
    // `\` escapes a wildcard (the one ESCAPE accepted).
    assert_eq!(kept(r"domain like '%\_50\%'"), ids(&[3]));
    assert_eq!(kept(r"domain like '%\%' escape '\'"), ids(&[3]));
    assert_eq!(kept("source like 't%'"), ids(&[1, 4]));
}

#[test]
fn is_null_on_any_column() {
    assert_eq!(kept("domain is null"), ids(&[2]));
    assert_eq!(kept("n is not null"), ids(&[0, 2, 3, 4]));
    assert_eq!(kept("flag is null"), ids(&[2, 5]));
    assert_eq!(kept("hist is null"), ids(&[1]));
    assert_eq!(kept("null is null"), ids(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(kept("1 is null"), ids(&[]));
}

#[test]
fn arithmetic_on_numeric_columns() {
    assert_eq!(kept("text_len * 2 >= 20"), ids(&[0, 2, 4]));
    assert_eq!(kept("text_len - n > 10"), ids(&[0, 2]));
    // 0.9 + 0.1 is 1.0 in Float32, not above it.
    assert_eq!(kept("score + 0.1 > 1"), ids(&[2, 5]));
    assert_eq!(kept("-n > 0"), ids(&[2]));
    assert_eq!(kept("text_len % 2 = 1"), ids(&[1, 5]));
    // `/` is real division, and by zero gives inf or NaN for the row, not an error.
    assert_eq!(kept("text_len / 4 = 2.5"), ids(&[4]));
    assert_eq!(kept("text_len / 0 > 1"), ids(&[0, 1, 2, 4, 5]));
    assert_eq!(kept("(text_len + 2) * 3 = 15"), ids(&[1]));
    assert_eq!(kept("text_len + 2 * 3 = 13"), ids(&[5]));
}

#[test]
fn nulls_compare_unknown_and_unknown_rows_are_dropped() {
    // Neither n = 1 nor n != 1 holds where n is NULL.
    assert_eq!(kept("n = 1 or n != 1"), ids(&[0, 2, 3, 4]));
    assert_eq!(kept("not (n = 1)"), ids(&[2, 3]));
    assert_eq!(kept("not flag"), ids(&[1, 4]));
    assert_eq!(kept("n = null"), ids(&[]));
    assert_eq!(kept("n != null"), ids(&[]));
    // Kleene logic: unknown or true is true, unknown and false is false.
    assert_eq!(kept("n = 1 or label = 'fake'"), ids(&[0, 3, 4, 5]));
    // v5: n is NULL, but unknown and false is false, so its negation holds.
    assert_eq!(kept("not (n = 1 and label = 'real')"), ids(&[0, 2, 3, 5]));
    assert_eq!(kept("domain = 'x' or domain is null"), ids(&[2]));
    assert_eq!(kept("true"), ids(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(kept("false or null"), ids(&[]));
}

#[test]
fn columns_are_named_once_in_order() {
    let f = Filter::parse("label = 'x' and (text_len > 1 or label in ('a')) and \"text len\" > 0")
        .unwrap();
    assert_eq!(f.columns(), vec!["label", "text_len", "text len"]);
    // The old form names its values as columns: that is how its error finds them.
    let f = Filter::parse("domain = demo-news").unwrap();
    assert_eq!(f.columns(), vec!["domain", "demo", "news"]);
}

#[test]
fn a_table_without_a_column_is_skipped_by_apply_and_an_error_for_apply_to() {
    let b = batch().project(&[0, 1]).unwrap();
    let f = Filter::parse("text_len > 1").unwrap();
    assert!(f.apply(&b).unwrap().is_none());
    assert!(f.mask(&b).unwrap().is_none());
    let Err(FilterError::Invalid(m)) = f.apply_to(&b, "the source table") else {
        panic!("no error")
    };
    assert_eq!(
        m,
        "--where: no column `text_len` in the source table\n  \
         text_len > 1\n  ^^^^^^^^\n\
         the source table has the columns: video_id, label"
    );
    assert!(f.check(batch().schema_ref(), "t").is_ok());
    let all = Filter::parse("label = 'real'")
        .unwrap()
        .apply_to(&b, "t")
        .unwrap();
    assert_eq!(all.num_rows(), 3);
}

#[test]
fn syntax_errors_point_into_the_expression() {
    let hint = "(SQL as in a WHERE clause: text in single quotes, e.g. domain = 'demo-news' and \
                text_len >= 10)";
    assert_eq!(
        error("label ="),
        format!(
            "--where: syntax error: expected an expression, found the end\n  label =\n         ^\n{hint}"
        )
    );
    assert_eq!(
        error("label real"),
        format!(
            "--where: syntax error: expected an operator or the end, found `real`\n  label real\n        ^\n{hint}"
        )
    );
    assert_eq!(
        error("label = 'real"),
        format!(
            "--where: syntax error: unterminated string literal\n  label = 'real\n          ^\n{hint}"
        )
    );
    assert_eq!(
        error("(label = 'real'"),
        format!(
            "--where: syntax error: expected `)`, found the end\n  (label = 'real'\n                 ^\n{hint}"
        )
    );
    assert_eq!(
        error("text_len >= 10 and = 3"),
        format!(
            "--where: syntax error: expected an expression, found `=`\n  text_len >= 10 and = 3\n                     ^\n{hint}"
        )
    );
    // In an expression over several lines the caret is under the line at fault.
    assert_eq!(
        error("label = 'real'\nand = 3"),
        format!(
            "--where: syntax error: expected an expression, found `=`\n  and = 3\n      ^\n{hint}"
        )
    );
}

#[test]
fn unknown_columns_are_named_with_the_columns_there_are() {
    let cols = "the test table has the columns: video_id, label, domain, score, text_len, n, \
                flag, hist, source, text len";
    assert_eq!(
        error("nosuch = 1"),
        format!("--where: no column `nosuch` in the test table\n  nosuch = 1\n  ^^^^^^\n{cols}")
    );
    assert_eq!(
        error("Label = 'real'"),
        format!(
            "--where: no column `Label` in the test table\n  Label = 'real'\n  ^^^^^\n{cols}\n\
             names match exactly: did you mean `label`? (\"label\" in double quotes if need be)"
        )
    );
}

#[test]
fn the_old_unquoted_form_says_how_to_quote_it() {
    let cols = "the test table has the columns: video_id, label, domain, score, text_len, n, \
                flag, hist, source, text len";
    let quote = "text takes single quotes in SQL (double quotes name a column)";
    assert_eq!(
        error("domain = demo-news and text_len >= 10"),
        format!(
            "--where: no column `demo` in the test table\n  \
             domain = demo-news and text_len >= 10\n           ^^^^\n{cols}\n\
             {quote}: domain = 'demo-news' and text_len >= 10"
        )
    );
    assert_eq!(
        error("label = \"real\""),
        format!(
            "--where: no column `real` in the test table\n  label = \"real\"\n          ^^^^^^\n\
             {cols}\n{quote}: label = 'real'"
        )
    );
    assert_eq!(
        error("label = fake and domain in (x, 'it''s')"),
        format!(
            "--where: no column `fake` in the test table\n  \
             label = fake and domain in (x, 'it''s')\n          ^^^^\n{cols}\n\
             {quote}: label = 'fake' and domain in ('x', 'it''s')"
        )
    );
    assert_eq!(
        error("domain = flood.gov"),
        format!(
            "--where: no column `flood.gov` in the test table\n  domain = flood.gov\n           ^^^^^^^^^\n\
             {cols}\n{quote}: domain = 'flood.gov'"
        )
    );
}

#[test]
fn type_mismatches_name_the_column_and_its_type() {
    assert_eq!(
        error("domain = 10"),
        "--where: cannot compare text column `domain` (Utf8) with the number 10\n  \
         domain = 10\n  ^^^^^^^^^^^\n\
         to compare as text, quote the number: '10'"
    );
    assert_eq!(
        error("text_len >= 'ten'"),
        "--where: cannot compare numeric column `text_len` (UInt32) with the text 'ten'\n  \
         text_len >= 'ten'\n  ^^^^^^^^^^^^^^^^^\n\
         numeric column `text_len` (UInt32) holds numbers: compare it with a number, without quotes"
    );
    assert_eq!(
        error("label in ('real', 3)"),
        "--where: cannot compare text column `label` (Utf8) with the number 3\n  \
         label in ('real', 3)\n                    ^\n\
         to compare as text, quote the number: '3'"
    );
    assert_eq!(
        error("flag = 1"),
        "--where: cannot compare true/false column `flag` (Boolean) with the number 1\n  \
         flag = 1\n  ^^^^^^^^"
    );
    assert_eq!(
        error("hist = 1"),
        "--where: column `hist` (List(Int32)) cannot be compared\n  hist = 1\n  ^^^^^^^^\n\
         comparisons, in, between and like take numbers, text and true/false; is null takes any column"
    );
    assert_eq!(
        error("text_len like '1%'"),
        "--where: `like` matches text, not numeric column `text_len` (UInt32)\n  \
         text_len like '1%'\n  ^^^^^^^^"
    );
    assert_eq!(
        error("label + 1 > 2"),
        "--where: `+` needs numbers, not text column `label` (Utf8)\n  label + 1 > 2\n  ^^^^^"
    );
}

#[test]
fn the_whole_filter_and_each_side_of_and_must_be_conditions() {
    assert_eq!(
        error("label"),
        "--where: the filter must be a condition, true or false for each row, not text column \
         `label` (Utf8)\n  label\n  ^^^^^"
    );
    assert_eq!(
        error("text_len + 1"),
        "--where: the filter must be a condition, true or false for each row, not `text_len + 1` \
         (a number)\n  text_len + 1\n  ^^^^^^^^^^^^"
    );
    assert_eq!(
        error("label = 'real' and text_len"),
        "--where: `and` needs a condition on each side, not numeric column `text_len` (UInt32)\n  \
         label = 'real' and text_len\n                     ^^^^^^^^"
    );
}

#[test]
fn what_sql_has_but_a_filter_does_not_is_refused_with_a_caret() {
    let supported = "--where takes and, or, not, parentheses, = != <> < <= > >=, in (...), \
        between ... and ..., like, ilike, is [not] null, + - * / % on numbers, column names \
        (\"quoted\" if need be), numbers, 'text', true, false and null";
    assert_eq!(
        error("lower(label) = 'real'"),
        format!(
            "--where: `lower(label)` is not supported\n  lower(label) = 'real'\n  ^^^^^^^^^^^^\n{supported}"
        )
    );
    assert_eq!(
        error("label like 'a#%' escape '#'"),
        format!(
            "--where: ESCAPE '#' (only '\\' escapes a % or _) is not supported\n  \
             label like 'a#%' escape '#'\n                          ^^^\n{supported}"
        )
    );
    assert_eq!(
        error("n in (select 1)"),
        format!(
            "--where: `n IN (SELECT 1)` is not supported\n  n in (select 1)\n  ^^^^^^^^^^^^^^^\n{supported}"
        )
    );
}
