//! Versions of a release (issue 69): what changed between two release folders, the version
//! that change makes (semantic: only additions are a minor version; a removal, a relabel, a
//! move between splits, a redrafted or removed item, a takedown a major one; nothing changed:
//! the same version, as it was recorded),
//! and what a new release records of it: `CHANGES.md`, the `changes` config
//! (`changes/changes-00000-of-00001.parquet`: video, item, split, change, old, new) and the
//! card's section and YAML entry. `release` calls `record`; `vidcurate diff` calls `between`
//! and `render`. Reads release folders (`snapshot`); writes into the new one; calls nothing.

mod snapshot;

use crate::error::RunError;
use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
pub use snapshot::{Item, Snapshot, Video};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// One change between two versions: of a video (`item` empty) or of one of its items.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub video_id: String,
    /// `<config>/<item_id>` for an item's change.
    pub item: Option<String>,
    /// The split it is in (the old one for what left).
    pub split: String,
    /// added, removed, taken_down, relabelled, moved, item_added, item_removed, item_redrafted
    pub change: &'static str,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl Change {
    /// Whether users of the old version can compare scores across it: only additions keep
    /// every earlier number.
    pub fn breaks(&self) -> bool {
        !matches!(self.change, "added" | "item_added")
    }
}

fn change(video_id: &str, split: &str, what: &'static str) -> Change {
    Change {
        video_id: video_id.to_string(),
        item: None,
        split: split.to_string(),
        change: what,
        old: None,
        new: None,
    }
}

/// Every change from `old` to `new`, sorted by video, then item.
pub fn between(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let mut out = vec![];
    for (id, v) in &old.videos {
        match new.videos.get(id) {
            None if new.taken_down.contains(id) => out.push(change(id, &v.split, "taken_down")),
            None => out.push(change(id, &v.split, "removed")),
            Some(n) => {
                if n.split != v.split {
                    let mut c = change(id, &n.split, "moved");
                    (c.old, c.new) = (Some(v.split.clone()), Some(n.split.clone()));
                    out.push(c);
                }
                if n.label != v.label {
                    let mut c = change(id, &n.split, "relabelled");
                    (c.old, c.new) = (v.label.clone(), n.label.clone());
                    out.push(c);
                }
            }
        }
    }
    for (id, v) in &new.videos {
        if !old.videos.contains_key(id) {
            out.push(change(id, &v.split, "added"));
        }
    }
    out.extend(item_changes(old, new));
    out.sort();
    out
}

fn item_changes(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let mut out = vec![];
    let item = |key: &str, it: &snapshot::Item, what: &'static str| Change {
        item: Some(key.to_string()),
        ..change(&it.video_id, &it.split, what)
    };
    for (key, it) in &old.items {
        match new.items.get(key) {
            None => out.push(item(key, it, "item_removed")),
            Some(n) if n.content != it.content => out.push(item(key, n, "item_redrafted")),
            Some(_) => {}
        }
    }
    for (key, it) in &new.items {
        if !old.items.contains_key(key) {
            out.push(item(key, it, "item_added"));
        }
    }
    out
}

/// The version after `previous` with `changes`: major for a change that breaks a comparison,
/// minor for additions only, `previous` itself for none. A version that is not
/// `MAJOR.MINOR.PATCH` is taken as 1.0.0.
pub fn bump(previous: &str, changes: &[Change]) -> String {
    let [major, minor, patch] = semver(previous).unwrap_or([1, 0, 0]);
    if changes.iter().any(Change::breaks) {
        format!("{}.0.0", major + 1)
    } else if !changes.is_empty() {
        format!("{major}.{}.0", minor + 1)
    } else {
        format!("{major}.{minor}.{patch}")
    }
}

/// `MAJOR.MINOR.PATCH` (a leading `v` allowed) as numbers.
fn semver(v: &str) -> Option<[u64; 3]> {
    let parts: Vec<u64> = (v.trim_start_matches('v').split('.'))
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    parts.try_into().ok()
}

/// The kinds of change, in the order they are counted.
const KINDS: [&str; 8] = [
    "added",
    "removed",
    "taken_down",
    "relabelled",
    "moved",
    "item_added",
    "item_removed",
    "item_redrafted",
];

/// The next patch version of `previous` (1.0.1 for one that is not `MAJOR.MINOR.PATCH`).
fn bump_patch(previous: &str) -> String {
    let [major, minor, patch] = semver(previous).unwrap_or([1, 0, 0]);
    format!("{major}.{minor}.{}", patch + 1)
}

