//! The batch queues of the model services, on disk: the requests a pass could not answer from
//! the cache wait here, go to the provider's batch interface when the pass ends, and come back into the
//! response cache, so the next pass runs the stages' own validation, repair and select on them
//! exactly as on live answers.
//!
//! The runner drives the batches (`runtime::batch::BatchService`), the clients speak the
//! providers' protocols (`clients::llm::batch`); this module only keeps the files.
//!
//! Everything is on disk before anything is sent, so a killed run resumes without sending a
//! request twice. Per service, in `<run dir>/batches/<service>/` (the work folder of a run on
//! an object store):
//! - `pending.jsonl`: requests not yet in a batch, as OpenAI batch input lines (`custom_id` is
//!   the request's cache key hash);
//! - `requests.jsonl`: every deferred request's cache key and stage, to file answers under;
//! - `jobs/<n>.jsonl` + `jobs.json`: the batches, each recorded with its input file id before
//!   it is created and with its batch id as soon as it exists; a job whose batch id was lost to a
//!   kill is found again by its input file id in the provider's batch list, not created again;
//! - `failed.jsonl`: requests a batch answered with an error (live retry or reject, per
//!   `batch_errors`).

mod files;
mod offline;

pub use files::{
    RequestKeys, job_ids, job_keys_path, load_jobs, load_keys, queue_dir, read_lines, write_replace,
};
use files::{append_line, io_err, save_jobs};
pub use offline::{Imported, export, import_lines};

use crate::error::StageError;
use crate::store::cache::{CacheKey, CachedResponse, ResponseCache};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// One batch of requests and how far it got.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Job {
    /// `jobs/<name>.jsonl` holds its requests until they are imported.
    pub name: String,
    /// The model of every request in it, when the API batches per model (Gemini).
    #[serde(default)]
    pub model: Option<String>,
    pub requests: usize,
    pub bytes: u64,
    #[serde(default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub batch_id: Option<String>,
    /// The provider's last word: validating, in_progress, finalizing, completed, failed,
    /// expired, cancelling, cancelled.
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub imported: bool,
    /// Answers stored in the cache / requests answered with an error.
    #[serde(default)]
    pub answered: usize,
    #[serde(default)]
    pub errors: usize,
}

/// What `requests.jsonl` keeps of a deferred request.
#[derive(Serialize, Deserialize)]
pub struct RequestKey {
    pub custom_id: String,
    pub stage: String,
    service: String,
    method: String,
    request: String,
}

/// The id of a request line (ours and OpenAI's `custom_id`; Gemini's `key`).
#[derive(Deserialize)]
pub struct IdOnly {
    #[serde(alias = "key")]
    pub custom_id: String,
}

/// A pending line's id and model (Gemini lines name theirs: a Gemini batch is for one model).
#[derive(Deserialize)]
struct Head {
    custom_id: String,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Failure {
    custom_id: String,
    code: String,
    message: String,
}

/// Terminal batch statuses (OpenAI's; the others are polled on).
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "expired" | "cancelled")
}

struct Queue {
    dir: PathBuf,
    pending: HashSet<String>,
    /// Ids in jobs not imported yet.
    in_flight: HashSet<String>,
    known: HashSet<String>,
    failed: HashMap<String, String>,
}

impl Queue {
    /// Records a request a batch answered with an error, on disk and in memory.
    fn fail(&mut self, id: &str, code: &str, message: &str) -> Result<(), StageError> {
        let f = Failure {
            custom_id: id.to_string(),
            code: code.to_string(),
            message: message.to_string(),
        };
        append_line(
            &self.dir.join("failed.jsonl"),
            &serde_json::to_string(&f).expect("failure serialises"),
        )?;
        self.failed
            .insert(id.to_string(), format!("{code}: {message}"));
        Ok(())
    }
}

/// The queue of one model service (see the module docs); attached to its folder by the runner
/// before each pass.
#[derive(Default)]
pub struct BatchQueue {
    q: Mutex<Option<Queue>>,
}

