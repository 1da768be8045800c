//! How alike two OCR readings are: the same overlay read on two frames can differ by a
//! misread character. Used by the creator-added rule (the same text at the same place in
//! another frame) and by the benchmark's derived items (one target text across frames).

/// Letters and digits only, lower-cased: what two readings of one line share.
pub fn normalise(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(|c| c.to_lowercase())
        .collect()
}

/// 1 − edit distance / the longer length, over characters (1 for two empty strings).
pub fn similarity(a: &str, b: &str) -> f32 {
    strsim::normalized_levenshtein(a, b) as f32
}
