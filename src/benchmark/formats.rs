//! Answer formats: the one home where each kind of answer is parsed, validated and (in part 2)
//! scored. MVFNDB's ten tasks (Table 1, B.2) use six of them; HarmVideoBench's items are single
//! choice. A model's draft of a reference and an evaluated model's answer both go through
//! `parse`: a problem comes back with a stable code (what reports group by) and a message that
//! can go back to the model in a repair request.
//!
//! Reads nothing, writes nothing, calls nothing, caches nothing.

use serde::{Deserialize, Serialize};

/// The shape of a task's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// One letter naming one of the options (CCP, CPP, NTU; today's three-level items).
    SingleChoice,
    /// A non-empty set of letters (HIR: every identity shown).
    MultipleChoice,
    /// A whole number ≥ 0 (SAC: shooting angles).
    Count,
    /// A list of [start, end] seconds inside the video, start < end (KEG).
    TimeRanges,
    /// Free text scored against reference lists, one list per reference field (KEP's elements,
    /// DCS's creator-added content and original footage).
    ReferenceList,
    /// Free text scored against a reference text by a judge (NEU's theme).
    OpenText,
    /// `<think>…</think><result>…</result>`, the result one of the task's labels (FDR).
    TaggedReasoning,
}

pub const FORMATS: &[(&str, Format)] = &[
    ("single_choice", Format::SingleChoice),
    ("multiple_choice", Format::MultipleChoice),
    ("count", Format::Count),
    ("time_ranges", Format::TimeRanges),
    ("reference_list", Format::ReferenceList),
    ("open_text", Format::OpenText),
    ("tagged_reasoning", Format::TaggedReasoning),
];

impl Format {
    pub fn name(self) -> &'static str {
        FORMATS
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    pub fn from_name(name: &str) -> Option<Self> {
        FORMATS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    /// Whether the task lists its options (choice formats).
    pub fn has_options(self) -> bool {
        matches!(self, Format::SingleChoice | Format::MultipleChoice)
    }
}

/// The reference columns of this format (an `items` row's), besides the question and options:
/// what a release config carries and what scoring reads.
impl Format {
    pub fn reference_columns(self) -> &'static [&'static str] {
        match self {
            Format::SingleChoice => &["answer"],
            Format::MultipleChoice => &["answer", "answer_choices"],
            Format::Count => &["answer_count"],
            Format::TimeRanges => &["answer_starts", "answer_ends"],
            Format::ReferenceList => &["reference_fields", "reference_items"],
            Format::OpenText => &["answer_text"],
            Format::TaggedReasoning => &[
                "answer_label",
                "answer_text",
                "reference_fields",
                "reference_items",
            ],
        }
    }
}

/// What an answer is checked against.
#[derive(Debug, Clone, Default)]
pub struct AnswerContext<'a> {
    /// The options shown, in order (letters A, B, … name them).
    pub options: &'a [String],
    /// The video's duration: time ranges must lie inside it.
    pub duration_secs: Option<f64>,
    /// Labels a tagged result may take (compared without case).
    pub labels: &'a [String],
}

/// A parsed, valid answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// 0-based option index.
    Choice(usize),
    /// 0-based option indices, ascending, at least one.
    Choices(Vec<usize>),
    Count(u32),
    /// [start, end] seconds, start < end, inside the video.
    Ranges(Vec<[f64; 2]>),
    Text(String),
    Tagged {
        think: String,
        result: String,
    },
}

/// Why an answer cannot be read: `code` is stable (reports group by it), `message` goes back to
/// the model in a repair request and into the rejects table.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Problem {
    pub code: &'static str,
    pub message: String,
}

fn problem(code: &'static str, message: impl Into<String>) -> Problem {
    Problem {
        code,
        message: message.into(),
    }
}

/// Letter of option `i` (A, B, …).
pub fn letter(i: usize) -> String {
    char::from(b'A' + (i % 26) as u8).to_string()
}

/// Options past Z (CPP's 30 positions) are numbered from 1 instead of lettered.
pub const MAX_LETTERED: usize = 26;

/// The label option `i` of `n` is shown with: a letter, or its number past `MAX_LETTERED`.
pub fn option_label(i: usize, n: usize) -> String {
    if n > MAX_LETTERED {
        (i + 1).to_string()
    } else {
        letter(i)
    }
}

/// A numbered option (1-based) written in `text`: the first whole number standing alone.
fn numbered_option(text: &str, n: usize) -> Result<usize, Problem> {
    let nums: Vec<usize> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums.as_slice() {
        [] => Err(problem(
            "no_option",
            format!("the answer names no option (1–{n})"),
        )),
        [k] if (1..=n).contains(k) => Ok(k - 1),
        [k] => Err(problem(
            "not_an_option",
            format!("{k} is not an option: the options are 1–{n}"),
        )),
        _ => Err(problem("several_options", "give exactly one option number")),
    }
}