impl BatchQueue {
    /// Loads the queue's state from `dir` (created when missing).
    pub fn attach(&self, dir: &Path) -> Result<(), StageError> {
        std::fs::create_dir_all(dir.join("jobs")).map_err(|e| io_err(dir, e))?;
        let mut in_flight = HashSet::new();
        for job in load_jobs(dir)?.iter().filter(|j| !j.imported) {
            in_flight.extend(job_ids(dir, job)?);
        }
        // A request both pending and in a job was chunked by a run killed before it cleared
        // `pending.jsonl`: the job has it.
        let pending = read_lines::<IdOnly>(&dir.join("pending.jsonl"))?
            .into_iter()
            .map(|l| l.custom_id)
            .filter(|id| !in_flight.contains(id))
            .collect();
        let known = read_lines::<IdOnly>(&dir.join("requests.jsonl"))?
            .into_iter()
            .map(|l| l.custom_id)
            .collect();
        let failed = read_lines::<Failure>(&dir.join("failed.jsonl"))?
            .into_iter()
            .map(|f| (f.custom_id, format!("{}: {}", f.code, f.message)))
            .collect();
        *self.lock() = Some(Queue {
            dir: dir.to_path_buf(),
            pending,
            in_flight,
            known,
            failed,
        });
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Queue>> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dir(&self) -> Option<PathBuf> {
        self.lock().as_ref().map(|q| q.dir.clone())
    }

    /// The error a batch answered request `id` with, if it did.
    pub fn failure(&self, id: &str) -> Option<String> {
        self.lock().as_ref().and_then(|q| q.failed.get(id).cloned())
    }

    /// Queues a request (once: the same request from another video, or again after a resume,
    /// is already there or already in a batch).
    pub fn defer(&self, stage: &str, key: &CacheKey, line: &Value) -> Result<(), StageError> {
        let mut g = self.lock();
        let Some(q) = g.as_mut() else {
            return Err(StageError::internal(
                "batch_queue",
                "batch queue used before the runner attached it",
            ));
        };
        let id = key.hash();
        if q.pending.contains(&id) || q.in_flight.contains(&id) {
            return Ok(());
        }
        if q.known.insert(id.clone()) {
            let k = RequestKey {
                custom_id: id.clone(),
                stage: stage.to_string(),
                service: key.service.clone(),
                method: key.method.clone(),
                request: key.request.clone(),
            };
            append_line(
                &q.dir.join("requests.jsonl"),
                &serde_json::to_string(&k).expect("key serialises"),
            )?;
        }
        append_line(&q.dir.join("pending.jsonl"), &line.to_string())?;
        q.pending.insert(id);
        Ok(())
    }

    pub fn pending(&self) -> usize {
        self.lock().as_ref().map_or(0, |q| q.pending.len())
    }

    /// Moves the pending requests into new jobs of at most `max_requests` lines and
    /// `max_bytes` bytes, one model per job where the line names it (a Gemini batch is for one
    /// model); returns how many jobs.
    pub fn chunk(&self, max_requests: usize, max_bytes: u64) -> Result<usize, StageError> {
        let mut g = self.lock();
        let Some(q) = g.as_mut() else { return Ok(0) };
        if q.pending.is_empty() {
            return Ok(0);
        }
        let mut jobs = load_jobs(&q.dir)?;
        let pending_path = q.dir.join("pending.jsonl");
        let f = std::fs::File::open(&pending_path).map_err(|e| io_err(&pending_path, e))?;
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
        let mut made: Vec<Job> = vec![];
        // The open job of each model: its index in `made` and its file.
        let mut open: HashMap<Option<String>, (usize, std::fs::File, PathBuf)> = HashMap::new();
        let mut seen = HashSet::new();
        let mut job_of: HashMap<String, usize> = HashMap::new();
        for line in BufReader::new(f).lines() {
            let line = line.map_err(|e| io_err(&pending_path, e))?;
            let Ok(head) = serde_json::from_str::<Head>(&line) else {
                continue;
            };
            if !q.pending.contains(&head.custom_id) || !seen.insert(head.custom_id.clone()) {
                continue;
            }
            let size = line.len() as u64 + 1;
            let full = open.get(&head.model).is_none_or(|(i, _, _)| {
                let j = &made[*i];
                j.requests >= max_requests || (j.requests > 0 && j.bytes + size > max_bytes)
            });
            if full {
                let name = format!("{stamp}-{:04}", jobs.len() + made.len());
                let path = q.dir.join("jobs").join(format!("{name}.jsonl"));
                let file = std::fs::File::create(&path).map_err(|e| io_err(&path, e))?;
                if let Some((_, old, old_path)) = open.remove(&head.model) {
                    old.sync_all().map_err(|e| io_err(&old_path, e))?;
                }
                made.push(Job {
                    name,
                    model: head.model.clone(),
                    ..Default::default()
                });
                open.insert(head.model.clone(), (made.len() - 1, file, path));
            }
            let (i, file, path) = open.get_mut(&head.model).expect("a job file is open");
            job_of.insert(head.custom_id.clone(), *i);
            file.write_all(format!("{line}\n").as_bytes())
                .map_err(|e| io_err(path, e))?;
            made[*i].requests += 1;
            made[*i].bytes += size;
        }
        for (_, (_, file, path)) in open {
            file.sync_all().map_err(|e| io_err(&path, e))?;
        }
        // Each job's cache keys beside it, so filing its results reads only its own.
        write_job_keys(&q.dir, &made, &job_of)?;
        let n = made.len();
        jobs.extend(made);
        // Recorded before `pending.jsonl` is cleared: a kill in between leaves the requests in
        // both, and `attach` drops them from pending.
        save_jobs(&q.dir, &jobs)?;
        write_replace(&pending_path, b"")?;
        q.in_flight.extend(q.pending.drain());
        Ok(n)
    }

    /// Files a batch's output and error lines: answers into the cache (as batch answers),
    /// errors into `failed.jsonl`; returns (answered, errors). `expected` are the job's ids:
    /// those with no line at all failed with `missing`.
    pub fn file_results<E: std::fmt::Display>(
        &self,
        parse: &dyn Fn(Vec<u8>) -> Result<CachedResponse, E>,
        keys: &RequestKeys,
        cache: &ResponseCache,
        output: &[u8],
        expected: &[String],
        missing: &str,
    ) -> Result<(usize, usize), StageError> {
        let mut g = self.lock();
        let Some(q) = g.as_mut() else {
            return Ok((0, 0));
        };
        let (mut answered, mut errors) = (0, 0);
        let mut seen = HashSet::new();
        for line in output.split(|b| *b == b'\n') {
            let Some(v) = result_line(line) else {
                continue;
            };
            let Some(id) = v["custom_id"].as_str() else {
                continue;
            };
            let Some((key, stage)) = keys.get(id) else {
                tracing::warn!(
                    custom_id = id,
                    "A batch answered a request this run did not send; ignored."
                );
                continue;
            };
            seen.insert(id.to_string());
            let status = v["response"]["status_code"].as_u64().unwrap_or(0);
            let body = &v["response"]["body"];
            if status == 200 {
                let bytes = serde_json::to_vec(body).expect("body serialises");
                match parse(bytes) {
                    Ok(mut answer) => {
                        // Filed after the pass (or by `batch import`): no stage's scope.
                        answer.stage = Some(stage.clone());
                        cache.put(key, &answer)?;
                        q.failed.remove(id);
                        answered += 1;
                    }
                    Err(e) => {
                        q.fail(id, "unreadable_answer", &e.to_string())?;
                        errors += 1;
                    }
                }
                continue;
            }
            let (code, message) = failure_of(&v, status);
            q.fail(id, &code, message)?;
            errors += 1;
        }
        for id in expected.iter().filter(|id| !seen.contains(*id)) {
            q.fail(id, missing, "the batch returned no line for this request")?;
            errors += 1;
        }
        for id in expected {
            q.in_flight.remove(id);
        }
        Ok((answered, errors))
    }

    /// Marks `job` imported and deletes its request file (the answers are in the cache).
    pub fn finish_job(&self, job: &Job) -> Result<(), StageError> {
        let g = self.lock();
        let Some(q) = g.as_ref() else { return Ok(()) };
        let mut jobs = load_jobs(&q.dir)?;
        if let Some(j) = jobs.iter_mut().find(|j| j.name == job.name) {
            *j = job.clone();
            j.imported = true;
        }
        save_jobs(&q.dir, &jobs)?;
        let _ = std::fs::remove_file(q.dir.join("jobs").join(format!("{}.jsonl", job.name)));
        let _ = std::fs::remove_file(job_keys_path(&q.dir, &job.name));
        Ok(())
    }

    pub fn save_job(&self, job: &Job) -> Result<(), StageError> {
        let g = self.lock();
        let Some(q) = g.as_ref() else { return Ok(()) };
        let mut jobs = load_jobs(&q.dir)?;
        if let Some(j) = jobs.iter_mut().find(|j| j.name == job.name) {
            *j = job.clone();
        }
        save_jobs(&q.dir, &jobs)
    }
}

/// Writes each new job's cache keys (`requests.jsonl` lines of its ids) beside it, synced.
fn write_job_keys(
    dir: &Path,
    made: &[Job],
    job_of: &HashMap<String, usize>,
) -> Result<(), StageError> {
    let mut key_files: Vec<Option<std::fs::File>> = (0..made.len()).map(|_| None).collect();
    let requests = dir.join("requests.jsonl");
    if let Ok(f) = std::fs::File::open(&requests) {
        for line in BufReader::new(f).lines() {
            let line = line.map_err(|e| io_err(&requests, e))?;
            let Some(&i) = serde_json::from_str::<IdOnly>(&line)
                .ok()
                .and_then(|id| job_of.get(&id.custom_id))
            else {
                continue;
            };
            let path = job_keys_path(dir, &made[i].name);
            if key_files[i].is_none() {
                key_files[i] = Some(std::fs::File::create(&path).map_err(|e| io_err(&path, e))?);
            }
            let f = key_files[i].as_mut().expect("opened");
            f.write_all(format!("{line}\n").as_bytes())
                .map_err(|e| io_err(&path, e))?;
        }
    }
    for (f, job) in key_files.into_iter().zip(made) {
        if let Some(f) = f {
            f.sync_all()
                .map_err(|e| io_err(&job_keys_path(dir, &job.name), e))?;
        }
    }
    Ok(())
}

/// A line of a batch's results as JSON: None for a blank line, or (warned) an unreadable one.
fn result_line(line: &[u8]) -> Option<Value> {
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        tracing::warn!("Skipping an unreadable line of a batch's results.");
        return None;
    };
    Some(v)
}

