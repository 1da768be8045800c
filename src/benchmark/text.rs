//! How options, questions and answers are compared: the same text up to case, spaces and
//! punctuation (`norm`), and alike by character trigrams (`similarity`). The questions stage
//! uses them to refuse look-alike options and near-duplicate items; the review to class an edit.

/// Lower-case letters and digits only: how options and questions are compared (as two OCR
/// readings of one line are).
pub use crate::engines::ocr::text::normalise as norm;

/// How alike two questions are, 0 to 1: the Jaccard index of their character trigrams, after
/// `norm` (so case, spaces and punctuation do not count). Characters rather than words, so that
/// Chinese and Japanese questions, written without spaces, compare as well as English ones.
/// Texts under three characters compare as equal or not.
pub fn similarity(a: &str, b: &str) -> f64 {
    let grams = |s| -> std::collections::HashSet<Vec<char>> { trigrams(s).into_iter().collect() };
    let (ga, gb) = (grams(a), grams(b));
    let union = ga.union(&gb).count();
    if union == 0 {
        return 0.0;
    }
    ga.intersection(&gb).count() as f64 / union as f64
}

/// The character trigrams `similarity` compares, in order: those of `norm(s)`, or a text under
/// three characters whole (none when empty).
pub fn trigrams(s: &str) -> Vec<Vec<char>> {
    let c: Vec<char> = norm(s).chars().collect();
    if c.len() < 3 {
        return std::iter::once(c).filter(|c| !c.is_empty()).collect();
    }
    c.windows(3).map(<[char]>::to_vec).collect()
}
