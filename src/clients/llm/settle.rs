//! Batch mode of a chat service, end to end: `LlmService` as the runner's `BatchService`. Jobs
//! cut from the store's queue (`store::batch`) are submitted through the provider's protocol
//! (`batch.rs`: OpenAI's files and batches, Gemini's batchGenerateContent), polled, and their
//! results filed into the response cache as batch answers, with the runtime's retries around
//! every protocol call. Also `vidcurate batch import`, which files results answered elsewhere.

use super::batch::BatchInfo;
use super::{Api, LlmService};
use crate::config::ServiceMode;
use crate::error::{RunError, StageError, io};
use crate::runtime::batch::{BatchService, Settled, with_retries};
use crate::store::cache::{CachedResponse, ResponseCache};
use crate::store::{
    self,
    batch::{
        BatchQueue, Imported, Job, is_terminal, job_ids, job_keys_path, load_jobs, load_keys,
        queue_dir,
    },
};
use serde_json::Value;
use std::path::Path;
use tokio_util::sync::CancellationToken;

#[async_trait::async_trait]
impl BatchService for LlmService {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&self, run_dir: &Path) -> Result<(), RunError> {
        let q = self.batch_queue().expect("batch services have queues");
        q.attach(&queue_dir(run_dir, &self.queue_name))
            .map_err(RunError::from)
    }

    fn sends_batches(&self) -> bool {
        self.mode == ServiceMode::Batch
    }

    fn pending(&self) -> usize {
        self.batch_queue().map_or(0, |q| q.pending())
    }

    fn chunk(&self) -> Result<usize, RunError> {
        let q = self.batch_queue().expect("batch services have queues");
        q.chunk(self.batch_max_requests, self.batch_max_bytes)
            .map_err(RunError::from)
    }

    async fn settle(
        &self,
        cache: &ResponseCache,
        cancel: &CancellationToken,
    ) -> Result<Settled, RunError> {
        settle_jobs(self, cache, cancel).await
    }
}

/// A batch's answer body as the response cache keeps it (marked as a batch answer).
fn cached_answer(api: Api, body: Vec<u8>) -> Result<CachedResponse, super::LlmError> {
    let a = super::parse_answer(api, &body)?;
    Ok(CachedResponse {
        status: 200,
        parsed: a.text,
        input_tokens: Some(a.input_tokens),
        output_tokens: Some(a.output_tokens),
        latency_ms: 0,
        body,
        batch: true,
        // Filed under the stage that queued the request (`BatchQueue::file_results`).
        stage: None,
    })
}

/// Drives every job of `svc` that is not imported yet to its end: uploads its file, creates its
/// batch (or finds the one a killed run created), polls until the batch is over, and files the
/// results. Returns early (Ok) when `cancel` fires; the jobs stay recorded.
async fn settle_jobs(
    svc: &LlmService,
    cache: &ResponseCache,
    cancel: &CancellationToken,
) -> Result<Settled, RunError> {
    let Some(queue) = svc.batch_queue() else {
        return Ok(Settled::default());
    };
    let Some(dir) = queue.dir() else {
        return Ok(Settled::default());
    };
    let mut done = Settled::default();
    let jobs: Vec<Job> = load_jobs(&dir)?
        .into_iter()
        .filter(|j| !j.imported)
        .collect();
    // Submit every job first, then poll them together: they run at the provider side by side.
    let mut live = vec![];
    for mut job in jobs {
        if cancel.is_cancelled() {
            return Ok(done);
        }
        let path = dir.join("jobs").join(format!("{}.jsonl", job.name));
        if job.batch_id.is_none() {
            let batch = submit(svc, queue, &path, &mut job, cancel).await?;
            job.batch_id = Some(batch.id.clone());
            job.status = batch.status.clone();
            queue.save_job(&job)?;
            tracing::info!(service = %svc.name, batch = %batch.id, requests = job.requests, "Submitted a batch.");
        }
        live.push(job);
    }
    let poll = svc.batch_poll_every();
    while !live.is_empty() {
        let mut still = vec![];
        for mut job in live {
            let id = job.batch_id.clone().expect("created");
            let b = with_retries("poll batch", cancel, || svc.batch_get(&id)).await?;
            if b.status != job.status {
                tracing::info!(service = %svc.name, batch = %id, status = %b.status, completed = b.completed, failed = b.failed, total = b.total, "Batch status.");
                job.status = b.status.clone();
                queue.save_job(&job)?;
            }
            if !is_terminal(&b.status) {
                still.push(job);
                continue;
            }
            let (answered, errors) = file(svc, queue, &dir, &job, &b, cache, cancel).await?;
            job.answered = answered;
            job.errors = errors;
            queue.finish_job(&job)?;
            tracing::info!(service = %svc.name, batch = %id, status = %b.status, answered, errors, "Batch imported into the response cache.");
            done.jobs += 1;
            done.answered += answered;
            done.errors += errors;
        }
        live = still;
        if live.is_empty() || cancel.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = cancel.cancelled() => return Ok(done),
        }
    }
    Ok(done)
}

