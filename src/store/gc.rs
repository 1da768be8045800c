//! What `vidcurate gc RUN` does: removes leftovers no reader uses, once they are old enough that no running
//! worker can still be writing them.
//!
//! Removes: partial downloads (`media/partial/`), temp files of a local run directory (ranked
//! workers sweep only old ones at start, since another rank may be writing one), and with
//! `--superseded` the shards set aside when settings changed. Shards need no collecting: a slot is
//! created whole or not at all, and only its winner writes its rejects shard. Aborts: incomplete
//! multipart uploads under the run on S3 (a worker killed while it uploaded downloaded media
//! leaves one: no reader sees it, but its parts are stored and billed until it is aborted).

use crate::error::BadArgument;
use crate::error::RunError;
use crate::store::shards::SUPERSEDED_DIR;
use crate::store::{ObjectInfo, PendingUpload, Store};
use std::time::{Duration, SystemTime};

#[derive(Debug, Default)]
pub struct GcReport {
    /// (path, bytes) of what was (or, dry, would be) removed.
    pub removed: Vec<(String, u64)>,
    /// Candidates younger than the age limit, kept.
    pub young: usize,
    /// Incomplete multipart uploads aborted (or, dry, that would be).
    pub aborted: Vec<PendingUpload>,
    /// Incomplete uploads younger than the age limit, kept: a live worker may be uploading.
    pub young_uploads: usize,
    /// Whether this store has incomplete uploads at all (object stores do, folders do not).
    pub uploads_listed: bool,
    /// Why incomplete uploads were not looked at, where this store cannot list them.
    pub uploads_not_listed: Option<String>,
}

pub async fn gc(
    store: &dyn Store,
    older_than: Duration,
    superseded: bool,
    dry_run: bool,
) -> Result<GcReport, RunError> {
    let io = |p: &str, e| store.io_error(p, e);
    let all = store.list_info("").await.map_err(|e| io("", e))?;
    let now = SystemTime::now();
    let mut report = GcReport::default();
    let garbage = |o: &ObjectInfo| -> bool {
        o.path.starts_with("media/partial/")
            || (superseded && o.path.starts_with(&format!("{SUPERSEDED_DIR}/")))
    };
    if let Some(root) = store.local_path("") {
        let mut swept = vec![];
        // Age zero would mean "every temp file": keep a minute's grace for a live writer.
        let age = older_than.max(Duration::from_secs(60));
        crate::store::sweep_tmp(&root, age, &mut swept, dry_run).map_err(|e| io("", e))?;
        for (path, size) in swept {
            let rel = path.strip_prefix(&root).unwrap_or(&path);
            report.removed.push((rel.display().to_string(), size));
        }
    }
    for o in all.iter().filter(|o| garbage(o)) {
        let age = now.duration_since(o.modified).unwrap_or_default();
        if age < older_than {
            report.young += 1;
            continue;
        }
        if !dry_run {
            store.delete(&o.path).await.map_err(|e| io(&o.path, e))?;
        }
        report.removed.push((o.path.clone(), o.size));
    }
    let uploads = match store.pending_uploads().await {
        Ok(u) => {
            report.uploads_listed = u.is_some();
            u.unwrap_or_default()
        }
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            report.uploads_not_listed = Some(e.to_string());
            vec![]
        }
        Err(e) => return Err(io("", e)),
    };
    for u in uploads {
        if now.duration_since(u.initiated).unwrap_or_default() < older_than {
            report.young_uploads += 1;
            continue;
        }
        if !dry_run {
            store.abort_upload(&u).await.map_err(|e| io(&u.path, e))?;
        }
        report.aborted.push(u);
    }
    Ok(report)
}

/// `30m`, `2h`, `7d`, `90s`, or a number of seconds.
pub fn parse_age(s: &str) -> Result<Duration, BadArgument> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| BadArgument(format!("{s:?}: expected an age such as 30m, 2h or 7d")))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        other => {
            return Err(BadArgument(format!(
                "{s:?}: unknown unit {other:?} (s, m, h, d)"
            )));
        }
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(BadArgument(format!("{s:?}: not a usable age")));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_age("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_age("1.5d").unwrap(), Duration::from_secs(129600));
        assert!(parse_age("-1h").is_err());
        assert!(parse_age("2w").is_err());
    }

    #[tokio::test]
    async fn a_folder_loses_partial_downloads_and_set_aside_shards_only() {
        use crate::store::LocalStore;
        let d = crate::store::test_support::folder_with(
            [
                ("media/partial/abc.mp4.part", 7),
                ("_superseded/probe/part-00000.parquet", 5),
                ("probe/part-00000.parquet", 3),
            ]
            .map(|(path, len)| (path, vec![0u8; len])),
        );
        let store = LocalStore::open_read_only(d.path()).unwrap();
        let exists = |p: &str| d.path().join(p).exists();
        let r = gc(&store, Duration::from_secs(3600), true, false)
            .await
            .unwrap();
        assert_eq!((r.removed.len(), r.young), (0, 2), "fresh files are kept");
        let r = gc(&store, Duration::ZERO, false, true).await.unwrap();
        assert_eq!(
            r.removed,
            vec![("media/partial/abc.mp4.part".to_string(), 7)]
        );
        assert!(exists("media/partial/abc.mp4.part"), "a dry run removed");
        let r = gc(&store, Duration::ZERO, true, false).await.unwrap();
        assert_eq!(r.removed.len(), 2, "{:?}", r.removed);
        assert!(
            !exists("media/partial/abc.mp4.part")
                && !exists("_superseded/probe/part-00000.parquet")
        );
        assert!(
            exists("probe/part-00000.parquet"),
            "a committed shard was removed"
        );
        // A folder has no multipart uploads: nothing listed, nothing said about them.
        assert!(!r.uploads_listed && r.uploads_not_listed.is_none() && r.aborted.is_empty());
    }
}
