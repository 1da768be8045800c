//! Commit records: what each committed object must be (its size and BLAKE3), so damage done to a
//! run directory after the fact (a failing disk, an interrupted copy, a partial download) is
//! found instead of read.
//!
//! Two places hold them. Every stage shard carries in its footer the BLAKE3 of its own bytes
//! before the footer (`META_DATA`, checked by every reader of the shard: a flipped bit in a row
//! fails the read instead of reaching a table) and the size and BLAKE3 of the objects it depends
//! on (`META_OBJECTS`: its rejects shard, the frames' JPEGs of its videos). And each commit writes
//! a record `_commits/<object path>.json` (`CommitRecord`) naming the object itself, its videos and
//! its dependents: it survives the object (a deleted or truncated shard is still known, with its
//! videos). Reads and writes through the `Store`; called by the shard writer after each commit,
//! by `rethreshold` for selections, by a resuming run (`shards::load_prior`) and by `verify`.

use crate::store::Store;
use serde::{Deserialize, Serialize};

/// Where commit records live: `_commits/<object path>.json`.
pub const COMMITS_DIR: &str = "_commits";
/// Where damaged objects are moved, each with a `<name>.note.txt` saying why: nothing is deleted.
pub const DAMAGED_DIR: &str = "_damaged";
/// Footer key: `<size>:<blake3 hex>` of the shard's bytes before its footer.
pub const META_DATA: &str = "vidcurate.data_blake3";
/// Footer key: JSON list of `ObjectSum`, the objects the shard's commit depends on.
pub const META_OBJECTS: &str = "vidcurate.objects";

/// An object's expected size and BLAKE3, and the video it belongs to (when it is one video's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectSum {
    pub path: String,
    pub size: u64,
    pub blake3: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<String>,
}

impl ObjectSum {
    pub fn of(path: &str, data: &[u8], video: Option<&str>) -> Self {
        Self {
            path: path.to_string(),
            size: data.len() as u64,
            blake3: blake3::hash(data).to_hex().to_string(),
            video: video.map(str::to_string),
        }
    }

    /// Why `data` is not this object (None: it is).
    pub fn mismatch(&self, data: &[u8]) -> Option<String> {
        if data.len() as u64 != self.size {
            return Some(format!(
                "{} bytes, {} recorded at commit{}",
                data.len(),
                self.size,
                if (data.len() as u64) < self.size {
                    " (truncated)"
                } else {
                    ""
                }
            ));
        }
        let got = blake3::hash(data).to_hex().to_string();
        (got != self.blake3).then(|| {
            format!(
                "BLAKE3 {} differs from the {} recorded at commit (same size: bytes changed in place)",
                &got[..16],
                &self.blake3[..16.min(self.blake3.len())]
            )
        })
    }
}

/// What one commit wrote: the object, the videos it settles, the objects it depends on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitRecord {
    pub object: ObjectSum,
    /// The stage whose shard this is; None for a selection or another table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Videos the commit settles (done or rejected).
    #[serde(default)]
    pub videos: Vec<String>,
    #[serde(default)]
    pub objects: Vec<ObjectSum>,
    pub committed_at: String,
}

/// "1 video", "3 videos" (for the messages about what a commit held).
pub fn videos(n: usize) -> String {
    if n == 1 {
        "1 video".into()
    } else {
        format!("{n} videos")
    }
}

/// The record's path for an object.
pub fn record_path(object: &str) -> String {
    format!("{COMMITS_DIR}/{object}.json")
}

/// The object a record path names (None: not a record).
pub fn object_of_record(record: &str) -> Option<&str> {
    record
        .strip_prefix(COMMITS_DIR)?
        .strip_prefix('/')?
        .strip_suffix(".json")
}

/// Writes the record of a commit (after the object itself: a crash in between leaves an object
/// without a record, which readers still check by its footer, and the next resume records it).
pub async fn write_record(store: &dyn Store, rec: &CommitRecord) -> std::io::Result<()> {
    let mut data = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
    data.push(b'\n');
    store.put(&record_path(&rec.object.path), data).await
}

/// Reads a record; None when there is none or it does not parse (a damaged record is no record:
/// the object is then checked by its footer alone).
pub async fn read_record(store: &dyn Store, object: &str) -> Option<CommitRecord> {
    let data = store.get(&record_path(object)).await.ok()?;
    serde_json::from_slice(&data).ok()
}

/// `META_DATA`'s value for the bytes before a footer.
pub fn data_sum(data: &[u8]) -> String {
    format!("{}:{}", data.len(), blake3::hash(data).to_hex())
}

/// Checks a shard's bytes against its footer's `META_DATA` (None: they agree, or the shard predates
/// the key). `data` is the whole file.
pub fn check_data(data: &[u8], recorded: &str) -> Option<String> {
    let (size, hash) = recorded.split_once(':')?;
    let size: usize = size.parse().ok()?;
    if size > data.len() {
        return Some(format!(
            "the footer covers {size} bytes of rows but the file has {}",
            data.len()
        ));
    }
    let got = blake3::hash(&data[..size]).to_hex();
    (got.as_str() != hash).then(|| {
        format!(
            "its rows' bytes changed since commit (BLAKE3 {} where the footer recorded {})",
            &got.as_str()[..16],
            &hash[..16.min(hash.len())]
        )
    })
}

/// Moves a damaged object to `_damaged/<path>` with a note beside it saying why; returns where it
/// went. An object already gone (another worker moved it) is fine.
pub async fn set_aside_damaged(
    store: &dyn Store,
    path: &str,
    why: &str,
) -> std::io::Result<String> {
    let to = format!("{DAMAGED_DIR}/{path}");
    match store.rename(path, &to).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let note = format!(
        "{path}\nmoved here at {} by vidcurate {}\nwhy: {why}\n",
        crate::store::manifest::now(),
        env!("CARGO_PKG_VERSION")
    );
    store
        .put(&format!("{to}.note.txt"), note.into_bytes())
        .await?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_names_truncation_and_changed_bytes() {
        let s = ObjectSum::of("a/b.parquet", b"hello world", None);
        assert_eq!(s.mismatch(b"hello world"), None);
        assert!(s.mismatch(b"hello").unwrap().contains("truncated"));
        assert!(
            s.mismatch(b"hellO world")
                .unwrap()
                .contains("changed in place")
        );
    }

    #[test]
    fn the_data_sum_covers_only_the_rows() {
        let mut file = b"PAR1rows".to_vec();
        let sum = data_sum(&file);
        file.extend_from_slice(b"footer");
        assert_eq!(check_data(&file, &sum), None);
        file[5] ^= 1;
        assert!(
            check_data(&file, &sum)
                .unwrap()
                .contains("changed since commit")
        );
        assert!(check_data(b"PAR", &sum).unwrap().contains("file has 3"));
        assert_eq!(
            object_of_record(&record_path("frames/part-00001.parquet")),
            Some("frames/part-00001.parquet")
        );
    }
}
