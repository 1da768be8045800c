//! The card's parts a takedown edits: the split sizes in its YAML front matter and the
//! "Removals" section. Only those lines change; the rest of the card stays as `release` wrote it.

use super::{MANIFEST_FILE, TAKEDOWNS_FILE};
use std::collections::HashMap;

/// Does a `data_files` path pattern of the card (`data/train-*.parquet`) match `rel`?
fn matches(pattern: &str, rel: &str) -> bool {
    match pattern.split_once('*') {
        Some((pre, post)) => {
            rel.len() >= pre.len() + post.len() && rel.starts_with(pre) && rel.ends_with(post)
        }
        None => pattern == rel,
    }
}

/// The top-level YAML key a front-matter line belongs to (`configs`, `dataset_info`), updated
/// when the line starts a new one.
fn section_of<'a>(line: &'a str, current: &'a str) -> &'a str {
    if line.starts_with(' ') || line.starts_with('-') {
        current
    } else {
        line.trim_end_matches(':')
    }
}

/// config → split → its file pattern, from the front matter's `configs:` list.
fn patterns(front: &str) -> HashMap<(String, String), String> {
    let mut out = HashMap::new();
    let (mut config, mut split, mut section) = (String::new(), String::new(), "");
    for l in front.lines() {
        section = section_of(l, section);
        if section != "configs" {
            continue;
        }
        if let Some(c) = l.strip_prefix("- config_name: ") {
            config = c.trim().to_string();
        } else if let Some(s) = l.trim().strip_prefix("- split: ") {
            split = s.trim().to_string();
        } else if let Some(p) = l.trim().strip_prefix("path: ") {
            out.insert((config.clone(), split.clone()), p.trim().to_string());
        }
    }
    out
}

/// The card with each config's split sizes in its YAML front matter (`num_examples`, and
/// `num_bytes` scaled with it) recounted from `rows_of` (release-relative file → rows) over the
/// files its `data_files` patterns match. A split left with no rows leaves the config (in
/// `configs` and `dataset_info`), and a config left with no split leaves the card: `datasets`
/// refuses a split with no data ("corresponds to no data").
pub fn card_with_sizes(card: &str, rows_of: &HashMap<String, usize>) -> String {
    let Some(end) = card
        .strip_prefix("---\n")
        .and_then(|r| r.find("\n---\n").map(|e| e + 4))
    else {
        return card.to_string();
    };
    let front = &card[..end + 1];
    let patterns = patterns(front);
    let count = |c: &str, s: &str| {
        patterns.get(&(c.to_string(), s.to_string())).map(|p| {
            rows_of
                .iter()
                .filter(|(rel, _)| matches(p, rel))
                .map(|(_, n)| n)
                .sum::<usize>()
        })
    };
    let empty = |c: &str, s: &str| count(c, s) == Some(0);
    let config_empty = |c: &str| {
        let mut splits = patterns.keys().filter(|(pc, _)| pc == c).peekable();
        splits.peek().is_some() && splits.all(|(pc, ps)| empty(pc, ps))
    };
    let mut out = String::new();
    let (mut config, mut split, mut section) = (String::new(), String::new(), "");
    let (mut in_splits, mut bytes_line) = (false, None::<usize>);
    for l in front.lines() {
        let header = section_of(l, section) != section || !(l.starts_with([' ', '-']));
        section = section_of(l, section);
        let listed = section == "configs" || section == "dataset_info";
        if header {
            (config, split, in_splits) = (String::new(), String::new(), false);
        } else if let Some(c) = l.strip_prefix("- config_name: ") {
            (config, split, in_splits) = (c.trim().to_string(), String::new(), false);
        } else if let Some(s) = l.trim().strip_prefix("- split: ") {
            split = s.trim().to_string();
        } else if l == "  splits:" {
            in_splits = true;
        } else if in_splits && let Some(s) = l.strip_prefix("  - name: ") {
            split = s.trim().to_string();
        }
        // The split entry's own lines: `- split:` and `path:`, `- name:` and its sizes.
        let of_split = l.starts_with("  - split: ")
            || l.starts_with("    path: ")
            || (in_splits && (l.starts_with("  - name: ") || l.starts_with("    num_")));
        if listed && !header && (config_empty(&config) || (of_split && empty(&config, &split))) {
            continue;
        }
        let mut line = l.to_string();
        if section == "dataset_info" && in_splits {
            if l.starts_with("    num_bytes: ") {
                bytes_line = Some(out.len());
            } else if let Some(old) = l.strip_prefix("    num_examples: ")
                && let (Some(n), Ok(old)) = (count(&config, &split), old.trim().parse::<u64>())
            {
                line = format!("    num_examples: {n}");
                if let Some(at) = bytes_line.take() {
                    out = rescale_bytes(&out, at, n as u64, old);
                }
            }
        }
        out += &line;
        out.push('\n');
    }
    out + &card[end + 1..]
}