/// Counts per kind of change, in a fixed order.
pub fn counts(changes: &[Change]) -> Vec<(&'static str, usize)> {
    KINDS
        .iter()
        .map(|k| (*k, changes.iter().filter(|c| c.change == *k).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The change table as text: a summary line, then one line per change.
pub fn render(old: &str, new: &str, changes: &[Change]) -> String {
    let mut t = String::new();
    let summary: Vec<String> = (counts(changes).iter())
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let summary = if summary.is_empty() {
        "nothing changed".to_string()
    } else {
        summary.join(", ")
    };
    let _ = writeln!(t, "{old} → {new}: {summary}");
    for c in changes {
        let _ = writeln!(
            t,
            "{:<16} {:<24} {:<10} {:<14} {}",
            c.video_id,
            c.item.as_deref().unwrap_or("-"),
            c.split,
            c.change,
            match (&c.old, &c.new) {
                (None, None) => String::new(),
                (o, n) => format!(
                    "{} → {}",
                    o.as_deref().unwrap_or("-"),
                    n.as_deref().unwrap_or("-")
                ),
            }
        );
    }
    t
}

/// The changes as the `changes` config's rows.
fn changes_batch(changes: &[Change]) -> Result<RecordBatch, RunError> {
    let col = |f: &dyn Fn(&Change) -> Option<String>| {
        Arc::new(StringArray::from(changes.iter().map(f).collect::<Vec<_>>())) as _
    };
    let schema = Schema::new(vec![
        Field::new("video_id", DataType::Utf8, false),
        Field::new("item", DataType::Utf8, true),
        Field::new("split", DataType::Utf8, false),
        Field::new("change", DataType::Utf8, false),
        Field::new("old", DataType::Utf8, true),
        Field::new("new", DataType::Utf8, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            col(&|c| Some(c.video_id.clone())),
            col(&|c| c.item.clone()),
            col(&|c| Some(c.split.clone())),
            col(&|c| Some(c.change.to_string())),
            col(&|c| c.old.clone()),
            col(&|c| c.new.clone()),
        ],
    )
    .map_err(|e| RunError::Internal(e.to_string()))
}

/// The `changes` config's path in a release.
pub const CHANGES_PARQUET: &str = "changes/changes-00000-of-00001.parquet";

/// What `record` settled for the new release.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub version: String,
    pub previous: Option<String>,
    pub changes: Vec<Change>,
}

/// The release a new one follows, read before anything is written.
pub struct Previous {
    pub snapshot: Snapshot,
    /// Its CHANGES.md.
    md: Option<String>,
    /// What it recorded against the version before it: that version, its changes config's
    /// bytes and rows (none for a first version).
    own: Option<(String, Vec<u8>, Vec<Change>)>,
}

/// The new release's version, and (with a previous release) its changes written into `out`:
/// CHANGES.md (this version's entry above the previous release's own) and the `changes`
/// config. `asked`: the version the user set. A release that changes nothing is the previous
/// version as it was recorded (made again in place, it is the same folder).
pub fn record(
    out: &Path,
    previous: Option<&Previous>,
    asked: Option<&str>,
) -> Result<Recorded, RunError> {
    let Some(prev) = previous else {
        return Ok(first(asked));
    };
    let now = Snapshot::read(out)?;
    let changes = between(&prev.snapshot, &now);
    let before = (prev.snapshot.version.clone()).unwrap_or_else(|| "1.0.0".into());
    let same_files = now.files == prev.snapshot.files;
    if changes.is_empty() && same_files && asked.is_none_or(|v| v == before) {
        let Some((from, bytes, rows)) = &prev.own else {
            return Ok(first(Some(&before)));
        };
        write_changes(out, bytes, prev.md.as_deref().unwrap_or_default())?;
        return Ok(Recorded {
            version: before,
            previous: Some(from.clone()),
            changes: rows.clone(),
        });
    }
    // No video or item changed, but the files did (a column added, metadata refreshed): a patch.
    let patch = || bump_patch(&before);
    let version = match asked {
        Some(v) => v.to_string(),
        None if changes.is_empty() => patch(),
        None => bump(&before, &changes),
    };
    let bytes = crate::store::shards::encode_table(&changes_batch(&changes)?)?;
    let md = changes_md(&before, &version, &changes, prev.md.as_deref());
    write_changes(out, &bytes, &md)?;
    Ok(Recorded {
        version,
        previous: Some(before),
        changes,
    })
}

/// A first version: no changes to record.
fn first(asked: Option<&str>) -> Recorded {
    Recorded {
        version: asked.unwrap_or("1.0.0").to_string(),
        previous: None,
        changes: vec![],
    }
}

fn write_changes(out: &Path, parquet: &[u8], md: &str) -> Result<(), RunError> {
    let path = out.join(CHANGES_PARQUET);
    let io = crate::error::io(&path);
    std::fs::create_dir_all(path.parent().unwrap_or(out)).map_err(io)?;
    crate::store::write_file(&path, parquet).map_err(crate::error::io(&path))?;
    let p = out.join("CHANGES.md");
    std::fs::write(&p, md).map_err(crate::error::io(&p))
}

/// CHANGES.md: this version's entry, then the earlier entries as they were.
fn changes_md(before: &str, version: &str, changes: &[Change], earlier: Option<&str>) -> String {
    let mut t = String::from("# Changes\n\n");
    let _ = writeln!(t, "## {version} (from {before})\n");
    for (k, n) in counts(changes) {
        let _ = writeln!(t, "- {k}: {n}");
    }
    if changes.is_empty() {
        t += "- no video or item changed; other values of the rows did (a column added, metadata refreshed)\n";
    }
    if changes.iter().any(Change::breaks) {
        t += "\nScores on this version are not comparable with scores on the previous one where \
              videos or items changed; `vidcurate evaluate RELEASE PREDICTIONS --shared-with OLD` \
              scores the items both versions hold unchanged.\n";
    }
    t += "\nEvery change is a row of the `changes` config (`changes/`).\n";
    if let Some(e) = earlier {
        t += "\n";
        t += e.trim_start_matches("# Changes").trim_start();
    }
    t
}

/// The release a new one follows: the folder `--previous` names, else the release already at
/// `out` (read before it is replaced).
pub fn previous(given: Option<&Path>, out: &Path) -> Result<Option<Previous>, RunError> {
    let dir = match given {
        Some(d) => d,
        None if crate::release::integrity::is_release(out) => out,
        None => return Ok(None),
    };
    let md = std::fs::read_to_string(dir.join("CHANGES.md")).ok();
    // "## 1.1.0 (from 1.0.0)": the version the previous one followed.
    let from = md.as_deref().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("## "))?;
        let at = line.find("(from ")?;
        Some(line[at + 6..].trim_end_matches(')').to_string())
    });
    let path = dir.join(CHANGES_PARQUET);
    let own = match (from, std::fs::read(&path)) {
        (Some(from), Ok(bytes)) => {
            let rows = read_changes(&path)?;
            Some((from, bytes, rows))
        }
        _ => None,
    };
    Ok(Some(Previous {
        snapshot: Snapshot::read(dir)?,
        md,
        own,
    }))
}