/// Creates the batch of `job` (uploading its file first where the API needs one, and recording
/// the file id before the batch exists), or finds the one a stopped run created for it.
async fn submit(
    svc: &LlmService,
    queue: &BatchQueue,
    path: &Path,
    job: &mut Job,
    cancel: &CancellationToken,
) -> Result<BatchInfo, RunError> {
    Ok(match svc.api {
        Api::OpenAi => {
            if job.file_id.is_none() {
                let bytes = std::fs::read(path).map_err(io(path))?;
                let id = with_retries("upload", cancel, || {
                    svc.batch_upload(&job.name, bytes.clone())
                })
                .await?;
                // Recorded before the batch is created: a lost batch id is found again
                // by this file id.
                job.file_id = Some(id);
                queue.save_job(job)?;
            }
            let file_id = job.file_id.clone().expect("uploaded");
            match with_retries("list batches", cancel, || svc.batch_find(&file_id)).await? {
                Some(b) => {
                    tracing::info!(batch = %b.id, job = %job.name, "Found the batch a stopped run created for this job; not creating another.");
                    b
                }
                None => {
                    with_retries("create batch", cancel, || {
                        svc.batch_create(&file_id, &job.name)
                    })
                    .await?
                }
            }
        }
        Api::Gemini => {
            // Named after the job: a lost batch name is found again by its display
            // name.
            let name = svc.batch_display_name(&job.name);
            match with_retries("list batches", cancel, || svc.gemini_batch_find(&name)).await? {
                Some(b) => {
                    tracing::info!(batch = %b.id, job = %job.name, "Found the batch a stopped run created for this job; not creating another.");
                    b
                }
                None => {
                    let bytes = std::fs::read(path).map_err(io(path))?;
                    let model = job.model.clone().unwrap_or_default();
                    // Above the inline limit, a JSONL file of {key, request} lines,
                    // uploaded first (and recorded, so a resume does not upload it
                    // again).
                    if job.bytes > svc.batch_inline_bytes && job.file_id.is_none() {
                        let id =
                            with_retries("upload", cancel, || svc.gemini_upload(&name, &bytes))
                                .await?;
                        job.file_id = Some(id);
                        queue.save_job(job)?;
                    }
                    let file = job.file_id.clone();
                    with_retries("create batch", cancel, || {
                        svc.gemini_batch_create(&model, &name, &bytes, file.as_deref())
                    })
                    .await?
                }
            }
        }
    })
}

/// Downloads a finished batch's results and files them into `cache`; returns (answered, errors).
async fn file(
    svc: &LlmService,
    queue: &BatchQueue,
    dir: &Path,
    job: &Job,
    b: &BatchInfo,
    cache: &ResponseCache,
    cancel: &CancellationToken,
) -> Result<(usize, usize), RunError> {
    let mut results = b.inline_output.clone().unwrap_or_default();
    for fid in [&b.output_file_id, &b.error_file_id].into_iter().flatten() {
        let bytes = with_retries("download results", cancel, || svc.batch_content(fid)).await?;
        results.extend_from_slice(&bytes);
        results.push(b'\n');
    }
    let ids = job_ids(dir, job)?;
    let missing = match b.status.as_str() {
        "failed" => b.errors.clone().unwrap_or_else(|| "batch_failed".into()),
        s => format!("batch_{s}"),
    };
    // A job made before key files existed falls back to the queue's whole list.
    let own = job_keys_path(dir, &job.name);
    let keys = if own.exists() {
        load_keys(&own, &ids)
    } else {
        load_keys(&dir.join("requests.jsonl"), &ids)
    }?;
    Ok(queue.file_results(
        &|bytes| cached_answer(svc.api, bytes),
        &keys,
        cache,
        &results,
        &ids,
        &missing,
    )?)
}

/// `vidcurate batch import`: files a batch output file (OpenAI's format, also `vllm run-batch`'s)
/// into the cache and takes the answered requests of `stage` out of the pending queues.
pub fn import(
    local_dir: &Path,
    stage: &str,
    cache: &ResponseCache,
    results: &Path,
) -> Result<Imported, StageError> {
    let raw = std::fs::read(results)
        .map_err(|e| StageError::internal("batch_queue", format!("{}: {e}", results.display())))?;
    // Gemini's result lines ({key, response | error}) become OpenAI's shape, which the rest
    // reads; their bodies are parsed as Gemini's.
    let mut api = Api::OpenAi;
    let mut bytes = Vec::with_capacity(raw.len());
    let mut unreadable = vec![];
    for (n, line) in raw.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.get("key").is_some() && v.get("custom_id").is_none() => {
                api = Api::Gemini;
                let key = v["key"].as_str().unwrap_or_default().to_string();
                bytes.extend(
                    super::batch::gemini_result(&v, &key)
                        .to_string()
                        .into_bytes(),
                );
            }
            Ok(v) if v.get("custom_id").is_some() => bytes.extend_from_slice(line),
            _ => {
                unreadable.push(n + 1);
                continue;
            }
        }
        bytes.push(b'\n');
    }
    let mut r = store::batch::import_lines(local_dir, stage, cache, &bytes, &|body| {
        cached_answer(api, body)
    })?;
    r.unreadable = unreadable;
    Ok(r)
}
