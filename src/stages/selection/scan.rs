//! A stage table read a shard at a time for the funnel: each settled shard's footer (the videos
//! it completes and rejects) and only the columns a threshold reads, handed over in the table's
//! order and dropped once used, so what is held is a few shards whatever the table's size.
//!
//! Reads `<stage>/*.parquet` and `rejects/` through the `Store` (the files `read_table` reads, by
//! the same rules: the shards of one fingerprint, a slot's committed rejects, the reject shards
//! of earlier versions), checks each shard's bytes against the BLAKE3 in its footer, and writes
//! nothing. The next shards are fetched, decoded and `prepare`d on the blocking pool while the
//! caller folds this one in: decoding and id lookups are most of the time, and the machine's
//! cores share them. Called by `decide`. Caches nothing.

use crate::error::RunError;
use crate::record::META_VIDEOS;
use crate::store::Store;
use crate::store::commits::{META_DATA, check_data};
use crate::store::shards::retired::{Retired, without_videos};
use crate::store::shards::{
    DAMAGE_HINT, DecodeError, META_COMMIT, META_FINGERPRINT, META_REJECT_ROWS, META_REJECTED,
    META_REJECTS_FILE, get_unless_moved, project_columns, stage_files,
};
use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::HashSet;
use std::sync::Arc;

/// Which rows of a shard to decode besides its footer.
#[derive(Clone)]
pub enum Take {
    Footers,
    /// These top-level columns (those the shard has).
    Columns(Arc<[String]>),
    /// Every column: for a threshold decided from whole rows by the stage's own code.
    All,
}

/// One settled shard of the asked fingerprint.
pub struct Shard {
    /// The videos it completes (none for a reject shard of an earlier version).
    pub done: IdList,
    /// The videos it rejects: a slot's committed rejects, or a reject shard's videos.
    pub rejected: IdList,
    pub batches: Vec<RecordBatch>,
    /// Its commit id (`shards::META_COMMIT`): with the path, what a tombstone names.
    sum: String,
}

impl Shard {
    /// The shard without the rows and settlements of its retired videos (`shards::retired`).
    fn without(self, gone: &HashSet<String>) -> Result<Shard, RunError> {
        let batches = self
            .batches
            .iter()
            .map(|b| without_videos(b, gone))
            .collect::<Result<_, _>>()?;
        Ok(Shard {
            done: self.done.without(gone),
            rejected: self.rejected.without(gone),
            batches,
            sum: self.sum,
        })
    }
}

/// What `for_each_shard` runs on each shard on the blocking pool.
pub type Prepare<T> = Arc<dyn Fn(Shard) -> Result<T, RunError> + Send + Sync>;

/// Calls `prepare` on every settled shard of `fingerprint` on the blocking pool, and `each` on
/// what it returns in the table's order (shard files sorted by path, as `read_table` takes them).
pub async fn for_each_shard<T: Send + 'static>(
    store: &Arc<dyn Store>,
    stage_id: &str,
    fingerprint: &str,
    take: Take,
    prepare: Prepare<T>,
    mut each: impl FnMut(T) -> Result<(), RunError>,
) -> Result<(), RunError> {
    use futures::StreamExt;
    let (files, rejects) = stage_files(store, stage_id).await?;
    let rejects = Arc::new(rejects);
    let retired = Arc::new(Retired::load(store.as_ref(), stage_id).await?);
    let fingerprint: Arc<str> = fingerprint.into();
    let ahead = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let mut shards = futures::stream::iter(files)
        .map(|(path, is_reject)| {
            let (take, rejects, fingerprint, prepare) = (
                take.clone(),
                rejects.clone(),
                fingerprint.clone(),
                prepare.clone(),
            );
            let retired = retired.clone();
            async move {
                let Some(data) = get_unless_moved(store.as_ref(), &path).await? else {
                    return Ok(None);
                };
                let job = tokio::task::spawn_blocking(move || {
                    let shard =
                        decode(data, is_reject, &fingerprint, &take, &rejects).map_err(|e| {
                            RunError::Internal(format!(
                                "{path}: unreadable shard: {e}{DAMAGE_HINT}"
                            ))
                        })?;
                    let gone = |s: &Shard| retired.in_shard(&path, &s.sum).cloned();
                    let shard = match shard.map(|s| (gone(&s), s)) {
                        Some((Some(gone), s)) => Some(s.without(&gone)?),
                        other => other.map(|(_, s)| s),
                    };
                    shard.map(|s| prepare(s)).transpose()
                });
                job.await
                    .map_err(|e| RunError::Internal(format!("reading a shard: {e}")))?
            }
        })
        .buffered(ahead);
    while let Some(prepared) = shards.next().await {
        if let Some(t) = prepared? {
            each(t)?;
        }
    }
    Ok(())
}