/// The code and message of a results line that carries no answer (`status` is its HTTP status).
fn failure_of(v: &Value, status: u64) -> (String, &str) {
    let body = &v["response"]["body"];
    let err = if v["error"].is_object() {
        &v["error"]
    } else {
        &body["error"]
    };
    let code = err["code"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| format!("status_{status}"));
    (code, err["message"].as_str().unwrap_or(""))
}

/// How long between two polls, from the service's `batch_poll_secs`.
pub fn poll_every(secs: Option<f64>) -> Duration {
    Duration::from_secs_f64(secs.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(30.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> CacheKey {
        CacheKey {
            service: "openai".into(),
            method: "open_ai:m".into(),
            request: format!("r{n}"),
        }
    }

    #[test]
    fn chunks_by_count_and_bytes_and_survives_a_reattach() {
        let dir = tempfile::tempdir().unwrap();
        let q = BatchQueue::default();
        q.attach(dir.path()).unwrap();
        for n in 0..7 {
            let k = key(n);
            let line = serde_json::json!({"custom_id": k.hash(), "body": {"pad": "x".repeat(100)}});
            q.defer("rel", &k, &line).unwrap();
            // Deferred twice (another video, a resume): queued once.
            q.defer("rel", &k, &line).unwrap();
        }
        assert_eq!(q.pending(), 7);
        // A reattach (the next process) sees the same queue.
        let q2 = BatchQueue::default();
        q2.attach(dir.path()).unwrap();
        assert_eq!(q2.pending(), 7);
        assert_eq!(q2.chunk(3, 1 << 20).unwrap(), 3);
        let jobs = load_jobs(dir.path()).unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.requests).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        assert_eq!(q2.pending(), 0);
        // Each job has its own keys beside it.
        for j in &jobs {
            let keys = load_keys(&job_keys_path(dir.path(), &j.name), &[]).unwrap();
            assert_eq!(keys.len(), j.requests, "{}", j.name);
        }
        // In a job now: deferring again adds nothing.
        q2.defer(
            "rel",
            &key(0),
            &serde_json::json!({"custom_id": key(0).hash()}),
        )
        .unwrap();
        assert_eq!(q2.pending(), 0);
        let q3 = BatchQueue::default();
        q3.attach(dir.path()).unwrap();
        assert_eq!(q3.pending(), 0);
        // By bytes: each line is ~150 bytes, so 400 bytes hold two.
        let d2 = tempfile::tempdir().unwrap();
        let q4 = BatchQueue::default();
        q4.attach(d2.path()).unwrap();
        for n in 0..5 {
            let k = key(n);
            q4.defer(
                "rel",
                &k,
                &serde_json::json!({"custom_id": k.hash(), "body": {"pad": "x".repeat(100)}}),
            )
            .unwrap();
        }
        q4.chunk(100, 400).unwrap();
        let jobs = load_jobs(d2.path()).unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.requests).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
    }
}
