//! Which split a written release's file holds, as its name says: `release` writes
//! `<split>-NNNNN-of-NNNNN.parquet` under `data/`, `perturbations/`, `questions/` and
//! `tasks/<task>/`, and `datasets.load_dataset(DIR)` reads the split from that name (the card's
//! `data_files` patterns), so `evaluate --split`, the harness exports and a test that loads the
//! release agree on what "test" holds.
//!
//! Reads file names under a release folder and its card's front matter (for the splits' order);
//! writes, calls and caches nothing.

use crate::error::RunError;
use std::path::Path;

/// The split a release file holds: `test-00000-of-00001.parquet` → `test`; None for a file
/// named otherwise (a folder someone made by hand).
pub fn split_of(path: &Path) -> Option<&str> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".parquet")?;
    // `<split>-NNNNN-of-NNNNN`: the last 15 characters are the shard's numbers.
    let cut = stem
        .len()
        .checked_sub(15)
        .filter(|&c| stem.is_char_boundary(c))?;
    let (split, shard) = stem.split_at(cut);
    let b = shard.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let numbered = b[0] == b'-' && digits(1..6) && &shard[6..10] == "-of-" && digits(10..15);
    (numbered && !split.is_empty()).then_some(split)
}

/// The release's splits: those its `data/` and `tasks/<task>/` files name, in the order the
/// card lists them (`release`'s `--names` order: train, validation, test), then any other by
/// name. Empty when no file names a split. A folder with neither `data/` nor `tasks/` is not
/// a release; a task release written without `data/` (a benchmark's own) is one.
pub fn release_splits(release: &Path) -> Result<Vec<String>, RunError> {
    let (data, tasks) = (release.join("data"), release.join("tasks"));
    let listed = |dir: &Path| {
        crate::store::parquet_files_in(dir).map_err(|e| {
            RunError::Config(format!("{}: {e} (not a release folder?)", dir.display()))
        })
    };
    let mut files = vec![];
    if data.is_dir() || !tasks.is_dir() {
        files.extend(listed(&data)?);
    }
    if tasks.is_dir() {
        for entry in std::fs::read_dir(&tasks).map_err(crate::error::io(&tasks))? {
            let dir = entry.map_err(crate::error::io(&tasks))?.path();
            if dir.is_dir() {
                files.extend(listed(&dir)?);
            }
        }
    }
    let mut named: Vec<String> = files
        .iter()
        .filter_map(|f| split_of(f).map(str::to_string))
        .collect();
    named.sort();
    named.dedup();
    let card = std::fs::read_to_string(release.join("README.md")).unwrap_or_default();
    let mut out: Vec<String> = card_order(&card)
        .into_iter()
        .filter(|s| named.contains(s))
        .collect();
    for s in named {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// The splits the card's front matter lists (`  - split: NAME`), first appearance first.
fn card_order(card: &str) -> Vec<String> {
    let Some(front) = card
        .strip_prefix("---\n")
        .and_then(|r| r.split("\n---\n").next())
    else {
        return vec![];
    };
    let mut out: Vec<String> = vec![];
    for l in front.lines() {
        if let Some(s) = l.trim().strip_prefix("- split: ") {
            let s = s.trim().to_string();
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_split_is_its_name_before_the_shard_numbers() {
        let s = |n: &str| split_of(Path::new(n)).map(str::to_string);
        assert_eq!(
            s("data/test-00000-of-00001.parquet").as_deref(),
            Some("test")
        );
        assert_eq!(
            s("tasks/kep/my-split-00003-of-00010.parquet").as_deref(),
            Some("my-split")
        );
        assert_eq!(s("data/data.parquet"), None);
        assert_eq!(s("-00000-of-00001.parquet"), None);
        assert_eq!(s("test-0000a-of-00001.parquet"), None);
        assert_eq!(s("test-00000-of-00001.csv"), None);
    }

    #[test]
    fn splits_come_in_the_cards_order_then_by_name() {
        let card = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*.parquet\n  - split: validation\n    path: x\n  - split: test\n    path: y\n---\n\n- split: later\n";
        let d = crate::store::test_support::folder_with([
            ("data/test-00000-of-00001.parquet", ""),
            ("data/train-00000-of-00002.parquet", ""),
            ("data/train-00001-of-00002.parquet", ""),
            ("data/extra-00000-of-00001.parquet", ""),
            ("data/validation-00000-of-00001.parquet", ""),
            ("data/loose.parquet", ""),
            ("README.md", card),
        ]);
        assert_eq!(
            release_splits(d.path()).unwrap(),
            ["train", "validation", "test", "extra"]
        );
    }
}