/// One shard: its bytes checked, its footer read, and (if it is of `fingerprint`) the rows asked.
fn decode(
    data: Vec<u8>,
    is_reject: bool,
    fingerprint: &str,
    take: &Take,
    rejects: &HashSet<String>,
) -> Result<Option<Shard>, DecodeError> {
    let data = bytes::Bytes::from(data);
    let builder = ParquetRecordBatchReaderBuilder::try_new(data.clone())?;
    let kv = builder.metadata().file_metadata().key_value_metadata();
    let entry = |k: &str| kv.into_iter().flatten().find(|e| e.key == k);
    let get = |k: &str| entry(k).and_then(|e| e.value.clone());
    if let Some(why) = get(META_DATA).and_then(|sum| check_data(&data, &sum)) {
        return Err(DecodeError::Damaged(why));
    }
    let sum = get(META_COMMIT)
        .or_else(|| get(META_DATA))
        .unwrap_or_default();
    if entry(META_FINGERPRINT).and_then(|e| e.value.as_deref()) != Some(fingerprint) {
        return Ok(None);
    }
    let videos = IdList::parse(get(META_VIDEOS));
    if is_reject {
        return Ok(Some(Shard {
            done: IdList::default(),
            rejected: videos,
            batches: vec![],
            sum,
        }));
    }
    // A slot whose rejects shard is missing and that does not carry its reject rows rejects
    // nothing (`committed_rejects`): a rerun redoes those videos.
    let adopted = get(META_REJECTS_FILE);
    let rejected = match adopted {
        Some(f) if !rejects.contains(&f) && entry(META_REJECT_ROWS).is_none() => IdList::default(),
        _ => IdList::parse(get(META_REJECTED)),
    };
    let builder = match take {
        Take::Footers => None,
        Take::All => Some(builder),
        Take::Columns(names) => Some(project_columns(builder, |n| names.iter().any(|c| c == n))),
    };
    let mut batches = vec![];
    if let Some(b) = builder {
        for batch in b.build()? {
            batches.push(batch?);
        }
    }
    Ok(Some(Shard {
        done: videos,
        rejected,
        batches,
        sum,
    }))
}

/// A footer's JSON list of video ids, kept as its text and each id's byte range in it: no String
/// per id. A list that does not parse is empty, as `read_table` takes it.
#[derive(Default)]
pub struct IdList {
    text: String,
    spans: Vec<(u32, u32)>,
}

