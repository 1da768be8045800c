//! What makes a rerun equal a clean run: per-video input digests, and the decision a stage makes
//! for a video an earlier run settled.
//!
//! The source gives each record its lineage (`record::Lineage`): a digest of the row it read, of
//! the media file's bytes (its BLAKE3, wherever the file lies), and of the extra columns. A stage's input digest
//! is of the slots it reads (`Processor::reads`), and the slot it fills gets a digest of the stage
//! and that input, so a change flows to exactly the stages downstream of what changed. A stored
//! row whose input digest differs is recomputed; one whose extra columns alone differ is written
//! again with the new values, uncomputed; the old rows are retired (`store::shards::retired`).
//!
//! Reads a `Prior` (what earlier runs settled). Writes tombstones (`retire_removed`). Calls
//! nothing external; caches nothing.

use crate::error::RunError;
use crate::record::{Lineage, Slot, Stamp, VideoRecord, digest};
use crate::runtime::StageCounts;
use crate::store::Store;
use crate::store::shards::Prior;
use crate::store::shards::retired::{self, RetiredEntry, why};
use std::collections::{BTreeMap, HashSet};

/// Tally keys of what a rerun found changed (shown by `summary_line`, in the manifest's counts).
pub mod tally {
    /// Source rows that differ from the stored ones; `changed:<field>` per field that differs.
    pub const CHANGED: &str = "rerun_changed";
    pub const REMOVED: &str = "rerun_removed";
    pub const ADDED: &str = "rerun_added";
    /// Stage rows computed again because what the stage read changed.
    pub const RECOMPUTED: &str = "rerun_recomputed";
    /// Stage rows written again (uncomputed) with new extra-column values.
    pub const REWRITTEN: &str = "rerun_rewritten";
    /// Videos rejected for a transient error, tried again.
    pub const RETRIED: &str = "rerun_retried";
    /// Media files of known videos read again because their stat changed (copied, moved,
    /// touched); whether their bytes changed is counted apart (`changed (file)`).
    pub const REHASHED: &str = "rerun_rehashed";
    /// Stage rows (or rejects) held apart that the selection sends to the stage again: written
    /// back into the table, uncomputed.
    pub const RESTORED: &str = "rerun_restored";
    /// Source rows written again only for a new path (the same bytes elsewhere): nothing after
    /// the source computes.
    pub const MOVED: &str = "rerun_moved";
}

/// The digest of what a stage that reads `reads` (and the extra columns, with `extras`) reads
/// of `lin`: a slot no earlier stage filled counts as absent.
pub fn input_digest(reads: &[Slot], extras: bool, lin: &Lineage) -> u64 {
    let mut names: Vec<&str> = reads.iter().map(|s| s.name()).collect();
    names.sort_unstable();
    names.dedup();
    let mut parts: Vec<Vec<u8>> = vec![];
    for name in names {
        parts.push(name.as_bytes().to_vec());
        let d = reads
            .iter()
            .find(|s| s.name() == name)
            .and_then(|s| lin.slot(*s));
        parts.push(d.map(|d| d.to_le_bytes().to_vec()).unwrap_or_default());
    }
    if extras {
        parts.push(b"extras".to_vec());
        parts.push(lin.extras.to_le_bytes().to_vec());
    }
    digest(parts.iter().map(Vec::as_slice))
}

/// `input` with what a stage's answers come from beyond its settings (the base URLs of its
/// services); unchanged when there is nothing.
pub fn salted(input: u64, salt: &str) -> u64 {
    if salt.is_empty() {
        return input;
    }
    digest([&input.to_le_bytes(), salt.as_bytes()])
}

/// The digest of the slot a stage fills, from its id and its input digest.
pub fn output_digest(stage_id: &str, input: u64) -> u64 {
    digest([stage_id.as_bytes(), &input.to_le_bytes()])
}