/// A `changes` config's rows.
fn read_changes(path: &Path) -> Result<Vec<Change>, RunError> {
    let mut out = vec![];
    for b in crate::release::read_parquet(path)?.1 {
        let col = |n: &str| snapshot::text(&b, n);
        let (ids, items, splits) = (col("video_id"), col("item"), col("split"));
        let (kinds, olds, news) = (col("change"), col("old"), col("new"));
        for i in 0..b.num_rows() {
            let kind = kinds[i].as_deref().unwrap_or_default();
            let Some(change) = KINDS.iter().find(|k| **k == kind) else {
                continue;
            };
            out.push(Change {
                video_id: ids[i].clone().unwrap_or_default(),
                item: items[i].clone(),
                split: splits[i].clone().unwrap_or_default(),
                change,
                old: olds[i].clone(),
                new: news[i].clone(),
            });
        }
    }
    Ok(out)
}

/// The card with the version's section and the `changes` config in its YAML.
pub fn card_with_version(card: &str, r: &Recorded, live: bool) -> String {
    let mut card = card.to_string();
    if r.previous.is_some()
        && let Some(at) = card.find("dataset_info:\n")
    {
        card.insert_str(
            at,
            "- config_name: changes\n  data_files:\n  - split: changes\n    path: changes/*.parquet\n",
        );
    }
    let mut s = format!("\n## Version {}\n\n", r.version);
    match &r.previous {
        None => {
            s += "The first version: no earlier release was given (`release --previous DIR`).\n"
        }
        Some(before) => {
            let summary: Vec<String> = (counts(&r.changes).iter())
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            let _ = writeln!(
                s,
                "Changes from {before}: {}. CHANGES.md says what they mean for scores; the `changes` config (`load_dataset(\"path/to/this/folder\", \"changes\")`) lists every one; `vidcurate diff OLD NEW` prints the same table for any two releases.",
                if summary.is_empty() {
                    "none".to_string()
                } else {
                    summary.join(", ")
                }
            );
        }
    }
    if live {
        s += "\nThis is a live dataset (`isLiveDataset` in croissant.json): it is collected again and released as new versions.\n";
    }
    card + &s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additions_are_minor_anything_else_major_nothing_the_same_version() {
        let added = [change("v1", "train", "added")];
        let removed = [change("v1", "train", "removed")];
        assert_eq!(bump("1.1.0", &added), "1.2.0");
        assert_eq!(bump("v1.1.3", &removed), "2.0.0");
        assert_eq!(bump("1.1.3", &[]), "1.1.3");
        // Not MAJOR.MINOR.PATCH: taken as 1.0.0.
        assert_eq!(bump("2024.1", &added), "1.1.0");
        assert_eq!(bump_patch("2.0.0"), "2.0.1");
        assert_eq!(bump_patch("1.2.3-rc1"), "1.0.1");
    }
}
