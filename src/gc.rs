//! `vidcurate gc RUN`: removes what no reader trusts, after it is old enough that no running
//! worker can still be about to adopt it.
//!
//! Reads: every stage shard's footer (which reject shard its commit adopted). Removes: reject
//! attempts no commit adopted (a worker died between writing its attempt and committing, or lost
//! the slot and died before deleting it), partial downloads, temp files of a local run directory
//! (ranked workers sweep only old ones at start), and with `--superseded` the shards set aside
//! when settings changed. Committed shards are never touched. Incomplete multipart
//! uploads of an object store are not listed by its API: a bucket lifecycle rule
//! (AbortIncompleteMultipartUpload) removes those.

use crate::error::RunError;
use crate::runtime::shards::{REJECTS_DIR, SUPERSEDED_DIR, decode_parquet};
use crate::runtime::store::{ObjectInfo, Store};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

#[derive(Debug, Default)]
pub struct GcReport {
    /// (path, bytes) of what was (or, dry, would be) removed.
    pub removed: Vec<(String, u64)>,
    /// Candidates younger than the age limit, kept.
    pub young: usize,
}

/// Paths of the run that are candidates, by kind.
fn is_shard(path: &str) -> bool {
    path.ends_with(".parquet")
        && !path.starts_with(&format!("{REJECTS_DIR}/"))
        && !path.starts_with(&format!("{SUPERSEDED_DIR}/"))
        && !path.starts_with("selections/")
        && !path.starts_with("analysis/")
}

pub async fn gc(
    store: &dyn Store,
    older_than: Duration,
    superseded: bool,
    dry_run: bool,
) -> Result<GcReport, RunError> {
    let io = |p: &str, e| RunError::io(format!("{}/{p}", store.location()), e);
    let all = store.list_info("").await.map_err(|e| io("", e))?;
    let mut adopted = HashSet::new();
    for o in all.iter().filter(|o| is_shard(&o.path)) {
        let data = store.get(&o.path).await.map_err(|e| io(&o.path, e))?;
        match decode_parquet(data, false) {
            Ok(c) => adopted.extend(c.rejects_file),
            Err(e) => {
                // Not ours to judge: keep everything rather than risk removing an adopted file.
                return Err(RunError::Internal(format!(
                    "{}/{}: unreadable shard ({e}); nothing removed",
                    store.location(),
                    o.path
                )));
            }
        }
    }
    let now = SystemTime::now();
    let mut report = GcReport::default();
    let garbage = |o: &ObjectInfo| -> bool {
        let attempt = o.path.starts_with(&format!("{REJECTS_DIR}/"))
            && is_attempt(&o.path)
            && !adopted.contains(&o.path);
        let partial = o.path.starts_with("media/partial/");
        let aside = superseded && o.path.starts_with(&format!("{SUPERSEDED_DIR}/"));
        attempt || partial || aside
    };
    if let Some(root) = store.local_path("") {
        let mut swept = vec![];
        // Age zero would mean "every temp file": keep at least a minute's grace for a live writer.
        let age = older_than.max(Duration::from_secs(60));
        crate::runtime::store::sweep_tmp(&root, age, &mut swept, dry_run).map_err(|e| io("", e))?;
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
    Ok(report)
}

/// A reject shard written under an attempt name (`…-part-NNNNN-<attempt>.parquet`); reject shards
/// of earlier versions (`…-part-NNNNN.parquet`) were committed by their name and are kept.
fn is_attempt(path: &str) -> bool {
    path.strip_suffix(".parquet")
        .and_then(|p| p.rsplit("part-").next())
        .is_some_and(|tail| tail.contains('-'))
}

/// `30m`, `2h`, `7d`, `90s`, or a number of seconds.
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected an age such as 30m, 2h or 7d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        other => return Err(format!("{s:?}: unknown unit {other:?} (s, m, h, d)")),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("{s:?}: not a usable age"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_attempt_names() {
        assert_eq!(parse_age("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_age("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_age("1.5d").unwrap(), Duration::from_secs(129600));
        assert!(parse_age("-1h").is_err());
        assert!(parse_age("2w").is_err());
        assert!(is_attempt(
            "rejects/probe-r0001-part-00003-ab12cd34ef.parquet"
        ));
        assert!(is_attempt("rejects/probe-part-00003-ab12cd34ef.parquet"));
        assert!(!is_attempt("rejects/probe-part-00003.parquet"));
    }
}
