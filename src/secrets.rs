//! Keeping credentials out of what we print and persist.
//!
//! Service error bodies often echo what was sent (a URL with `key=…`, an S3 error naming the
//! access key id), and those texts reach logs, the manifest and the rejects table. Every client
//! passes error text through `scrub` with the secrets it holds before the text leaves it.

/// `text` with every occurrence of each non-empty secret replaced by `***`.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(s) {
            out = out.replace(s, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_secret_and_ignores_empty_ones() {
        let t = "GET /v3/search?key=abc123&q=x failed: key abc123 refused (token zz9)";
        assert_eq!(
            scrub(t, &["abc123", "", "zz9"]),
            "GET /v3/search?key=***&q=x failed: key *** refused (token ***)"
        );
        assert_eq!(scrub(t, &[]), t);
    }
}