/// The lineage a source's record starts with, and the stamp of its `source` row: the row's
/// content and the media file (`input`), and its extra columns (`extras`). The `Source` slot
/// is what stages read of the row: its title and description (the prompts; an extra column
/// of that name stands in for a missing one) and its URL (the download). A fixed publish time
/// or view count changes the row, not what a stage read. A stage that comes to read another
/// field of the row adds it here.
pub fn source_lineage(rec: &mut VideoRecord, extras: &[String]) -> Stamp {
    let values: Vec<Vec<u8>> = rec
        .extra
        .iter()
        .map(|v| v.as_deref().map_or(vec![0xff], |s| s.as_bytes().to_vec()))
        .collect();
    let extras_digest = digest(values.iter().map(Vec::as_slice));
    let text = |own: &Option<String>, name: &str| {
        let extra = || {
            extras
                .iter()
                .position(|n| n == name)
                .and_then(|i| rec.extra.get(i).cloned().flatten())
        };
        own.clone().or_else(extra).unwrap_or_default()
    };
    let (t, d) = (
        text(&rec.source.title, "title"),
        text(&rec.source.description, "description"),
    );
    let url = rec.source.url.clone().unwrap_or_default();
    let source = digest([t.as_bytes(), d.as_bytes(), url.as_bytes()]);
    let media = rec.media.as_ref().map(media_digest);
    let mut lin = Lineage {
        extras: extras_digest,
        ..Default::default()
    };
    lin.set(Slot::Source, source);
    if let Some(m) = media {
        lin.set(Slot::Media, m);
    }
    let stamp = Stamp {
        input: row_input(&rec.source, media),
        extras: extras_digest,
    };
    lin.stamp = Some(stamp);
    rec.lineage = lin;
    stamp
}

/// `source_lineage`, for a video whose source row was stamped `stored`: where the run directory
/// was written by a version that knew a file by its path, size and modification time, and
/// that file is as it was then, the record keeps that digest, so upgrading recomputes nothing;
/// a file moved or touched since is known by its bytes from then on.
pub fn source_lineage_since(
    rec: &mut VideoRecord,
    extras: &[String],
    stored: Option<Stamp>,
) -> Stamp {
    let stamp = source_lineage(rec, extras);
    let (Some(stored), Some(m)) = (stored, rec.media.as_ref()) else {
        return stamp;
    };
    if stored == stamp {
        return stamp;
    }
    let legacy = legacy_media_digest(&m.path, m.size_bytes);
    if row_input(&rec.source, Some(legacy)) != stored.input {
        return stamp;
    }
    rec.lineage.set(Slot::Media, legacy);
    let stamp = Stamp {
        input: stored.input,
        extras: stamp.extras,
    };
    rec.lineage.stamp = Some(stamp);
    stamp
}

/// How versions before content digests knew a media file: path, size and modification time.
fn legacy_media_digest(path: &str, size: u64) -> u64 {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    digest([
        path.as_bytes(),
        &size.to_le_bytes(),
        &modified.to_le_bytes(),
    ])
}

/// The digest a `source` row's stamp holds of the row and its media file.
pub fn row_input(row: &crate::record::SourceInfo, media: Option<u64>) -> u64 {
    let row_json = serde_json::to_vec(row).unwrap_or_default();
    let media_bytes = media.map(u64::to_le_bytes).unwrap_or_default();
    digest([row_json.as_slice(), &media_bytes])
}

/// A media file as its readers see it: its bytes, whatever its path or times. A file no source
/// hashed (none lists one today) is known by its path and size.
pub fn media_digest(m: &crate::record::MediaFile) -> u64 {
    match &m.blake3 {
        Some(sum) => digest([b"blake3".as_slice(), sum.as_bytes()]),
        None => digest([m.path.as_bytes(), &m.size_bytes.to_le_bytes()]),
    }
}

