//! Which option a model's free-text answer names, and the options as a rotation shows them.

use crate::benchmark::text::norm;
use std::collections::HashSet;

/// Full-width letters and colons (Chinese input) as ASCII.
fn ascii(c: char) -> char {
    match c {
        'Ａ'..='Ｚ' => char::from_u32(c as u32 - 'Ａ' as u32 + 'A' as u32).unwrap_or(c),
        'ａ'..='ｚ' => char::from_u32(c as u32 - 'ａ' as u32 + 'a' as u32).unwrap_or(c),
        '：' => ':',
        '（' => '(',
        '）' => ')',
        '。' | '，' | '、' => '.',
        _ => c,
    }
}

/// Words after which a lone letter is an answer, wherever they stand.
const CUES: &[&str] = &[
    "the correct answer is",
    "correct answer:",
    "the answer is",
    "answer is",
    "answer:",
    "option",
    "choice",
    "答案是",
    "答案为",
    "答案:",
    "答案",
    "选项",
    "选",
];

/// The option index a letter names among `n` options (either case), if any.
fn option_letter(c: char, n: usize) -> Option<usize> {
    let i = (c.to_ascii_uppercase() as u32).checked_sub('A' as u32)? as usize;
    (c.is_ascii_alphabetic() && i < n).then_some(i)
}

/// The option `text` names, as an index into `options`; None when it names none or several.
pub fn parse_answer(text: &str, options: &[String]) -> Option<usize> {
    let t: String = text.chars().map(ascii).collect();
    let t = t.trim();
    if t.is_empty() {
        return None;
    }
    let n = options.len();
    let normed: Vec<String> = options.iter().map(|o| norm(o)).collect();
    // The whole answer is one option's text.
    let whole = norm(t.trim_end_matches(['.', '!']));
    if let Some(i) = normed.iter().position(|o| !o.is_empty() && *o == whole) {
        return Some(i);
    }
    if let Some(i) = leading_letter(t, n) {
        return Some(i);
    }
    let found = cued_letters(t, n);
    if found.len() == 1 {
        return found.into_iter().next();
    }
    if found.len() > 1 {
        return None;
    }
    // One option's text inside the answer.
    let hits: Vec<usize> = (0..n)
        .filter(|&i| normed[i].chars().count() >= 3 && whole.contains(normed[i].as_str()))
        .collect();
    match hits.as_slice() {
        [i] => Some(*i),
        _ => None,
    }
}

/// The option a letter standing alone at the start of the answer names, if one does.
fn leading_letter(t: &str, n: usize) -> Option<usize> {
    // A letter alone at the start: "B", "(B)", "B.", "B) text", "B: text", "B because…".
    let stripped = t.trim_start_matches(['(', '[', '*', '"', '\'', ' ']);
    let mut cs = stripped.chars();
    let first = cs.next()?;
    let i = option_letter(first, n)?;
    let rest: String = cs.collect();
    let next = rest.chars().next();
    let alone = match next {
        None => true,
        Some(')' | ']' | '.' | ':' | ',' | '*' | '"' | '\'') => true,
        // "A signal for…" is an article, "B because…" a letter.
        Some(c) if c.is_whitespace() => {
            let word: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphabetic())
                .collect();
            first.is_ascii_uppercase()
                && (first != 'A'
                    || word.is_empty()
                    || ["because", "since", "as", "is", "it", "the"]
                        .contains(&word.to_lowercase().as_str()))
        }
        _ => false,
    };
    alone.then_some(i)
}

/// The options named by a lone letter after any cue of `CUES` in the answer.
fn cued_letters(t: &str, n: usize) -> HashSet<usize> {
    // A letter after a cue anywhere: "I think the answer is (C).", "所以答案是 B".
    // ASCII-only lowering keeps byte offsets the same in `t` and `lower`.
    let lower = t.to_ascii_lowercase();
    let mut found: HashSet<usize> = HashSet::new();
    for cue in CUES {
        let mut from = 0;
        while let Some(at) = lower[from..].find(cue) {
            let after = &t[from + at + cue.len()..];
            let after = after.trim_start_matches([' ', ':', '(', '[', '*', '"', '\'']);
            let mut cs = after.chars();
            if let Some(c) = cs.next()
                && let Some(i) = option_letter(c, n)
                && cs.next().is_none_or(|c| !c.is_ascii_alphanumeric())
            {
                found.insert(i);
            }
            from += at + cue.len();
        }
    }
    found
}

/// The options as shown under rotation `r`: letter i shows option (i + r) mod n.
pub fn rotated(options: &[String], r: usize) -> Vec<String> {
    let n = options.len();
    (0..n).map(|i| options[(i + r) % n].clone()).collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::evaluation::questions) fn opts() -> Vec<String> {
        [
            "A signal for testing screens",
            "A news report on a riot",
            "An advert",
            "A lecture",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn answers_in_the_shapes_models_write_name_their_option() {
        let o = opts();
        for (t, want) in [
            ("B", Some(1)),
            ("(c)", Some(2)),
            ("b.", Some(1)),
            ("Answer: d", Some(3)),
            ("The answer is B because the crowd is shown.", Some(1)),
            ("答案：B", Some(1)),
            ("答案是Ｃ。", Some(2)),
            ("I think the correct answer is (D).", Some(3)),
            ("A news report on a riot", Some(1)),
            ("A signal for testing screens.", Some(0)),
            ("It is a news report on a riot, clearly.", Some(1)),
            ("A because it is shown", Some(0)),
            ("B) A news report", Some(1)),
            ("", None),
            ("I cannot tell.", None),
            ("E", None),
            ("Answer: B or C, the answer is C", None),
        ] {
            assert_eq!(parse_answer(t, &o), want, "{t:?}");
        }
    }

    #[test]
    fn rotation_r_shows_option_i_plus_r() {
        let o = opts();
        assert_eq!(rotated(&o, 1)[0], o[1]);
        assert_eq!(rotated(&o, 3)[1], o[0]);
    }
}