/// `out` with the `num_bytes` line starting at `at` scaled by `new / old` rows (what `datasets`
/// calls num_bytes is informative; num_examples is what it checks).
fn rescale_bytes(out: &str, at: usize, new: u64, old: u64) -> String {
    let end = out[at..].find('\n').map_or(out.len(), |e| at + e);
    let bytes: u64 = out[at..end]
        .trim()
        .trim_start_matches("num_bytes:")
        .trim()
        .parse()
        .unwrap_or(0);
    let scaled = (bytes * new).checked_div(old).unwrap_or(0);
    format!("{}    num_bytes: {scaled}{}", &out[..at], &out[end..])
}

const REMOVALS: &str = "\n## Removals\n";

/// The card with a row per newly removed video in its "Removals" section (added at the end the
/// first time).
pub fn card_with_removals(card: &str, ids: &[String], date: &str, reason: Option<&str>) -> String {
    if ids.is_empty() {
        return card.to_string();
    }
    let mut c = card.to_string();
    if !c.contains(REMOVALS) {
        if !c.ends_with('\n') {
            c.push('\n');
        }
        c += REMOVALS;
        c += &format!(
            "\nVideos taken out after release with `vidcurate takedown`, from every file: data rows, frames, questions and task items, perturbations, harness exports and `{MANIFEST_FILE}`. The split sizes in the YAML above are current; counts in the text are as first released. `{TAKEDOWNS_FILE}` lists the same.\n\n| video | date | reason |\n|---|---|---|\n"
        );
    }
    let start = c.find(REMOVALS).expect("added above") + REMOVALS.len();
    let end = c[start..].find("\n## ").map_or(c.len(), |e| start + e + 1);
    let mut rows = String::new();
    for id in ids {
        let reason = reason.unwrap_or("-").replace(['|', '\n'], " ");
        rows += &format!("| `{id}` | {date} | {reason} |\n");
    }
    c.insert_str(end, &rows);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARD: &str = "---\nconfigs:\n- config_name: default\n  default: true\n  data_files:\n  - split: train\n    path: data/train-*.parquet\n  - split: test\n    path: data/test-*.parquet\n- config_name: perturbations\n  data_files:\n  - split: train\n    path: perturbations/train-*.parquet\ndataset_info:\n- config_name: default\n  features:\n  - name: video_id\n    dtype: string\n  splits:\n  - name: train\n    num_bytes: 1000\n    num_examples: 4\n  - name: test\n    num_bytes: 500\n    num_examples: 2\n- config_name: perturbations\n  features:\n  - name: video_id\n    dtype: string\n  splits:\n  - name: train\n    num_bytes: 240\n    num_examples: 24\n---\n\n# t\n";

    /// Release-relative file → rows.
    fn rows(files: &[(&str, usize)]) -> HashMap<String, usize> {
        files.iter().map(|(f, n)| (f.to_string(), *n)).collect()
    }

    #[test]
    fn split_sizes_are_recounted_and_nothing_else_moves() {
        let rows = rows(&[
            ("data/train-00000-of-00002.parquet", 2),
            ("data/train-00001-of-00002.parquet", 1),
            ("data/test-00000-of-00001.parquet", 2),
            ("perturbations/train-00000-of-00001.parquet", 18),
        ]);
        let got = card_with_sizes(CARD, &rows);
        let want = CARD
            .replace(
                "num_bytes: 1000\n    num_examples: 4",
                "num_bytes: 750\n    num_examples: 3",
            )
            .replace(
                "num_bytes: 240\n    num_examples: 24",
                "num_bytes: 180\n    num_examples: 18",
            );
        assert_eq!(got, want);
        assert_eq!(card_with_sizes(&got, &rows), got);
    }

    #[test]
    fn an_emptied_split_and_an_emptied_config_leave_the_yaml() {
        let rows = rows(&[
            ("data/train-00000-of-00001.parquet", 4),
            ("data/test-00000-of-00001.parquet", 0),
            ("perturbations/train-00000-of-00001.parquet", 0),
        ]);
        let got = card_with_sizes(CARD, &rows);
        let want = "---\nconfigs:\n- config_name: default\n  default: true\n  data_files:\n  - split: train\n    path: data/train-*.parquet\ndataset_info:\n- config_name: default\n  features:\n  - name: video_id\n    dtype: string\n  splits:\n  - name: train\n    num_bytes: 1000\n    num_examples: 4\n---\n\n# t\n";
        assert_eq!(got, want);
    }

    #[test]
    fn removals_go_in_one_section() {
        let once = card_with_removals(CARD, &["a".into()], "2026-12-04", Some("owner asked"));
        let twice = card_with_removals(&once, &["b".into()], "2026-12-05", None);
        assert!(
            twice.ends_with("| `a` | 2026-12-04 | owner asked |\n| `b` | 2026-12-05 | - |\n"),
            "{twice}"
        );
        assert_eq!(twice.matches(REMOVALS).count(), 1);
        assert_eq!(card_with_removals(&twice, &[], "x", None), twice);
    }
}
