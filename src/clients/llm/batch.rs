//! OpenAI's batch interface (also vLLM's server): files with `purpose=batch`, `/batches`, and
//! the result files. Only the protocol: the queue, the retries and the polling are the runtime's
//! (`runtime::batch`).

use super::LlmService;
use crate::error::{ErrorKind, StageError};
use crate::runtime::batch::BatchInfo;
use serde_json::{Value, json};

impl LlmService {
    /// The batch input line of one request (`body` as `chat` would POST it to `path`).
    pub(super) fn batch_line(&self, custom_id: &str, path: &str, body: &Value) -> Value {
        // The url is the endpoint's path under the server root, as in a live call.
        let root = reqwest::Url::parse(&self.base_url)
            .map(|u| u.path().to_string())
            .unwrap_or_else(|_| "/v1/".into());
        json!({"custom_id": custom_id, "method": "POST", "url": format!("{root}{path}"), "body": body})
    }

    /// The chat endpoint's path, as batches name it (`/v1/chat/completions`).
    fn batch_endpoint(&self) -> String {
        let root = reqwest::Url::parse(&self.base_url)
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
        let r = match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        };
        let resp = match r.timeout(self.timeout).send().await {
            Ok(resp) => resp,
            Err(e) => {
                return Err(StageError::external(
                    "service_unavailable",
                    self.scrub(&format!("{} {what}: {}", self.name, e.without_url())),
                ));
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let bytes = match resp.bytes().await {
            Ok(b) => b.to_vec(),
            Err(e) => {
                return Err(StageError::external(
                    "service_unavailable",
                    self.scrub(&format!("{} {what}: {}", self.name, e.without_url())),
                ));
            }
        };
        if status == 200 {
            return Ok(bytes);
        }
        match self.retry_or_fail(status, &bytes) {
            Ok((why, hint)) => Err(StageError::external(
                "service_unavailable",
                self.scrub(&format!("{} {what}: {why}", self.name)),
            )
            .with_retry_after(
                retry_after
                    .or(hint)
                    .and_then(|s| super::server_wait(s, self.max_wait)),
            )),
            Err(e) if e.kind == ErrorKind::Config => Err(e),
            Err(e) => Err(StageError::new(
                ErrorKind::Config,
                "batch_refused",
                format!("{} {what} was refused: {}", self.name, e.detail),
            )),
        }
    }

    fn json_of(&self, what: &str, bytes: &[u8]) -> Result<Value, StageError> {
        serde_json::from_slice(bytes).map_err(|e| {
            StageError::external(
                "service_unavailable",
                format!("{} {what}: unreadable answer: {e}", self.name),
            )
        })
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
        let url = format!("{}files", self.base_url);
        let bytes = self
            .batch_call("file upload", self.http.post(url).multipart(form))
            .await?;
        let v = self.json_of("file upload", &bytes)?;
        v["id"].as_str().map(String::from).ok_or_else(|| {
            StageError::external(
                "service_unavailable",
                format!("{} file upload: no file id in the answer", self.name),
            )
        })
    }

    /// Creates the batch of an uploaded file.
    pub async fn batch_create(&self, file_id: &str, job: &str) -> Result<BatchInfo, StageError> {
        let body = json!({
            "input_file_id": file_id,
            "endpoint": self.batch_endpoint(),
            "completion_window": self.completion_window,
            "metadata": {"vidcurate_job": job, "service": self.name},
        });
        let url = format!("{}batches", self.base_url);
        let r = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string());
        let bytes = self.batch_call("batch create", r).await?;
        Ok(BatchInfo::from_json(&self.json_of("batch create", &bytes)?))
    }

    pub async fn batch_get(&self, id: &str) -> Result<BatchInfo, StageError> {
        let url = format!("{}batches/{id}", self.base_url);
        let bytes = self.batch_call("batch status", self.http.get(url)).await?;
        Ok(BatchInfo::from_json(&self.json_of("batch status", &bytes)?))
    }

    /// The batch made of `file_id`, if one exists (a run killed between creating a batch and
    /// recording its id): the provider's list, newest first, page by page.
    pub async fn batch_find(&self, file_id: &str) -> Result<Option<BatchInfo>, StageError> {
        let mut after: Option<String> = None;
        for _ in 0..20 {
            let mut url = format!("{}batches?limit=100", self.base_url);
            if let Some(a) = &after {
                url += &format!("&after={a}");
            }
            let bytes = self.batch_call("batch list", self.http.get(url)).await?;
            let v = self.json_of("batch list", &bytes)?;
            let data = v["data"].as_array().cloned().unwrap_or_default();
            if let Some(b) = data.iter().find(|b| b["input_file_id"] == file_id) {
                return Ok(Some(BatchInfo::from_json(b)));
            }
            if v["has_more"] != true || data.is_empty() {
                break;
            }
            after = data.last().and_then(|b| b["id"].as_str()).map(String::from);
        }
        Ok(None)
    }

    /// A result file's bytes.
    pub async fn batch_content(&self, file_id: &str) -> Result<Vec<u8>, StageError> {
        let url = format!("{}files/{file_id}/content", self.base_url);
        self.batch_call("result download", self.http.get(url)).await
    }
}
