//! The queue's files on the local disk: JSON lines read past a line a kill cut off, appended,
//! replaced atomically (`store::write_file`), and the jobs list. Reads and writes only under a
//! queue folder (`batches/<service>/`).

use super::{IdOnly, Job, RequestKey};
use crate::error::StageError;
use crate::store::cache::CacheKey;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub(super) fn io_err(path: &Path, e: std::io::Error) -> StageError {
    StageError::internal("batch_queue", format!("{}: {e}", path.display()))
}

pub fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, StageError> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io_err(path, e)),
    };
    let mut out = vec![];
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| io_err(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        // A line cut off by a kill is the last one: its request is deferred again next pass.
        match serde_json::from_str(&line) {
            Ok(v) => out.push(v),
            Err(e) => {
                tracing::warn!(file = %path.display(), line = n + 1, error = %e, "Skipping an unreadable line.")
            }
        }
    }
    Ok(out)
}

pub(super) fn append_line(path: &Path, line: &str) -> Result<(), StageError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    f.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| io_err(path, e))
}

/// Replaces `path`'s contents atomically (beside it, synced, renamed).
pub fn write_replace(path: &Path, bytes: &[u8]) -> Result<(), StageError> {
    crate::store::write_file(path, bytes).map_err(|e| io_err(path, e))
}

/// The queue folder of `service` in a run's local folder.
pub fn queue_dir(local_dir: &Path, service: &str) -> PathBuf {
    local_dir.join("batches").join(service)
}

pub fn load_jobs(dir: &Path) -> Result<Vec<Job>, StageError> {
    let path = dir.join("jobs.json");
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| StageError::internal("batch_queue", format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(io_err(&path, e)),
    }
}

pub(super) fn save_jobs(dir: &Path, jobs: &[Job]) -> Result<(), StageError> {
    let bytes = serde_json::to_vec_pretty(jobs).expect("jobs serialise");
    write_replace(&dir.join("jobs.json"), &bytes)
}

/// The ids of a job's request file.
pub fn job_ids(dir: &Path, job: &Job) -> Result<Vec<String>, StageError> {
    Ok(
        read_lines::<IdOnly>(&dir.join("jobs").join(format!("{}.jsonl", job.name)))?
            .into_iter()
            .map(|l| l.custom_id)
            .collect(),
    )
}

pub fn job_keys_path(dir: &Path, job: &str) -> PathBuf {
    dir.join("jobs").join(format!("{job}.keys.jsonl"))
}

/// Custom id → the request's cache key and the stage that deferred it.
pub type RequestKeys = HashMap<String, (CacheKey, String)>;

/// The cache keys of `ids` (all when empty) from a keys file: a job's own, or the queue's
/// `requests.jsonl` (every request it ever deferred).
pub fn load_keys(path: &Path, ids: &[String]) -> Result<RequestKeys, StageError> {
    let want: HashSet<&str> = ids.iter().map(String::as_str).collect();
    Ok(read_lines::<RequestKey>(path)?
        .into_iter()
        .filter(|k| want.is_empty() || want.contains(k.custom_id.as_str()))
        .map(|k| {
            (
                k.custom_id,
                (
                    CacheKey {
                        service: k.service,
                        method: k.method,
                        request: k.request,
                    },
                    k.stage,
                ),
            )
        })
        .collect())
}

pub fn queue_dirs(local_dir: &Path) -> Result<Vec<PathBuf>, StageError> {
    let root = local_dir.join("batches");
    let mut out = vec![];
    match std::fs::read_dir(&root) {
        Ok(rd) => {
            for e in rd.flatten() {
                if e.path().is_dir() {
                    out.push(e.path());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&root, e)),
    }
    out.sort();
    Ok(out)
}
