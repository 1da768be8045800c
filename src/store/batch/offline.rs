//! `vidcurate batch export` and `batch import`: the offline round trip, where another tool
//! sends the queued requests and brings back the results file. Reads the queues under a run's
//! local folder; writes the answers into the response cache and the queues' pending files.

use super::files::{io_err, load_keys, queue_dirs, read_lines, write_replace};
use super::{BatchQueue, IdOnly, RequestKey};
use crate::error::StageError;
use crate::store::cache::{CachedResponse, ResponseCache};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// `vidcurate batch export`: the pending requests of `stage` (or of every stage when None) in
/// the queues under `local_dir`, as batch input lines; returns how many were written.
pub fn export(
    local_dir: &Path,
    stage: Option<&str>,
    to: &mut dyn Write,
) -> Result<usize, StageError> {
    let mut n = 0;
    for dir in queue_dirs(local_dir)? {
        let stages: HashMap<String, String> =
            read_lines::<RequestKey>(&dir.join("requests.jsonl"))?
                .into_iter()
                .map(|k| (k.custom_id, k.stage))
                .collect();
        let path = dir.join("pending.jsonl");
        let Ok(f) = std::fs::File::open(&path) else {
            continue;
        };
        let mut seen = HashSet::new();
        for line in BufReader::new(f).lines() {
            let line = line.map_err(|e| io_err(&path, e))?;
            let Ok(id) = serde_json::from_str::<IdOnly>(&line) else {
                continue;
            };
            let of_stage =
                stage.is_none_or(|s| stages.get(&id.custom_id).map(String::as_str) == Some(s));
            if of_stage && seen.insert(id.custom_id) {
                // A Gemini line goes out as Gemini's file line, {key, request}.
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                let line = if v.get("request").is_some() {
                    serde_json::json!({"key": v["key"], "request": v["request"]}).to_string()
                } else {
                    line
                };
                to.write_all(format!("{line}\n").as_bytes())
                    .map_err(|e| io_err(&path, e))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// `vidcurate batch import`, once the results are in OpenAI's line shape (`bytes`): files the
/// answers to requests of `stage` into the cache (each body read by `parse`) and takes them out
/// of the pending queues under `local_dir`.
pub fn import_lines<E: std::fmt::Display>(
    local_dir: &Path,
    stage: &str,
    cache: &ResponseCache,
    bytes: &[u8],
    parse: &dyn Fn(Vec<u8>) -> Result<CachedResponse, E>,
) -> Result<Imported, StageError> {
    let ids: HashSet<String> = bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<IdOnly>(l).ok())
        .map(|l| l.custom_id)
        .collect();
    let (mut answered, mut errors, mut ours) = (0, 0, 0);
    for dir in queue_dirs(local_dir)? {
        let q = BatchQueue::default();
        q.attach(&dir)?;
        let here: Vec<String> = read_lines::<RequestKey>(&dir.join("requests.jsonl"))?
            .into_iter()
            .filter(|k| k.stage == stage && ids.contains(&k.custom_id))
            .map(|k| k.custom_id)
            .collect();
        if here.is_empty() {
            continue;
        }
        ours += here.len();
        let here_set: HashSet<&String> = here.iter().collect();
        // Only the ids this file answers: the rest stay pending.
        let lines: Vec<&[u8]> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| {
                serde_json::from_slice::<IdOnly>(l).is_ok_and(|i| here_set.contains(&i.custom_id))
            })
            .collect();
        let keys = load_keys(&dir.join("requests.jsonl"), &here)?;
        let (a, e) = q.file_results(parse, &keys, cache, &lines.join(&b'\n'), &here, "missing")?;
        answered += a;
        errors += e;
        // Rewrite pending without the answered ones.
        let path = dir.join("pending.jsonl");
        let keep: Vec<String> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                serde_json::from_str::<IdOnly>(l).is_ok_and(|i| !here_set.contains(&i.custom_id))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        write_replace(&path, keep.concat().as_bytes())?;
    }
    Ok(Imported {
        answered,
        errors,
        not_this_stage: ids.len() - ours.min(ids.len()),
        unreadable: vec![],
    })
}

/// What `import` did with a results file.
#[derive(Debug, Default)]
pub struct Imported {
    pub answered: usize,
    /// Requests the file answered with an error (asked again per `batch_errors`).
    pub errors: usize,
    /// Lines whose request is not one this stage deferred (ignored).
    pub not_this_stage: usize,
    /// Line numbers (1-based) that are not a result line at all (ignored).
    pub unreadable: Vec<usize>,
}
