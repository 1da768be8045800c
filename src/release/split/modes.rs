//! The two placements besides the ratio split: a dataset's own splits kept as they are
//! (`--from-column`), and MVFNDB's category-test-split (`--balanced-test`: a test split with the
//! same number of videos in every stratum, label × category in the paper; the rest by the
//! other splits' ratios).

use super::{Item, SplitOptions, assign, seeded_key};
use crate::error::RunError;
use std::collections::{BTreeMap, HashMap};

/// How many videos of each stratum the balanced test split takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PerCell {
    /// This many; a stratum with fewer is an error naming it.
    Count(usize),
    /// As many as the smallest stratum has.
    Max,
}

pub fn parse_per_cell(s: &str) -> Result<PerCell, crate::error::BadArgument> {
    if s == "max" {
        return Ok(PerCell::Max);
    }
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(PerCell::Count(n)),
        _ => Err(crate::error::BadArgument(format!(
            "{s:?}: expected a number of videos per stratum (1 or more) or `max`"
        ))),
    }
}

/// The place of every item from its value in the dataset's own split column (`values`: video
/// → value). The split names are `--names` that occur, in that order, then any other value in
/// sorted order. A video without a value is an error naming the first few.
pub fn from_column(
    items: &[Item],
    values: &HashMap<String, Option<String>>,
    column: &str,
    opts: &SplitOptions,
) -> Result<(Vec<usize>, Vec<String>), RunError> {
    let missing: Vec<&str> = items
        .iter()
        .filter(|i| values.get(&i.video_id).cloned().flatten().is_none())
        .map(|i| i.video_id.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(RunError::Config(format!(
            "--from-column {column}: {} selected video(s) have no value (first: {}); give them one, leave them out with --leave-out-missing, or split by --ratios",
            missing.len(),
            missing
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let value = |i: &Item| values[&i.video_id].clone().unwrap_or_default();
    let mut names: Vec<String> = opts
        .names
        .iter()
        .filter(|n| items.iter().any(|i| value(i) == **n))
        .cloned()
        .collect();
    let mut others: Vec<String> = items
        .iter()
        .map(value)
        .filter(|v| !names.contains(v))
        .collect();
    others.sort();
    others.dedup();
    names.extend(others);
    let placed = items
        .iter()
        .map(|i| names.iter().position(|n| *n == value(i)).unwrap_or(0))
        .collect();
    Ok((placed, names))
}

/// MVFNDB's category-test-split: `per_cell` videos of every stratum go to the last split of
/// `ratios` (the test split); the rest are placed over the other splits by their ratios
/// (stratified, as `assign` does). Groups and duplicate clusters are not kept whole here, so
/// `--group` and `--dedup` are refused with it (checked by the caller).
pub fn balanced_test(
    items: &[Item],
    per_cell: PerCell,
    ratios: &[f64],
    seed: u64,
) -> Result<Vec<usize>, RunError> {
    let test = ratios.len() - 1;
    let mut by_stratum: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (n, it) in items.iter().enumerate() {
        by_stratum.entry(it.stratum.as_str()).or_default().push(n);
    }
    let smallest = by_stratum.values().map(Vec::len).min().unwrap_or(0);
    let n = match per_cell {
        PerCell::Max => smallest,
        PerCell::Count(n) => {
            if let Some((s, v)) = by_stratum.iter().find(|(_, v)| v.len() < n) {
                return Err(RunError::Config(format!(
                    "--balanced-test {n}: stratum {s:?} has only {} video(s) (use at most {smallest}, or `max`)",
                    v.len()
                )));
            }
            n
        }
    };
    let mut placed = vec![usize::MAX; items.len()];
    for members in by_stratum.values_mut() {
        members.sort_by_key(|m| (seeded_key(seed, &items[*m].video_id), *m));
        for m in members.iter().take(n) {
            placed[*m] = test;
        }
    }
    let rest: Vec<usize> = (0..items.len())
        .filter(|i| placed[*i] == usize::MAX)
        .collect();
    let mut others = ratios.to_vec();
    others[test] = 0.0;
    if others.iter().sum::<f64>() <= 0.0 {
        others[0] = 1.0;
    }
    let rest_items: Vec<Item> = rest.iter().map(|i| items[*i].clone()).collect();
    for (i, s) in rest.iter().zip(assign(&rest_items, &others, seed)) {
        placed[*i] = s;
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, stratum: &str) -> Item {
        Item {
            video_id: id.into(),
            stratum: stratum.into(),
            group: format!("\u{0}{id}"),
            cluster: None,
        }
    }

    #[test]
    fn the_test_split_has_the_same_count_in_every_stratum() {
        // fake/event 10, fake/knowledge 4, real/event 7.
        let mut items = vec![];
        for (s, n) in [("fake/event", 10), ("fake/knowledge", 4), ("real/event", 7)] {
            for i in 0..n {
                items.push(item(&format!("{s}-{i}"), s));
            }
        }
        let ratios = [0.8, 0.0, 0.2];
        let placed = balanced_test(&items, PerCell::Count(3), &ratios, 13).unwrap();
        for s in ["fake/event", "fake/knowledge", "real/event"] {
            let test = items
                .iter()
                .zip(&placed)
                .filter(|(i, p)| i.stratum == s && **p == 2)
                .count();
            assert_eq!(test, 3, "{s}");
        }
        // The rest go to train (validation has share 0).
        assert_eq!(placed.iter().filter(|p| **p == 0).count(), 21 - 9);
        assert!(placed.iter().all(|p| *p != 1));
        let max = balanced_test(&items, PerCell::Max, &ratios, 13).unwrap();
        assert_eq!(max.iter().filter(|p| **p == 2).count(), 12);
        let e = balanced_test(&items, PerCell::Count(5), &ratios, 13)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"fake/knowledge\" has only 4"), "{e}");
        // Deterministic in any order; another seed draws another test split.
        let mut rev = items.clone();
        rev.reverse();
        let placed_rev = balanced_test(&rev, PerCell::Count(3), &ratios, 13).unwrap();
        let test_ids = |it: &[Item], p: &[usize]| -> Vec<String> {
            let mut v: Vec<String> = it
                .iter()
                .zip(p)
                .filter(|(_, p)| **p == 2)
                .map(|(i, _)| i.video_id.clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(test_ids(&items, &placed), test_ids(&rev, &placed_rev));
        let other = balanced_test(&items, PerCell::Count(3), &ratios, 14).unwrap();
        assert_ne!(test_ids(&items, &placed), test_ids(&items, &other));
    }

    #[test]
    fn a_datasets_own_splits_are_kept_and_named_in_order() {
        let items = vec![
            item("a", "x"),
            item("b", "x"),
            item("c", "x"),
            item("d", "x"),
        ];
        let values: HashMap<String, Option<String>> = [
            ("a", "test"),
            ("b", "train"),
            ("c", "fold9"),
            ("d", "train"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), Some(v.to_string())))
        .collect();
        let opts = SplitOptions {
            ratios: vec![0.7, 0.1, 0.2],
            names: vec!["train".into(), "validation".into(), "test".into()],
            stratify: vec![],
            group: None,
            seed: 13,
            name: "x".into(),
            fresh: false,
            dedup: false,
            drop_duplicates: false,
            max_distance: 10,
            from_column: None,
            leave_out_missing: false,
            balanced_test: None,
            command: None,
        };
        let (placed, names) = from_column(&items, &values, "split", &opts).unwrap();
        assert_eq!(names, ["train", "test", "fold9"]);
        assert_eq!(placed, [1, 0, 2, 0]);
        let mut missing = values.clone();
        missing.insert("c".into(), None);
        let e = from_column(&items, &missing, "split", &opts)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1 selected video(s) have no value (first: c)"),
            "{e}"
        );
    }
}