impl IdList {
    pub fn parse(json: Option<String>) -> Self {
        let Some(text) = json else {
            return Self::default();
        };
        if let Some(spans) = plain_spans(text.as_bytes()) {
            return Self { text, spans };
        }
        // Escapes (or not a list of strings): serde_json decides, as for every footer list.
        let ids: Vec<String> = serde_json::from_str(&text).unwrap_or_default();
        let mut out = Self::default();
        for id in ids {
            let start = out.text.len() as u32;
            out.text.push_str(&id);
            out.spans.push((start, out.text.len() as u32));
        }
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.spans
            .iter()
            .map(|&(a, b)| &self.text[a as usize..b as usize])
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// The list without the ids in `gone`.
    fn without(self, gone: &HashSet<String>) -> Self {
        let spans = self
            .spans
            .iter()
            .filter(|&&(a, b)| !gone.contains(&self.text[a as usize..b as usize]))
            .copied()
            .collect();
        Self {
            text: self.text,
            spans,
        }
    }
}

/// The ranges of the strings of a JSON list of strings with no escapes, the only form the writer
/// produces for ordinary ids; None for anything else (serde_json then reads it). Strict: a
/// control character in a string, a missing comma, a trailing comma or trailing text is None,
/// so a list this accepts is one serde_json reads the same.
fn plain_spans(b: &[u8]) -> Option<Vec<(u32, u32)>> {
    if b.len() > u32::MAX as usize {
        return None;
    }
    let ws = |mut i: usize| {
        while matches!(b.get(i), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            i += 1;
        }
        i
    };
    let mut spans = Vec::with_capacity(b.len() / 16);
    let mut i = ws(0);
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i = ws(i + 1);
    if b.get(i) == Some(&b']') {
        return (ws(i + 1) == b.len()).then_some(spans);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let start = i + 1;
        let len = b[start..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        let end = start + len;
        if b[end] != b'"' {
            return None;
        }
        spans.push((start as u32, end as u32));
        i = ws(end + 1);
        match b.get(i) {
            Some(b',') => i = ws(i + 1),
            Some(b']') => return (ws(i + 1) == b.len()).then_some(spans),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(json: &str) -> Vec<String> {
        IdList::parse(Some(json.to_string()))
            .iter()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn footer_lists_read_as_serde_json_reads_them() {
        for json in [
            r#"["a","b c","é"]"#,
            " [ \"a\" ,\n\"b\" ] \n",
            "[]",
            " [ ] ",
            r#"["a\"b","c\\d","\u00e9"]"#,
            r#"["a",]"#,
            r#"["a" "b"]"#,
            r#"["a"] x"#,
            r#"["a",1]"#,
            "[\"a\tb\"]",
            r#"{"a":1}"#,
            "",
            r#"["a""#,
        ] {
            let want: Vec<String> = serde_json::from_str(json).unwrap_or_default();
            assert_eq!(ids(json), want, "{json:?}");
        }
        assert_eq!(IdList::parse(None).len(), 0);
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Row {
        n: u32,
        text: String,
    }

    /// A reject shard of an earlier version: its footer names the videos it rejects.
    fn legacy_rejects(videos: &[&str], fp: &str) -> Vec<u8> {
        use parquet::file::metadata::KeyValue;
        let batch = RecordBatch::try_from_iter([(
            "video_id",
            Arc::new(arrow::array::StringArray::from(videos.to_vec())) as _,
        )])
        .unwrap();
        let meta = vec![
            KeyValue::new(META_VIDEOS.into(), serde_json::to_string(videos).unwrap()),
            KeyValue::new(META_FINGERPRINT.into(), fp.to_string()),
        ];
        let props = parquet::file::properties::WriterProperties::builder()
            .set_key_value_metadata(Some(meta))
            .build();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(vec![], batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.into_inner().unwrap()
    }

    /// What `for_each_shard` folds together: done, rejected, rows.
    async fn scanned(
        store: &Arc<dyn Store>,
    ) -> Result<(HashSet<String>, HashSet<String>, usize), RunError> {
        let names: Arc<[String]> = vec!["video_id".to_string(), "n".to_string()].into();
        let (mut done, mut rejected, mut rows) = (HashSet::new(), HashSet::new(), 0);
        let prepare: Prepare<Shard> = Arc::new(Ok);
        for_each_shard(store, "probe", "fp", Take::Columns(names), prepare, |s| {
            done.extend(s.done.iter().map(str::to_string));
            rejected.extend(s.rejected.iter().map(str::to_string));
            for b in &s.batches {
                assert_eq!(b.num_columns(), 2, "only the columns asked for");
                rows += b.num_rows();
            }
            Ok(())
        })
        .await?;
        Ok((done, rejected, rows))
    }

    /// The scan settles the videos `read_table` settles (slots, their committed rejects, a slot
    /// whose rejects shard is gone, reject shards of earlier versions, other fingerprints left
    /// out), and a damaged shard is reported in the store reader's words.
    #[tokio::test]
    async fn shards_settle_the_videos_read_table_settles() {
        use crate::error::StageError;
        use crate::store::shards::shard_writer;
        use crate::store::test_support::{record as rec, run_dir};
        use std::time::Duration;
        let (_dir, store) = run_dir();
        let writer = |fp| shard_writer(store.clone(), fp, "part-", 1000, Duration::from_secs(60));
        let row = |n| Row {
            n,
            text: "x".repeat(n as usize),
        };
        let mut w = writer("fp").await;
        w.add(&rec("a"), vec![row(1), row(2)]);
        w.add(&rec("b"), vec![]);
        w.reject("c", &[], &StageError::data("bad", "detail"), None);
        w.flush().await.unwrap();
        w.add(&rec("d \"quoted\""), vec![row(3)]);
        w.reject("e", &[], &StageError::data("bad", "detail"), None);
        w.flush().await.unwrap();
        let mut old = writer("old").await;
        old.add(&rec("f"), vec![row(4)]);
        old.flush().await.unwrap();
        for (part, video, fp) in [(7, "g", "fp"), (8, "h", "old")] {
            let path = format!("rejects/probe-part-{part:05}.parquet");
            store
                .put(&path, legacy_rejects(&[video], fp))
                .await
                .unwrap();
        }
        // The second slot's rejects shard lost: its footer still carries the reject rows.
        let lost = store
            .list(crate::store::shards::REJECTS_DIR)
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.contains("slot") && p.ends_with("00001.parquet"))
            .unwrap();
        store.delete(&lost).await.unwrap();

        let view = crate::store::shards::read_table(&store, "probe", "fp", true)
            .await
            .unwrap();
        let rows: usize = view.batches.iter().map(|b| b.num_rows()).sum();
        let (done, rejected, n) = scanned(&store).await.unwrap();
        assert_eq!((&done, &rejected, n), (&view.done, &view.rejected, rows));
        assert_eq!(rejected.len(), 3, "{rejected:?}");

        let shard = "probe/part-00000.parquet";
        let mut data = store.get(shard).await.unwrap();
        data[8] ^= 1;
        store.put(shard, data).await.unwrap();
        let theirs = crate::store::shards::read_table(&store, "probe", "fp", true).await;
        let ours = scanned(&store).await;
        let (theirs, ours) = (theirs.err().unwrap(), ours.err().unwrap());
        assert!(ours.to_string().contains("verify"), "{ours}");
        assert_eq!(ours.to_string(), theirs.to_string());
    }
}