/// Full-width letters, digits and punctuation read as their ASCII forms (models answering in
/// Chinese write `Ａ`, `，`, `：`).
pub fn fold_width(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            '\u{3000}' => ' ',
            '、' => ',',
            '【' => '[',
            '】' => ']',
            _ => c,
        })
        .collect()
}

impl Format {
    /// Parses and validates one answer. Values from structured output arrive as JSON (a
    /// string, a number, an array); prose answers as a string.
    pub fn parse(self, value: &serde_json::Value, cx: &AnswerContext) -> Result<Answer, Problem> {
        use serde_json::Value;
        let text = match value {
            Value::String(s) => fold_width(s),
            Value::Null => return Err(problem("empty", "the answer is empty")),
            other => other.to_string(),
        };
        if text.trim().is_empty() {
            return Err(problem("empty", "the answer is empty"));
        }
        match self {
            Format::SingleChoice => one_letter(&text, cx.options).map(Answer::Choice),
            Format::MultipleChoice => letters(value, &text, cx.options).map(Answer::Choices),
            Format::Count => count(value, &text).map(Answer::Count),
            Format::TimeRanges => ranges(value, &text, cx.duration_secs).map(Answer::Ranges),
            Format::ReferenceList | Format::OpenText => Ok(Answer::Text(text.trim().into())),
            Format::TaggedReasoning => tagged(&text, cx.labels),
        }
    }
}