/// What a stage does with a video, given what earlier runs settled.
#[derive(Debug, PartialEq)]
pub enum Settle {
    /// Its stored rows hold.
    Reuse,
    /// Its stored rows hold, but carry old extra-column values, or are held apart (the selection
    /// had stopped sending the video here): written again, retiring these (in the shard at this
    /// path, of this commit) for `why`.
    Rewrite {
        shard: (String, String),
        why: &'static str,
    },
    /// Rejected before for what it is, with the same inputs, and that reject is held apart:
    /// recorded in the table again, uncomputed, retiring the held one.
    RestoreReject { shard: (String, String) },
    /// Computed (again): `replaces` names the stored settlement it retires, and why.
    Compute {
        replaces: Option<((String, String), &'static str)>,
    },
    /// Rejected before for what it is, with the same inputs.
    RejectedBefore,
}

/// The decision for video `id` whose stage now reads `stamp`. A settlement stored without a
/// stamp (by a version before stamps) is taken as it is: an old run directory resumes without
/// recomputing anything.
pub fn decide<R: serde::Serialize + serde::de::DeserializeOwned>(
    prior: &Prior<R>,
    id: &str,
    stamp: Stamp,
) -> Settle {
    let stored = prior.stamp(id);
    let shard = || {
        let (p, s) = prior.shard_of(id).unwrap_or_default();
        (p.to_string(), s.to_string())
    };
    let input_changed = stored.is_some_and(|s| s.input != stamp.input);
    let extras_changed = stored.is_some_and(|s| s.extras != stamp.extras);
    if prior.is_done(id) {
        if input_changed {
            return Settle::Compute {
                replaces: Some((shard(), why::INPUTS_CHANGED)),
            };
        }
        if extras_changed {
            let why = why::EXTRAS_CHANGED;
            return Settle::Rewrite {
                shard: shard(),
                why,
            };
        }
        if held(prior, id) {
            let why = why::RESTORED;
            return Settle::Rewrite {
                shard: shard(),
                why,
            };
        }
        return Settle::Reuse;
    }
    if prior.is_rejected(id) {
        let why = if prior.is_transient_reject(id) {
            why::RETRIED
        } else if input_changed {
            why::INPUTS_CHANGED
        } else if extras_changed {
            why::EXTRAS_CHANGED
        } else if held(prior, id) {
            return Settle::RestoreReject { shard: shard() };
        } else {
            return Settle::RejectedBefore;
        };
        return Settle::Compute {
            replaces: Some((shard(), why)),
        };
    }
    Settle::Compute { replaces: None }
}

/// Whether the video's settlement is a held copy (`store::shards::held`): its rows, or its
/// reject, go back into the table when the stage is sent it again.
fn held<R: serde::Serialize + serde::de::DeserializeOwned>(prior: &Prior<R>, id: &str) -> bool {
    prior
        .shard_of(id)
        .is_some_and(|(p, _)| crate::store::shards::is_held(p))
}

/// The tally key a decision counts under, if it is a change.
pub fn tally_of(s: &Settle) -> Option<&'static str> {
    match s {
        Settle::Rewrite { why: w, .. } if *w == why::RESTORED => Some(tally::RESTORED),
        Settle::RestoreReject { .. } => Some(tally::RESTORED),
        Settle::Rewrite { .. } => Some(tally::REWRITTEN),
        Settle::Compute {
            replaces: Some((_, w)),
        } if *w == why::RETRIED => Some(tally::RETRIED),
        Settle::Compute { replaces: Some(_) } => Some(tally::RECOMPUTED),
        _ => None,
    }
}

/// Retires `ids` (videos that left the source) from every table in `tables`: one tombstone file
/// per table that holds any of them. Returns how many (table, video) settlements were retired.
pub async fn retire_removed(
    store: &dyn Store,
    tables: &[String],
    ids: &HashSet<String>,
    name: &str,
) -> Result<u64, RunError> {
    let mut n = 0;
    for table in tables {
        let held = crate::store::shards::settled_in(store, table, ids).await?;
        let entries: Vec<RetiredEntry> = held
            .into_iter()
            .map(|(shard, sum, video)| RetiredEntry {
                shard,
                commit: sum,
                video,
                why: why::REMOVED.into(),
            })
            .collect();
        n += entries.len() as u64;
        retired::retire(store, table, name, &entries).await?;
    }
    Ok(n)
}

/// The stage tables of the run: `stages` (the pipeline's now) and every table an earlier
/// pipeline of the run committed shards to (a stage taken out and put back later must not bring
/// back rows of videos that left meanwhile), from the commit records.
pub async fn every_table(store: &dyn Store, stages: &[String]) -> Result<Vec<String>, RunError> {
    let dir = crate::store::commits::COMMITS_DIR;
    let records = store.list(dir).await.map_err(|e| store.io_error(dir, e))?;
    let not_tables = [
        crate::runtime::stage::SOURCE_STAGE_ID,
        crate::store::shards::REJECTS_DIR,
        "selections",
    ];
    let mut out: Vec<String> = stages.to_vec();
    for r in records {
        let Some(table) = r
            .strip_prefix(&format!("{dir}/"))
            .and_then(|p| p.split('/').next())
        else {
            continue;
        };
        if !not_tables.contains(&table) && !out.iter().any(|t| t == table) {
            out.push(table.to_string());
        }
    }
    Ok(out)
}

