//! serde's message for an unknown key ("unknown field `x`, expected one of `a`, `b`, ...",
//! the struct's keys in declaration order) rewritten with the keys closest to the typo first
//! and the closest offered when it is near, so `fold_file` points at `fold_files` rather than
//! at the first of a dozen keys.

/// `msg` with its candidate keys closest first; any other message as it is.
pub(super) fn closest_first(msg: &str) -> String {
    let Some(rest) = msg.strip_prefix("unknown field `") else {
        return msg.to_string();
    };
    let Some((given, tail)) = rest.split_once('`') else {
        return msg.to_string();
    };
    let Some(list) = tail.strip_prefix(", expected ") else {
        return msg.to_string();
    };
    // "`a`, `b`" or "`a` or `b`": the keys sit between every other backtick.
    let mut keys: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
    if keys.is_empty() {
        return msg.to_string();
    }
    // Stable: keys as far from the typo keep their declared order.
    keys.sort_by_key(|k| distance(given, k));
    let guess = match keys[0] {
        k if near(given, k) => format!(" (did you mean `{k}`?)"),
        _ => String::new(),
    };
    let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "unknown field `{given}`{guess}; the keys here, closest first: {}",
        keys.join(", ")
    )
}

/// Close enough to be a typo of: a third of the letters wrong at most, or one inside the
/// other.
fn near(given: &str, key: &str) -> bool {
    let longer = given.chars().count().max(key.chars().count());
    distance(given, key) <= (longer / 3).max(1) || key.contains(given) || given.contains(key)
}

/// Levenshtein distance over characters, case aside.
fn distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(&a.to_lowercase(), &b.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_come_closest_first_with_a_guess() {
        let msg = "unknown field `fold_file`, expected one of `type`, `format`, `folds`, `test_fold`, `fold_files`";
        assert_eq!(
            closest_first(msg),
            "unknown field `fold_file` (did you mean `fold_files`?); the keys here, closest first: `fold_files`, `folds`, `test_fold`, `format`, `type`"
        );
        let two = closest_first("unknown field `bta`, expected `alpha` or `beta`");
        assert!(
            two.starts_with("unknown field `bta` (did you mean `beta`?);"),
            "{two}"
        );
        // Nothing near: no guess, and equally far keys in their declared order.
        let far = closest_first("unknown field `qqqqqq`, expected `alpha` or `gamma`");
        assert_eq!(
            far,
            "unknown field `qqqqqq`; the keys here, closest first: `alpha`, `gamma`"
        );
        assert_eq!(
            closest_first("unknown field `x`, there are no fields"),
            "unknown field `x`, there are no fields"
        );
        assert_eq!(
            closest_first("invalid type: string"),
            "invalid type: string"
        );
        assert_eq!(distance("kitten", "sitting"), 3);
        assert!(near("medai_dir", "media_dir"));
    }
}