/// The option letters written in `text`: a letter standing alone ("B", "(b)", "B.", "B、",
/// "A, C", "Answer: D"), upper or lower case when the whole answer is letters; inside prose
/// only capitals count, so the article "a" is not option A.
fn letters_in(text: &str, n: usize) -> Vec<usize> {
    let t = text.trim();
    let only_letters = t
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .all(|w| w.chars().count() == 1);
    let mut out = vec![];
    for w in t
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut cs = w.chars();
        let (Some(c), None) = (cs.next(), cs.next()) else {
            continue;
        };
        let up = c.to_ascii_uppercase();
        if !up.is_ascii_uppercase() || !(c.is_ascii_uppercase() || only_letters) {
            continue;
        }
        let i = (up as u8 - b'A') as usize;
        // In prose a capital past the options is a word ("I cannot tell"), not a letter.
        if (only_letters || i < n) && !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn option_text_match(text: &str, options: &[String]) -> Option<usize> {
    let norm = |s: &str| s.trim().trim_end_matches('.').to_lowercase();
    let t = norm(text);
    options.iter().position(|o| norm(o) == t)
}

/// Letter `i` named among `n` options it is not one of.
fn not_an_option(i: usize, n: usize) -> Problem {
    let last = letter(n.max(1) - 1);
    let msg = format!("{} is not an option: the options are A–{last}", letter(i));
    problem("not_an_option", msg)
}

fn one_letter(text: &str, options: &[String]) -> Result<usize, Problem> {
    if let Some(i) = option_text_match(text, options) {
        return Ok(i);
    }
    if options.len() > MAX_LETTERED {
        return numbered_option(text, options.len());
    }
    let found = letters_in(text, options.len());
    match found.as_slice() {
        [] => Err(problem(
            "no_option",
            format!(
                "the answer names no option (A–{})",
                letter(options.len().max(1) - 1)
            ),
        )),
        [i] if *i < options.len() => Ok(*i),
        [i] => Err(not_an_option(*i, options.len())),
        many => Err(problem(
            "several_options",
            format!(
                "the answer names {} options ({}); give exactly one letter",
                many.len(),
                many.iter()
                    .map(|i| letter(*i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn letters(
    value: &serde_json::Value,
    text: &str,
    options: &[String],
) -> Result<Vec<usize>, Problem> {
    let mut found = match value {
        serde_json::Value::Array(items) => {
            let mut v = vec![];
            for it in items {
                let s = fold_width(it.as_str().unwrap_or_default());
                let i = option_text_match(&s, options)
                    .or_else(|| letters_in(&s, options.len()).first().copied());
                match i {
                    Some(i) => v.push(i),
                    None => {
                        return Err(problem(
                            "not_an_option",
                            format!("{it} is not an option letter"),
                        ));
                    }
                }
            }
            v
        }
        _ => letters_in(text, options.len()),
    };
    if let Some(bad) = found.iter().find(|i| **i >= options.len()) {
        return Err(not_an_option(*bad, options.len()));
    }
    found.sort_unstable();
    found.dedup();
    if found.is_empty() {
        return Err(problem(
            "no_option",
            "the answer chooses no option: give at least one letter",
        ));
    }
    Ok(found)
}

fn count(value: &serde_json::Value, text: &str) -> Result<u32, Problem> {
    let n: Option<f64> = match value {
        serde_json::Value::Number(n) => n.as_f64(),
        _ => {
            // The first number in the text: "3", "3 angles", "共3个".
            let t = text.trim();
            let start = t.find(|c: char| c.is_ascii_digit() || c == '-');
            start.and_then(|s| {
                let tail = &t[s..];
                let end = tail[1..]
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .map_or(tail.len(), |e| e + 1);
                tail[..end].parse::<f64>().ok()
            })
        }
    };
    match n {
        None => Err(problem(
            "not_a_count",
            format!("{:?} is not a number", text.trim()),
        )),
        Some(n) if n < 0.0 => Err(problem(
            "negative_count",
            format!("a count cannot be negative (got {n})"),
        )),
        Some(n) if n.fract() != 0.0 || n > u32::MAX as f64 => Err(problem(
            "not_a_count",
            format!("a count is a whole number (got {n})"),
        )),
        Some(n) => Ok(n as u32),
    }
}

/// Every number in `text`, in order ("[[1.5, 3], [4, 6.25]]", "1.5-3s; 4 to 6.25").
fn numbers_in(text: &str) -> Vec<f64> {
    let mut out = vec![];
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<f64>| {
        if let Ok(x) = cur.parse::<f64>() {
            out.push(x);
        }
        cur.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() || (c == '.' && !cur.is_empty() && !cur.contains('.')) {
            cur.push(c);
        } else {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

fn ranges(
    value: &serde_json::Value,
    text: &str,
    duration: Option<f64>,
) -> Result<Vec<[f64; 2]>, Problem> {
    let nums: Vec<f64> = match value {
        serde_json::Value::Array(items) => items
            .iter()
            .flat_map(|r| match r {
                serde_json::Value::Array(pair) => pair.iter().map(|x| x.as_f64()).collect(),
                other => vec![other.as_f64()],
            })
            .map(|x| x.unwrap_or(f64::NAN))
            .collect(),
        _ => numbers_in(text),
    };
    if nums.is_empty() {
        return Err(problem("no_range", "the answer gives no time range"));
    }
    if nums.len() % 2 != 0 || nums.iter().any(|x| !x.is_finite()) {
        return Err(problem(
            "bad_range",
            "time ranges are pairs of numbers: [[start, end], …] in seconds",
        ));
    }
    let out: Vec<[f64; 2]> = nums.chunks(2).map(|p| [p[0], p[1]]).collect();
    for [s, e] in &out {
        if e <= s {
            return Err(problem(
                "range_reversed",
                format!("the range [{s}, {e}] ends before it starts"),
            ));
        }
        if *s < 0.0 || duration.is_some_and(|d| *e > d + 1e-6) {
            return Err(problem(
                "range_outside",
                format!(
                    "the range [{s}, {e}] is outside the video (0 to {} s)",
                    duration.map_or("?".into(), |d| format!("{d}"))
                ),
            ));
        }
    }
    Ok(out)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let lower = text.to_ascii_lowercase();
    let s = lower.find(open)? + open.len();
    let e = lower[s..].find(close)? + s;
    Some(&text[s..e])
}

fn tagged(text: &str, labels: &[String]) -> Result<Answer, Problem> {
    let Some(result) = between(text, "<result>", "</result>") else {
        return Err(problem(
            "missing_result_tag",
            "the answer has no <result>…</result>: end with the label inside those tags",
        ));
    };
    let think = between(text, "<think>", "</think>").unwrap_or_default();
    let r = result.trim();
    let label = labels
        .iter()
        .find(|l| l.eq_ignore_ascii_case(r))
        .cloned()
        .or_else(|| labels.is_empty().then(|| r.to_string()));
    match label {
        Some(result) => Ok(Answer::Tagged {
            think: think.trim().to_string(),
            result,
        }),
        None => Err(problem(
            "unknown_label",
            format!("<result>{r}</result> is not one of {}", labels.join(", ")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("option {i}")).collect()
    }

    fn parse(
        f: Format,
        v: serde_json::Value,
        n: usize,
        dur: Option<f64>,
    ) -> Result<Answer, &'static str> {
        let o = opts(n);
        let labels = vec!["real".to_string(), "fake".to_string()];
        let cx = AnswerContext {
            options: &o,
            duration_secs: dur,
            labels: &labels,
        };
        f.parse(&v, &cx).map_err(|p| p.code)
    }

    #[test]
    fn single_choice_reads_letters_in_their_usual_shapes() {
        let c = |s: &str| parse(Format::SingleChoice, json!(s), 4, None);
        for (s, i) in [
            ("B", 1),
            ("(c)", 2),
            ("d.", 3),
            ("Answer: A", 0),
            ("Ｂ", 1),
            ("答案：C", 2),
        ] {
            assert_eq!(c(s), Ok(Answer::Choice(i)), "{s}");
        }
        assert_eq!(
            c("The answer is B because a man runs"),
            Ok(Answer::Choice(1))
        );
        assert_eq!(c("option 2"), Ok(Answer::Choice(2)));
        assert_eq!(c("E"), Err("not_an_option"));
        assert_eq!(c("I cannot tell"), Err("no_option"));
        assert_eq!(c("none of them"), Err("no_option"));
        assert_eq!(c("A or B"), Err("several_options"));
        assert_eq!(c(""), Err("empty"));
        // Thirty options are numbered: CPP's positions.
        let o: Vec<String> = (0..30).map(|i| format!("cell {i}")).collect();
        let cx = AnswerContext {
            options: &o,
            ..Default::default()
        };
        let n = |s: &str| {
            Format::SingleChoice
                .parse(&json!(s), &cx)
                .map_err(|p| p.code)
        };
        assert_eq!(n("27"), Ok(Answer::Choice(26)));
        assert_eq!(n("Option 30."), Ok(Answer::Choice(29)));
        assert_eq!(n("cell 4"), Ok(Answer::Choice(4)));
        assert_eq!(n("31"), Err("not_an_option"));
        assert_eq!(n("upper left"), Err("no_option"));
        assert_eq!(option_label(26, 30), "27");
        assert_eq!(option_label(2, 4), "C");
    }

    #[test]
    fn multiple_choice_is_a_non_empty_set_of_options() {
        let m = |v| parse(Format::MultipleChoice, v, 5, None);
        assert_eq!(m(json!("A, C")), Ok(Answer::Choices(vec![0, 2])));
        assert_eq!(m(json!("c、a、C")), Ok(Answer::Choices(vec![0, 2])));
        assert_eq!(m(json!(["B", "e"])), Ok(Answer::Choices(vec![1, 4])));
        assert_eq!(m(json!([])), Err("no_option"));
        assert_eq!(m(json!("nobody is shown")), Err("no_option"));
        assert_eq!(m(json!("A, G")), Err("not_an_option"));
        assert_eq!(m(json!(["A", "?"])), Err("not_an_option"));
    }

    #[test]
    fn counts_are_whole_and_not_negative() {
        let c = |v| parse(Format::Count, v, 0, None);
        assert_eq!(c(json!(3)), Ok(Answer::Count(3)));
        assert_eq!(c(json!("4 angles")), Ok(Answer::Count(4)));
        assert_eq!(c(json!("共３个")), Ok(Answer::Count(3)));
        assert_eq!(c(json!(-1)), Err("negative_count"));
        assert_eq!(c(json!("-2")), Err("negative_count"));
        assert_eq!(c(json!(2.5)), Err("not_a_count"));
        assert_eq!(c(json!("three")), Err("not_a_count"));
    }

    #[test]
    fn time_ranges_lie_inside_the_video_and_run_forward() {
        let r = |v| parse(Format::TimeRanges, v, 0, Some(10.0));
        assert_eq!(
            r(json!([[1.5, 3], [4, 6.25]])),
            Ok(Answer::Ranges(vec![[1.5, 3.0], [4.0, 6.25]]))
        );
        assert_eq!(
            r(json!("1.5-3s; 4 to 6.25")),
            Ok(Answer::Ranges(vec![[1.5, 3.0], [4.0, 6.25]]))
        );
        assert_eq!(r(json!([[3, 1]])), Err("range_reversed"));
        assert_eq!(r(json!([[2, 2]])), Err("range_reversed"));
        assert_eq!(r(json!([[8, 12]])), Err("range_outside"));
        assert_eq!(r(json!([[1, 2, 3]])), Err("bad_range"));
        assert_eq!(r(json!("somewhere")), Err("no_range"));
    }

    #[test]
    fn tagged_reasoning_needs_its_result_tag_and_a_known_label() {
        let t = |s: &str| parse(Format::TaggedReasoning, json!(s), 0, None);
        assert_eq!(
            t("<think>The caption is red and scattered.</think><result>Fake</result>"),
            Ok(Answer::Tagged {
                think: "The caption is red and scattered.".into(),
                result: "fake".into()
            })
        );
        assert_eq!(t("<think>x</think> it is fake"), Err("missing_result_tag"));
        assert_eq!(t("<RESULT>maybe</RESULT>"), Err("unknown_label"));
    }
}
