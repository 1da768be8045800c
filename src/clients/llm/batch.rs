//! OpenAI's batch interface (also vLLM's server): files with `purpose=batch`, `/batches`, and
//! the result files. Only the protocol: the queue files are the store's (`store::batch`), the
//! retries the runtime's, the submit-and-poll loop `settle.rs`.

use super::{Api, LlmService};
use crate::error::{ErrorKind, StageError};
use serde_json::{Value, json};

/// A batch as the provider reports it.
#[derive(Debug, Clone, Default)]
pub struct BatchInfo {
    pub id: String,
    pub status: String,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
    /// A failed batch's validation errors, joined.
    pub errors: Option<String>,
    /// Results that came in the batch itself (Gemini's inline responses), as output lines.
    pub inline_output: Option<Vec<u8>>,
}

impl BatchInfo {
    pub fn from_json(v: &Value) -> Self {
        let s = |k: &str| v[k].as_str().map(String::from);
        let errors = v["errors"]["data"].as_array().map(|d| {
            d.iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e["code"].as_str().unwrap_or("error"),
                        e["message"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
        BatchInfo {
            id: s("id").unwrap_or_default(),
            status: s("status").unwrap_or_default(),
            output_file_id: s("output_file_id"),
            error_file_id: s("error_file_id"),
            total: v["request_counts"]["total"].as_u64().unwrap_or(0),
            completed: v["request_counts"]["completed"].as_u64().unwrap_or(0),
            failed: v["request_counts"]["failed"].as_u64().unwrap_or(0),
            errors,
            inline_output: None,
        }
    }
}

impl LlmService {
    /// The batch input line of one request (`body` as `chat` would POST it to `path`).
    pub(super) fn batch_line(&self, custom_id: &str, path: &str, body: &Value) -> Value {
        if self.api == Api::Gemini {
            // Gemini's file line is {key, request}; the model (a batch is for one) rides along.
            let model = path
                .strip_prefix("models/")
                .and_then(|p| p.split(':').next())
                .unwrap_or_default();
            return json!({"custom_id": custom_id, "key": custom_id, "model": model, "request": body});
        }
        // The url is the endpoint's path under the server root, as in a live call.
        let root = reqwest::Url::parse(&self.ep.base_url)
            .map(|u| u.path().to_string())
            .unwrap_or_else(|_| "/v1/".into());
        json!({"custom_id": custom_id, "method": "POST", "url": format!("{root}{path}"), "body": body})
    }

    /// The chat endpoint's path, as batches name it (`/v1/chat/completions`).
    fn batch_endpoint(&self) -> String {
        let root = reqwest::Url::parse(&self.ep.base_url)
            .map(|u| u.path().to_string())
            .unwrap_or_else(|_| "/v1/".into());
        format!("{root}chat/completions")
    }

    /// One call of the batch interface: the body of a 200, else the error the runtime's retry
    /// policy needs (external: try again; config: stop).
    async fn batch_call(
        &self,
        what: &str,
        r: reqwest::RequestBuilder,
    ) -> Result<Vec<u8>, StageError> {
        Ok(self.batch_call_headers(what, r).await?.0)
    }

    /// `batch_call`, with the answer's headers.
    async fn batch_call_headers(
        &self,
        what: &str,
        r: reqwest::RequestBuilder,
    ) -> Result<(Vec<u8>, reqwest::header::HeaderMap), StageError> {
        let (status, retry_after, headers, bytes) = self.ep.send_full(r).await.map_err(|e| {
            StageError::external(
                "service_unavailable",
                self.ep.scrub(&format!("{} {what}: {e}", self.name)),
            )
        })?;
        if status == 200 {
            return Ok((bytes, headers));
        }
        match self.ep.retry_or_fail(status, &bytes) {
            Ok((why, hint)) => Err(StageError::external(
                "service_unavailable",
                self.ep.scrub(&format!("{} {what}: {why}", self.name)),
            )
            .with_retry_after(
                retry_after
                    .or(hint)
                    .and_then(|s| self.ep.asked_wait(Some(s))),
            )),
            Err(e) if e.kind == ErrorKind::Config => Err(e),
            // A 404 here is a server with no batch interface at all (llama.cpp's, Ollama's).
            Err(e) => Err(StageError::new(
                ErrorKind::Config,
                "batch_refused",
                format!(
                    "{} {what} was refused: {}{}",
                    self.name,
                    e.detail,
                    if status == 404 {
                        "; this server has no batch interface: set mode = \"live\" on the service"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }

    /// An answer of the batch interface that lacks what `what` needs: worth another try.
    fn unavailable(&self, what: &str, why: impl std::fmt::Display) -> StageError {
        StageError::external(
            "service_unavailable",
            format!("{} {what}: {why}", self.name),
        )
    }

    fn json_of(&self, what: &str, bytes: &[u8]) -> Result<Value, StageError> {
        serde_json::from_slice(bytes)
            .map_err(|e| self.unavailable(what, format!("unreadable answer: {e}")))
    }

    /// `batch_call`, its answer read as JSON.
    async fn call_json(&self, what: &str, r: reqwest::RequestBuilder) -> Result<Value, StageError> {
        let bytes = self.batch_call(what, r).await?;
        self.json_of(what, &bytes)
    }

    /// POSTs `body` as JSON; the answer, read as JSON.
    async fn post_json(&self, what: &str, url: String, body: &Value) -> Result<Value, StageError> {
        let r = self
            .ep
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string());
        self.call_json(what, r).await
    }

    /// Uploads a job's input file; its file id.
    pub async fn batch_upload(&self, name: &str, jsonl: Vec<u8>) -> Result<String, StageError> {
        let part = reqwest::multipart::Part::bytes(jsonl)
            .file_name(format!("vidcurate-{name}.jsonl"))
            .mime_str("application/jsonl")
            .expect("a valid mime type");
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part("file", part);
        let url = format!("{}files", self.ep.base_url);
        let v = self
            .call_json("file upload", self.ep.http.post(url).multipart(form))
            .await?;
        v["id"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| self.unavailable("file upload", "no file id in the answer"))
    }

    /// Creates the batch of an uploaded file.
    pub async fn batch_create(&self, file_id: &str, job: &str) -> Result<BatchInfo, StageError> {
        let body = json!({
            "input_file_id": file_id,
            "endpoint": self.batch_endpoint(),
            "completion_window": self.completion_window,
            "metadata": {"vidcurate_job": job, "service": self.name},
        });
        let v = self
            .post_json(
                "batch create",
                format!("{}batches", self.ep.base_url),
                &body,
            )
            .await?;
        Ok(BatchInfo::from_json(&v))
    }

    pub async fn batch_get(&self, id: &str) -> Result<BatchInfo, StageError> {
        if self.api == Api::Gemini {
            // `id` is the operation's name, `batches/…`.
            let url = format!("{}{id}", self.ep.base_url);
            let v = self
                .call_json("batch status", self.ep.http.get(url))
                .await?;
            return Ok(gemini_batch(&v));
        }
        let url = format!("{}batches/{id}", self.ep.base_url);
        let v = self
            .call_json("batch status", self.ep.http.get(url))
            .await?;
        Ok(BatchInfo::from_json(&v))
    }

    /// The display name of a job's Gemini batch: unique per service and job.
    pub fn batch_display_name(&self, job: &str) -> String {
        format!("vidcurate-{}-{job}", self.queue_name)
    }

    /// Creates a Gemini batch of `model`: from an uploaded file of the job's lines when there
    /// is one, else with the job file's lines as inline requests.
    pub async fn gemini_batch_create(
        &self,
        model: &str,
        name: &str,
        jsonl: &[u8],
        file: Option<&str>,
    ) -> Result<BatchInfo, StageError> {
        let input = match file {
            Some(f) => json!({"file_name": f}),
            None => {
                let mut requests = vec![];
                for v in gemini_lines(name, jsonl)? {
                    requests.push(json!({"request": v["request"], "metadata": {"key": v["key"]}}));
                }
                json!({"requests": {"requests": requests}})
            }
        };
        let body = json!({"batch": {"display_name": name, "input_config": input}});
        let url = format!("{}models/{model}:batchGenerateContent", self.ep.base_url);
        Ok(gemini_batch(
            &self.post_json("batch create", url, &body).await?,
        ))
    }

    /// Uploads a job's lines as Gemini's batch file ({key, request} per line) with the Files
    /// API's resumable protocol (start, then upload and finalize in one go); its name
    /// (`files/…`).
    pub async fn gemini_upload(&self, name: &str, jsonl: &[u8]) -> Result<String, StageError> {
        let mut body = vec![];
        for v in gemini_lines(name, jsonl)? {
            body.extend(
                json!({"key": v["key"], "request": v["request"]})
                    .to_string()
                    .into_bytes(),
            );
            body.push(b'\n');
        }
        let root = self.ep.base_url.trim_end_matches('/');
        let (host, version) = root.rsplit_once('/').unwrap_or((root, "v1beta"));
        let start = self
            .ep
            .http
            .post(format!("{host}/upload/{version}/files"))
            .header("X-Goog-Upload-Protocol", "resumable")
            .header("X-Goog-Upload-Command", "start")
            .header(
                "X-Goog-Upload-Header-Content-Length",
                body.len().to_string(),
            )
            .header("X-Goog-Upload-Header-Content-Type", "application/jsonl")
            .header("content-type", "application/json")
            .body(json!({"file": {"display_name": name}}).to_string());
        let (_, headers) = self.batch_call_headers("file upload", start).await?;
        let url = headers
            .get("x-goog-upload-url")
            .and_then(|v| v.to_str().ok())
            .map(String::from)
            .ok_or_else(|| self.unavailable("file upload", "no X-Goog-Upload-URL in the answer"))?;
        let upload = self
            .ep
            .http
            .post(url)
            .header("X-Goog-Upload-Offset", "0")
            .header("X-Goog-Upload-Command", "upload, finalize")
            .body(body);
        let (bytes, _) = self.batch_call_headers("file upload", upload).await?;
        let v = self.json_of("file upload", &bytes)?;
        v["file"]["name"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| self.unavailable("file upload", "no file name in the answer"))
    }

    /// The Gemini batch named `display_name`, if a stopped run created it.
    pub async fn gemini_batch_find(
        &self,
        display_name: &str,
    ) -> Result<Option<BatchInfo>, StageError> {
        let base = format!("{}batches?pageSize=100", self.ep.base_url);
        let found = self
            .find_listed(
                |t| t.map_or(base.clone(), |t| format!("{base}&pageToken={t}")),
                "operations",
                |v, _| {
                    v["nextPageToken"]
                        .as_str()
                        .filter(|t| !t.is_empty())
                        .map(String::from)
                },
                |o| o["metadata"]["displayName"] == display_name,
            )
            .await?;
        Ok(found.as_ref().map(gemini_batch))
    }

    /// The batch made of `file_id`, if one exists (a run killed between creating a batch and
    /// recording its id).
    pub async fn batch_find(&self, file_id: &str) -> Result<Option<BatchInfo>, StageError> {
        let base = format!("{}batches?limit=100", self.ep.base_url);
        let found = self
            .find_listed(
                |a| a.map_or(base.clone(), |a| format!("{base}&after={a}")),
                "data",
                |v, items| {
                    (v["has_more"] == true)
                        .then(|| {
                            items
                                .last()
                                .and_then(|b| b["id"].as_str())
                                .map(String::from)
                        })
                        .flatten()
                },
                |b| b["input_file_id"] == file_id,
            )
            .await?;
        Ok(found.as_ref().map(BatchInfo::from_json))
    }

    /// The first item of a paged list (`items` of each page) that `hit` picks; `next` reads the
    /// next page's token from a page. At most 20 pages (2000 batches) are read.
    async fn find_listed(
        &self,
        url: impl Fn(Option<&str>) -> String,
        items: &str,
        next: impl Fn(&Value, &[Value]) -> Option<String>,
        hit: impl Fn(&Value) -> bool,
    ) -> Result<Option<Value>, StageError> {
        let mut token: Option<String> = None;
        for _ in 0..20 {
            let v = self
                .call_json("batch list", self.ep.http.get(url(token.as_deref())))
                .await?;
            let page = v[items].as_array().cloned().unwrap_or_default();
            if let Some(found) = page.iter().find(|x| hit(x)) {
                return Ok(Some(found.clone()));
            }
            match next(&v, &page) {
                Some(t) if !page.is_empty() => token = Some(t),
                _ => break,
            }
        }
        Ok(None)
    }

    /// A result file's bytes.
    pub async fn batch_content(&self, file_id: &str) -> Result<Vec<u8>, StageError> {
        if self.api == Api::Gemini {
            // Files download from the API root's `download/` path: .../download/v1beta/files/x.
            let root = self.ep.base_url.trim_end_matches('/');
            let (host, version) = root.rsplit_once('/').unwrap_or((root, "v1beta"));
            let url = format!("{host}/download/{version}/{file_id}:download?alt=media");
            let bytes = self
                .batch_call("result download", self.ep.http.get(url))
                .await?;
            let mut out = vec![];
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                if let Ok(v) = serde_json::from_slice::<Value>(line) {
                    out.extend(
                        gemini_result(&v, v["key"].as_str().unwrap_or_default())
                            .to_string()
                            .into_bytes(),
                    );
                    out.push(b'\n');
                }
            }
            return Ok(out);
        }
        let url = format!("{}files/{file_id}/content", self.ep.base_url);
        self.batch_call("result download", self.ep.http.get(url))
            .await
    }
}

/// A job file's lines, parsed.
fn gemini_lines(name: &str, jsonl: &[u8]) -> Result<Vec<Value>, StageError> {
    jsonl
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            serde_json::from_slice(line).map_err(|e| {
                StageError::internal("batch_queue", format!("a job line of {name}: {e}"))
            })
        })
        .collect()
}

/// A Gemini batch operation as a `BatchInfo`: its state in OpenAI's words, and its inline
/// results as output lines.
fn gemini_batch(op: &Value) -> BatchInfo {
    let meta = &op["metadata"];
    let state = meta["state"].as_str().unwrap_or("");
    let short = state
        .strip_prefix("BATCH_STATE_")
        .or_else(|| state.strip_prefix("JOB_STATE_"))
        .unwrap_or(state);
    let status = match short {
        "PENDING" | "QUEUED" | "UNSPECIFIED" => "validating",
        "RUNNING" => "in_progress",
        "SUCCEEDED" => "completed",
        "FAILED" => "failed",
        "CANCELLED" | "CANCELLING" => "cancelled",
        "EXPIRED" => "expired",
        // An operation that is done says so even without a state we know.
        _ if op["done"] == true => "completed",
        _ => "in_progress",
    };
    let output = if op["response"].is_object() {
        &op["response"]
    } else {
        &meta["output"]
    };
    let inline = output["inlinedResponses"]["inlinedResponses"]
        .as_array()
        .map(|items| {
            let mut out = vec![];
            for it in items {
                let key = it["metadata"]["key"].as_str().unwrap_or_default();
                out.extend(gemini_result(it, key).to_string().into_bytes());
                out.push(b'\n');
            }
            out
        });
    let stat = |k: &str| {
        meta["batchStats"][k]
            .as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| meta["batchStats"][k].as_u64())
            .unwrap_or(0)
    };
    BatchInfo {
        id: op["name"].as_str().unwrap_or_default().to_string(),
        status: status.to_string(),
        output_file_id: output["responsesFile"].as_str().map(String::from),
        error_file_id: None,
        total: stat("requestCount"),
        completed: stat("successfulRequestCount"),
        failed: stat("failedRequestCount"),
        errors: op["error"]["message"].as_str().map(String::from),
        inline_output: inline,
    }
}

/// One Gemini result (inline or a file line) as an output line of OpenAI's shape.
pub fn gemini_result(item: &Value, key: &str) -> Value {
    if item["response"].is_object() {
        return json!({"custom_id": key, "response": {"status_code": 200, "body": item["response"]}});
    }
    let e = &item["error"];
    let code = e["status"]
        .as_str()
        .map(String::from)
        .or_else(|| e["code"].as_i64().map(|c| format!("code_{c}")))
        .unwrap_or_else(|| "error".into());
    json!({"custom_id": key, "error": {"code": code, "message": e["message"]}})
}