/// The summary line of what a rerun changed for one stage (`source: 1 changed (label), 1
/// removed`), or None when nothing did.
pub fn summary_line(id: &str, counts: &StageCounts) -> Option<String> {
    let t = &counts.tally;
    let n = |k: &str| t.get(k).copied().unwrap_or(0);
    let fields: Vec<&str> = t
        .keys()
        .filter_map(|k| k.strip_prefix(tally::CHANGED)?.strip_prefix(':'))
        .collect();
    let mut parts = vec![];
    // After files were read again, "0 changed" is said too: a corpus found the same is the news.
    let rehashed = n(tally::REHASHED) > 0;
    let mut say = |count: u64, what: String| {
        if count > 0 || rehashed && what.starts_with("changed") {
            parts.push(format!("{count} {what}"));
        }
    };
    let changed = if fields.is_empty() {
        "changed".to_string()
    } else {
        format!("changed ({})", fields.join(", "))
    };
    say(n(tally::REHASHED), "re-hashed (moved or touched)".into());
    say(n(tally::CHANGED), changed);
    say(n(tally::REMOVED), "removed".into());
    say(n(tally::ADDED), "added".into());
    say(n(tally::RECOMPUTED), "recomputed (inputs changed)".into());
    say(
        n(tally::REWRITTEN),
        "rewritten (extra columns changed)".into(),
    );
    say(n(tally::RETRIED), "retried (transient rejects)".into());
    say(
        n(tally::RESTORED),
        "restored (held rows, selected again: uncomputed)".into(),
    );
    say(
        n(tally::MOVED),
        "moved (same bytes, new path: rows rewritten)".into(),
    );
    (!parts.is_empty()).then(|| format!("{id}: {}", parts.join(", ")))
}

/// The fields of a source row that differ between `old` and `new` (top-level names).
pub fn changed_fields(
    old: &crate::record::SourceInfo,
    new: &crate::record::SourceInfo,
) -> Vec<String> {
    let as_map = |s: &crate::record::SourceInfo| -> BTreeMap<String, serde_json::Value> {
        match serde_json::to_value(s) {
            Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    };
    let (a, b) = (as_map(old), as_map(new));
    b.iter()
        .filter(|(k, v)| a.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_digest_follows_only_the_slots_it_reads() {
        let mut a = crate::store::test_support::record("v");
        let mut b = a.clone();
        b.source.title = Some("another title".into());
        source_lineage(&mut a, &[]);
        source_lineage(&mut b, &[]);
        assert_ne!(a.lineage.slot(Slot::Source), b.lineage.slot(Slot::Source));
        // A stage that reads only the media (none here: absent in both) reads the same.
        assert_eq!(
            input_digest(&[Slot::Media], false, &a.lineage),
            input_digest(&[Slot::Media], false, &b.lineage)
        );
        assert_ne!(
            input_digest(&[Slot::Source], false, &a.lineage),
            input_digest(&[Slot::Source], false, &b.lineage)
        );
        // Where a search found it is not what a stage reads.
        let mut c = a.clone();
        c.source.provenance.push(Default::default());
        let row_a = source_lineage(&mut a, &[]);
        let row_c = source_lineage(&mut c, &[]);
        assert_eq!(a.lineage.slot(Slot::Source), c.lineage.slot(Slot::Source));
        assert_ne!(row_a, row_c, "but the stored row changed");
    }

    #[test]
    fn extra_columns_change_the_row_stamp_and_only_the_stages_that_read_them() {
        let names = vec!["label".to_string()];
        let mut a = crate::record::VideoRecord::new(
            "v".into(),
            Default::default(),
            vec![Some("fake".into())],
        );
        let mut b = a.clone();
        b.extra = vec![Some("real".into())];
        let (sa, sb) = (
            source_lineage(&mut a, &names),
            source_lineage(&mut b, &names),
        );
        assert_eq!(sa.input, sb.input);
        assert_ne!(sa.extras, sb.extras);
        assert_eq!(a.lineage.slot(Slot::Source), b.lineage.slot(Slot::Source));
        assert_ne!(
            input_digest(&[Slot::Source], true, &a.lineage),
            input_digest(&[Slot::Source], true, &b.lineage)
        );
    }

    #[test]
    fn the_summary_names_what_changed() {
        let mut c = StageCounts::default();
        c.tally.insert(tally::CHANGED.into(), 1);
        c.tally.insert(format!("{}:label", tally::CHANGED), 1);
        c.tally.insert(tally::REMOVED.into(), 1);
        c.tally.insert(tally::ADDED.into(), 1);
        assert_eq!(
            summary_line("source", &c).as_deref(),
            Some("source: 1 changed (label), 1 removed, 1 added")
        );
        assert_eq!(summary_line("probe", &StageCounts::default()), None);
    }
}
