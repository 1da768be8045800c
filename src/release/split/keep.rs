//! Making a split again under its name keeps its videos (issue 69): a dataset that grows must
//! never move a video of version 1's test split into version 2's train split. Every video the
//! split held that the run still selects stays where it was; a new video of a group (a channel,
//! a cluster) already placed goes where its group is; the other new videos are placed as a first
//! split places them, toward the targets; videos the run no longer selects leave, and nothing
//! else moves. `--fresh` forgets the split made before; so does a change of its settings
//! (names, ratios, strata, group, seed), which the report names.
//!
//! Reads `splits/NAME.parquet` and `NAME.json` through `stages::selection::read_split`; writes
//! nothing.

use super::SplitOptions;
use crate::error::RunError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The split made before under this name, as this one starts from it.
#[derive(Debug, Default)]
pub struct Previous {
    /// Video id → its split's index in `--names`, when the split is kept.
    pub pinned: HashMap<String, usize>,
    /// Video id → split name, as it was (kept or not).
    pub placed: BTreeMap<String, String>,
    /// Why it is not kept (`--fresh`, or the settings that changed).
    pub fresh: Option<String>,
}

/// What a split made again did to the one before.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Changes {
    /// Videos in the split they had.
    pub kept: usize,
    /// Videos now in another split (only when the split was made fresh).
    pub moved: usize,
    /// Videos it did not hold before.
    pub added: usize,
    /// Videos it held that the run no longer selects.
    pub left: usize,
    /// Why it was made fresh, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh: Option<String>,
}

/// The split stored under `opts.name`, if any (None: the first split of that name).
pub async fn previous(
    store: &std::sync::Arc<dyn crate::store::Store>,
    opts: &SplitOptions,
) -> Result<Option<Previous>, RunError> {
    let exists = store
        .get(&format!("splits/{}.parquet", opts.name))
        .await
        .is_ok();
    if !exists {
        return Ok(None);
    }
    let (placed, report) = crate::stages::selection::read_split(store, &opts.name).await?;
    let fresh = if opts.fresh {
        Some("--fresh".to_string())
    } else {
        changed_settings(opts, &report)
    };
    let pinned = match fresh {
        Some(_) => HashMap::new(),
        None => (placed.iter())
            .filter_map(|(id, s)| Some((id.clone(), opts.names.iter().position(|n| n == s)?)))
            .collect(),
    };
    Ok(Some(Previous {
        pinned,
        placed,
        fresh,
    }))
}

/// The settings of the split before (`NAME.json`) that differ from `opts`, named; None when
/// they are the same. A split from a dataset's column or a balanced test split is placed by
/// rule, not by the greedy pass: it is always made fresh.
fn changed_settings(opts: &SplitOptions, before: &serde_json::Value) -> Option<String> {
    if opts.from_column.is_some() || opts.balanced_test.is_some() {
        return Some("--from-column and --balanced-test splits are made by rule".into());
    }
    let same_ratios = before["ratios"].as_array().is_some_and(|r| {
        r.len() == opts.ratios.len()
            && r.iter()
                .zip(&opts.ratios)
                .all(|(a, b)| (a.as_f64().unwrap_or(-1.0) - b).abs() < 1e-9)
    });
    let checks: [(&str, bool); 5] = [
        ("--names", before["names"] == json(&opts.names)),
        ("--ratios", same_ratios),
        ("--stratify", before["stratify"] == json(&opts.stratify)),
        ("--group", before["group"] == json(&opts.group)),
        ("--seed", before["seed"] == json(&opts.seed)),
    ];
    let changed: Vec<&str> = checks
        .iter()
        .filter(|(_, same)| !same)
        .map(|(n, _)| *n)
        .collect();
    (!changed.is_empty()).then(|| format!("{} changed", changed.join(", ")))
}

/// A setting as the JSON `NAME.json` holds it.
fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// The split's videos against the split before.
pub fn changes(before: &Previous, now: &[(String, String)]) -> Changes {
    let mut c = Changes {
        fresh: before.fresh.clone(),
        ..Default::default()
    };
    let now_ids: std::collections::HashSet<&str> = now.iter().map(|(id, _)| id.as_str()).collect();
    for (id, split) in now {
        match before.placed.get(id) {
            Some(s) if s == split => c.kept += 1,
            Some(_) => c.moved += 1,
            None => c.added += 1,
        }
    }
    c.left = before
        .placed
        .keys()
        .filter(|id| !now_ids.contains(id.as_str()))
        .count();
    c
}
