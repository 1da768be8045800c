//! Run directories on object stores: `s3://bucket/prefix`, `gs://…`, `az://…` (and `memory://`
//! for tests), through the `object_store` crate.
//!
//! Credentials and endpoints come from the standard environment variables only
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`,
//! `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME` …), never from the pipeline file, so they
//! never reach the manifest. Transient errors (5xx such as S3's 503 SlowDown, timeouts, dropped
//! connections) are retried by the crate's client with backoff; a refused credential is not
//! retried and stops the run. The client does not retry an answer whose body breaks after its
//! headers arrived, except for GET: a LIST (or a multipart create/complete) answer cut in the
//! middle, or a connection reset while it is read, comes out as an error. `attempts` retries
//! exactly those here (`unretried_transport_fault`), so every kind of request survives them.
//!
//! The crate has no call that lists incomplete multipart uploads; on S3 `pending_uploads` sends
//! ListMultipartUploads itself, as a URL the crate signs with the store's own credentials, so
//! that `gc` can abort what a killed writer left.

use super::{ObjectInfo, PendingUpload, Store};
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Whether `out` names an object store rather than a local folder.
pub fn is_url(out: &str) -> bool {
    ["s3://", "s3a://", "gs://", "az://", "abfs://", "memory://"]
        .iter()
        .any(|p| out.starts_with(p))
}

/// A run directory under a prefix of an object store.
pub struct ObjectStoreRun {
    inner: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
    /// Credential values in use, scrubbed from every error this store returns.
    secrets: Vec<String>,
    /// The same store as S3, for the calls only S3 has here (incomplete uploads).
    s3: Option<Arc<object_store::aws::AmazonS3>>,
}

const PART_SIZE: usize = 8 << 20;

fn retry_config() -> RetryConfig {
    RetryConfig {
        max_retries: 8,
        retry_timeout: Duration::from_secs(300),
        ..Default::default()
    }
}

/// Attempts of a call whose answer broke while it was read (see the module comment).
const BODY_ATTEMPTS: u32 = 6;

/// Whether `e` is a transport fault the crate's client has not retried itself: an HTTP error of a
/// transient kind (connection reset, incomplete body, timeout) that no retry loop wrapped (the
/// client's own retries wrap theirs in a "Error performing …" error, and have been spent).
fn unretried_transport_fault(e: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind as K};
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.to_string().starts_with("Error performing ") {
            return false;
        }
        if let Some(h) = err.downcast_ref::<HttpError>() {
            return matches!(
                h.kind(),
                K::Connect | K::Request | K::Timeout | K::Interrupted | K::Decode
            );
        }
        cur = err.source();
    }
    false
}

/// Runs `call` again, with backoff, while it fails with a fault the client did not retry.
async fn attempts<T, F, Fut>(what: &str, call: F) -> Result<T, object_store::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, object_store::Error>>,
{
    attempts_while(what, unretried_transport_fault, call).await
}

/// Runs `call` again, with backoff, while it fails with an error `transient` accepts.
async fn attempts_while<T, E, F, Fut>(
    what: &str,
    transient: impl Fn(&E) -> bool,
    call: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < BODY_ATTEMPTS && transient(&e) => {
                tracing::debug!(what, attempt, error = %e, "An answer broke while it was read; retrying.");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                attempt += 1;
            }
            r => return r,
        }
    }
}

/// Why a streamed transfer failed: the store (a transport fault may be retried) or the local file.
enum Upload {
    Store(object_store::Error),
    Local(io::Error),
}

/// Environment variables that hold credentials: their values are scrubbed from error text.
const SECRET_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
];

/// S3 error bodies echo what was signed: `<AWSAccessKeyId>`, and in a `SignatureDoesNotMatch`
/// the string to sign and canonical request, whose credential scope starts with the key id.
/// Their contents are dropped whatever they hold (the key may come from a profile, not the
/// environment); so are bare access key ids (`AKIA…`, `ASIA…`).
fn scrub_body(text: &str) -> String {
    static TAGS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?s)<(AWSAccessKeyId|StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes|SignatureProvided|HostId)>.*?</(AWSAccessKeyId|StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes|SignatureProvided|HostId)>",
        )
        .expect("valid regex")
    });
    static KEY_IDS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\b(AKIA|ASIA)[A-Z0-9]{12,}\b").expect("valid regex")
    });
    let t = TAGS.replace_all(text, "<$1>***</$1>");
    KEY_IDS.replace_all(&t, "***").into_owned()
}

impl ObjectStoreRun {
    /// Opens the store a URL names, configured from the environment.
    pub fn open(url: &str) -> io::Result<Self> {
        Self::open_with(url, &[])
    }

    /// Like `open`, with S3 settings given here over the environment's (`aws_endpoint`,
    /// `aws_access_key_id`, … as `object_store` names them): for tools and tests that talk to a
    /// store without exporting variables.
    pub fn open_with(url: &str, s3_options: &[(&str, &str)]) -> io::Result<Self> {
        crate::tls::ensure_provider();
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{url}: not a store URL"),
            )
        })?;
        let prefix = rest
            .split_once('/')
            .map_or("", |(_, p)| p)
            .trim_matches('/');
        let bad = |e: object_store::Error| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {e}"))
        };
        let mut s3 = None;
        let inner: Arc<dyn ObjectStore> = match scheme {
            "s3" | "s3a" => {
                let mut b = object_store::aws::AmazonS3Builder::from_env();
                for (k, v) in s3_options {
                    let key = k.parse().map_err(bad)?;
                    b = b.with_config(key, *v);
                }
                let built = Arc::new(
                    b.with_url(url)
                        .with_retry(retry_config())
                        .build()
                        .map_err(bad)?,
                );
                s3 = Some(built.clone());
                built
            }
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry_config())
                    .build()
                    .map_err(bad)?,
            ),
            "az" | "abfs" => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry_config())
                    .build()
                    .map_err(bad)?,
            ),
            "memory" => Arc::new(object_store::memory::InMemory::new()),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{url}: unknown store scheme `{other}` (s3, gs, az or a local folder)"),
                ));
            }
        };
        let prefix = ObjPath::from(prefix);
        let mut run = Self::with(inner, prefix, url.trim_end_matches('/').to_string());
        run.s3 = s3;
        run.secrets = SECRET_VARS
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .chain(
                s3_options
                    .iter()
                    .filter(|(k, _)| ["key", "secret", "token"].iter().any(|w| k.contains(w)))
                    .map(|(_, v)| v.to_string()),
            )
            .filter(|v| !v.is_empty())
            .collect();
        Ok(run)
    }

    /// A run directory on a given store (tests share one in-memory store between "workers").
    pub fn with(inner: Arc<dyn ObjectStore>, prefix: ObjPath, url: String) -> Self {
        Self {
            inner,
            prefix,
            url,
            secrets: vec![],
            s3: None,
        }
    }

    /// Maps the crate's errors onto io kinds the runtime already handles (`PermissionDenied` is
    /// the one that stops a run with a configuration error), with credentials scrubbed.
    fn to_io(&self, e: object_store::Error) -> io::Error {
        use object_store::Error as E;
        let kind = match &e {
            E::NotFound { .. } => io::ErrorKind::NotFound,
            E::AlreadyExists { .. } | E::Precondition { .. } => io::ErrorKind::AlreadyExists,
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
                io::ErrorKind::PermissionDenied
            }
            _ => io::ErrorKind::Other,
        };
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        let text = crate::secrets::scrub(&scrub_body(&e.to_string()), &secrets);
        io::Error::new(kind, text)
    }

    fn key(&self, path: &str) -> io::Result<ObjPath> {
        if path.split('/').any(|c| c == ".." || c.is_empty()) || path.starts_with('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad store path {path:?}"),
            ));
        }
        Ok(path
            .split('/')
            .fold(self.prefix.clone(), |key, part| key.join(part)))
    }

    /// Runs a streamed transfer again from its start while it fails with a fault the client did
    /// not retry (`attempts`, for calls that stream to or from a local file).
    async fn transfer<F, Fut>(&self, path: &str, call: F) -> io::Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), Upload>>,
    {
        let mut attempt = 1;
        loop {
            match call().await {
                Err(Upload::Store(e))
                    if attempt < BODY_ATTEMPTS && unretried_transport_fault(&e) =>
                {
                    tracing::debug!(path, attempt, error = %e, "A transfer broke while it ran; starting it again.");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    attempt += 1;
                }
                Err(Upload::Store(e)) => return Err(self.to_io(e)),
                Err(Upload::Local(e)) => return Err(e),
                Ok(()) => return Ok(()),
            }
        }
    }

    /// One multipart upload of a local file (aborted on failure).
    async fn put_file_once(&self, key: &ObjPath, file: &Path) -> Result<(), Upload> {
        let upload = self.inner.put_multipart(key).await.map_err(Upload::Store)?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut f = tokio::fs::File::open(file).await.map_err(Upload::Local)?;
        let mut buf = vec![0u8; 1 << 20];
        let result: Result<(), Upload> = async {
            loop {
                let n = f.read(&mut buf).await.map_err(Upload::Local)?;
                if n == 0 {
                    break;
                }
                // Bounds memory to a few parts in flight.
                w.wait_for_capacity(2).await.map_err(Upload::Store)?;
                w.write(&buf[..n]);
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => w.finish().await.map(|_| ()).map_err(Upload::Store),
            Err(e) => {
                let _ = w.abort().await;
                Err(e)
            }
        }
    }

    /// One download into a temp file beside `file`, renamed into place when whole.
    async fn get_file_once(&self, key: &ObjPath, file: &Path) -> Result<(), Upload> {
        let got = self.inner.get(key).await.map_err(Upload::Store)?;
        let local = Upload::Local;
        let dir = file
            .parent()
            .ok_or_else(|| local(io::Error::other("no parent")))?;
        tokio::fs::create_dir_all(dir).await.map_err(local)?;
        // Unique per process and call: two workers may fetch the same media into one folder.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{}.tmp-{}-{}",
            file.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut out = tokio::fs::File::create(&tmp).await.map_err(local)?;
        let mut stream = got.into_stream();
        let copied: Result<(), Upload> = async {
            while let Some(chunk) = stream.try_next().await.map_err(Upload::Store)? {
                out.write_all(&chunk).await.map_err(local)?;
            }
            out.sync_all().await.map_err(local)
        }
        .await;
        if copied.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        copied?;
        tokio::fs::rename(&tmp, file).await.map_err(local)
    }

    /// One page of S3's ListMultipartUploads under the run's prefix, from a marker.
    async fn uploads_page(
        &self,
        s3: &object_store::aws::AmazonS3,
        marker: Option<&(String, String)>,
    ) -> Result<UploadsPage, ListFault> {
        use object_store::signer::{SignedUrlOptions, Signer};
        let prefix = if self.prefix.as_ref().is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let mut query = vec![("uploads", String::new()), ("prefix", prefix)];
        if let Some((key, id)) = marker {
            query.push(("key-marker", key.clone()));
            query.push(("upload-id-marker", id.clone()));
        }
        let options = SignedUrlOptions::new().with_query(query);
        let url = s3
            .signed_url_opts(
                reqwest::Method::GET,
                &ObjPath::from(""),
                Duration::from_secs(300),
                &options,
            )
            .await
            .map_err(|e| ListFault::fatal(self.to_io(e).to_string()))?;
        static CLIENT: std::sync::LazyLock<reqwest::Client> = std::sync::LazyLock::new(|| {
            crate::tls::ensure_provider();
            reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("an HTTP client with default settings")
        });
        // The URL carries the signature and key id: errors are reported without it.
        let sent = CLIENT.get(url).send().await.map_err(ListFault::http)?;
        let status = sent.status();
        let body = sent.text().await.map_err(ListFault::http)?;
        if !status.is_success() {
            let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
            let text = crate::secrets::scrub(&scrub_body(&body), &secrets);
            return Err(ListFault {
                transient: status.is_server_error() || status.as_u16() == 429,
                text: format!("ListMultipartUploads answered {status}: {text}"),
            });
        }
        parse_uploads(&body).map_err(ListFault::fatal)
    }

    fn relative(&self, key: &ObjPath) -> Option<String> {
        let parts: Vec<_> = key.prefix_match(&self.prefix)?.collect();
        Some(
            parts
                .iter()
                .map(|p| p.as_ref())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }
}

#[async_trait]
impl Store for ObjectStoreRun {
    async fn put(&self, path: &str, data: Vec<u8>) -> io::Result<()> {
        let (key, data) = (self.key(path)?, bytes::Bytes::from(data));
        attempts("put", || {
            self.inner.put(&key, PutPayload::from(data.clone()))
        })
        .await
        .map(|_| ())
        .map_err(|e| self.to_io(e))
    }

    async fn put_if_absent(&self, path: &str, data: Vec<u8>) -> io::Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let key = self.key(path)?;
        let data = bytes::Bytes::from(data);
        // A retry here that finds the first try applied is handled like the client's own below.
        let put = || {
            self.inner
                .put_opts(&key, PutPayload::from(data.clone()), opts.clone())
        };
        match attempts("put_if_absent", put).await {
            Ok(_) => Ok(true),
            // The client retries a create whose answer was lost (a 5xx, a timeout); if the first
            // try was applied, the retry finds our own object. Same bytes means it is ours (or a
            // twin's identical commit, which is the same commit).
            Err(object_store::Error::AlreadyExists { .. }) => {
                match attempts("get", || async {
                    self.inner.get(&key).await?.bytes().await
                })
                .await
                {
                    Ok(got) => Ok(got == data),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(self.to_io(e)),
                }
            }
            Err(e) => Err(self.to_io(e)),
        }
    }

    async fn put_file(&self, path: &str, file: &Path) -> io::Result<()> {
        let key = self.key(path)?;
        self.transfer(path, || self.put_file_once(&key, file)).await
    }

    async fn get_file(&self, path: &str, file: &Path) -> io::Result<()> {
        let key = self.key(path)?;
        self.transfer(path, || self.get_file_once(&key, file)).await
    }

    async fn get(&self, path: &str) -> io::Result<Vec<u8>> {
        let key = self.key(path)?;
        let got = attempts("get", || async {
            self.inner.get(&key).await?.bytes().await
        })
        .await
        .map_err(|e| self.to_io(e))?;
        Ok(got.to_vec())
    }

    async fn delete(&self, path: &str) -> io::Result<()> {
        let key = self.key(path)?;
        match attempts("delete", || self.inner.delete(&key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.to_io(e)),
        }
    }

    async fn list_info(&self, prefix: &str) -> io::Result<Vec<ObjectInfo>> {
        let under = if prefix.is_empty() {
            self.prefix.clone()
        } else {
            self.key(prefix.trim_end_matches('/'))?
        };
        // The answer that S3 cuts in the middle most often in practice: a LIST page.
        let metas: Vec<_> = attempts("list", || self.inner.list(Some(&under)).try_collect())
            .await
            .map_err(|e| self.to_io(e))?;
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .filter_map(|m| {
                Some(ObjectInfo {
                    path: self.relative(&m.location)?,
                    size: m.size,
                    modified: m.last_modified.into(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn pending_uploads(&self) -> io::Result<Option<Vec<PendingUpload>>> {
        let Some(s3) = &self.s3 else {
            if self.url.starts_with("memory://") {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: incomplete multipart uploads are listed on s3:// only (on GCS a lifecycle rule removes them; on Azure uncommitted blocks expire after 7 days)",
                    self.url
                ),
            ));
        };
        let mut out = vec![];
        let mut marker = None;
        loop {
            let page = attempts_while(
                "list uploads",
                |f: &ListFault| f.transient,
                || self.uploads_page(s3, marker.as_ref()),
            )
            .await
            .map_err(|f| io::Error::other(format!("{}: {}", self.url, f.text)))?;
            for u in page.uploads {
                let key = ObjPath::from(u.key.as_str());
                if let Some(path) = self.relative(&key).filter(|p| !p.is_empty()) {
                    out.push(PendingUpload {
                        path,
                        id: u.id,
                        initiated: u.initiated,
                    });
                }
            }
            match page.next {
                Some(next) if Some(&next) != marker.as_ref() => marker = Some(next),
                _ => break,
            }
        }
        out.sort_by(|a, b| (&a.path, a.initiated).cmp(&(&b.path, b.initiated)));
        Ok(Some(out))
    }

    async fn abort_upload(&self, upload: &PendingUpload) -> io::Result<()> {
        use object_store::multipart::MultipartStore;
        let Some(s3) = &self.s3 else {
            return Ok(());
        };
        let key = self.key(&upload.path)?;
        match attempts("abort upload", || s3.abort_multipart(&key, &upload.id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.to_io(e)),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (self.key(from)?, self.key(to)?);
        attempts("rename", || self.inner.rename(&from, &to))
            .await
            .map_err(|e| self.to_io(e))
    }

    async fn exists(&self, path: &str) -> io::Result<bool> {
        let key = self.key(path)?;
        match attempts("head", || self.inner.head(&key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.to_io(e)),
        }
    }

    fn location(&self) -> String {
        self.url.clone()
    }

    fn local_path(&self, _path: &str) -> Option<PathBuf> {
        None
    }
}

/// Why listing incomplete uploads failed, and whether trying again may help.
struct ListFault {
    transient: bool,
    text: String,
}

impl ListFault {
    fn fatal(text: String) -> Self {
        Self {
            transient: false,
            text,
        }
    }

    /// A transport fault is worth another try; its text leaves out the signed URL.
    fn http(e: reqwest::Error) -> Self {
        Self {
            transient: e.is_timeout()
                || e.is_connect()
                || e.is_request()
                || e.is_body()
                || e.is_decode(),
            text: e.without_url().to_string(),
        }
    }
}

impl std::fmt::Display for ListFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

struct ListedUpload {
    key: String,
    id: String,
    initiated: std::time::SystemTime,
}

struct UploadsPage {
    uploads: Vec<ListedUpload>,
    /// (key-marker, upload-id-marker) of the next page, when the answer was truncated.
    next: Option<(String, String)>,
}

/// Reads a ListMultipartUploadsResult (the elements we use; keys are not URL-encoded, since we
/// do not ask for `encoding-type`).
fn parse_uploads(xml: &str) -> Result<UploadsPage, String> {
    static UPLOAD: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?s)<Upload>(.*?)</Upload>").expect("valid regex")
    });
    if !xml.contains("<ListMultipartUploadsResult") {
        let start: String = xml.chars().take(200).collect();
        return Err(format!("not a ListMultipartUploads answer: {start:?}"));
    }
    let field = |within: &str, name: &str| -> Option<String> {
        let open = format!("<{name}>");
        let from = within.find(&open)? + open.len();
        let to = within[from..].find(&format!("</{name}>"))? + from;
        Some(unescape_xml(&within[from..to]))
    };
    let mut uploads = vec![];
    for m in UPLOAD.captures_iter(xml) {
        let u = &m[1];
        let (Some(key), Some(id), Some(at)) =
            (field(u, "Key"), field(u, "UploadId"), field(u, "Initiated"))
        else {
            return Err(format!(
                "an <Upload> without Key, UploadId or Initiated: {u:?}"
            ));
        };
        let initiated = chrono::DateTime::parse_from_rfc3339(&at)
            .map_err(|e| format!("upload {key}: Initiated {at:?}: {e}"))?;
        uploads.push(ListedUpload {
            key,
            id,
            initiated: initiated.with_timezone(&chrono::Utc).into(),
        });
    }
    let truncated = field(xml, "IsTruncated").is_some_and(|t| t == "true");
    let next = match (truncated, field(xml, "NextKeyMarker")) {
        (true, Some(key)) => Some((key, field(xml, "NextUploadIdMarker").unwrap_or_default())),
        (true, None) => return Err("a truncated answer without NextKeyMarker".into()),
        (false, _) => None,
    };
    Ok(UploadsPage { uploads, next })
}

fn unescape_xml(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_speaks_the_store_contract() {
        let store = Arc::new(ObjectStoreRun::open("memory://bucket/runs/a").unwrap());
        store
            .put("probe/part-00000.parquet", b"x".to_vec())
            .await
            .unwrap();
        assert!(
            store
                .put_if_absent("probe/part-00001.parquet", b"1".to_vec())
                .await
                .unwrap()
        );
        assert!(
            !store
                .put_if_absent("probe/part-00001.parquet", b"2".to_vec())
                .await
                .unwrap()
        );
        // A retried create that finds its own bytes has won (the first try was applied).
        assert!(
            store
                .put_if_absent("probe/part-00001.parquet", b"1".to_vec())
                .await
                .unwrap()
        );
        assert_eq!(store.get("probe/part-00001.parquet").await.unwrap(), b"1");
        assert_eq!(
            store.list("probe").await.unwrap(),
            vec!["probe/part-00000.parquet", "probe/part-00001.parquet"]
        );
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..(PART_SIZE * 2 + 123))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(dir.path().join("in.mp4"), &big).unwrap();
        store
            .put_file("media/x.mp4", &dir.path().join("in.mp4"))
            .await
            .unwrap();
        store
            .get_file("media/x.mp4", &dir.path().join("out/x.mp4"))
            .await
            .unwrap();
        assert_eq!(std::fs::read(dir.path().join("out/x.mp4")).unwrap(), big);
        store.delete("media/x.mp4").await.unwrap();
        store.delete("media/x.mp4").await.unwrap();
        assert!(!store.exists("media/x.mp4").await.unwrap());
        assert!(store.get("nothing").await.unwrap_err().kind() == io::ErrorKind::NotFound);
    }

    #[test]
    fn uploads_answers_parse_with_their_next_page() {
        // The shape of AWS's documented example answer, truncated after two uploads.
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
            <Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>\
            <NextKeyMarker>runs/a/media/x&amp;y.mp4</NextKeyMarker><NextUploadIdMarker>id-2</NextUploadIdMarker>\
            <MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>\
            <Upload><Key>runs/a/media/w.mp4</Key><UploadId>id-1</UploadId><Initiator><ID>i</ID></Initiator>\
            <StorageClass>STANDARD</StorageClass><Initiated>2026-12-03T10:00:00.000Z</Initiated></Upload>\
            <Upload><Key>runs/a/media/x&amp;y.mp4</Key><UploadId>id-2</UploadId>\
            <Initiated>2026-12-03T11:30:00.000Z</Initiated></Upload></ListMultipartUploadsResult>";
        let page = parse_uploads(xml).unwrap();
        assert_eq!(page.uploads.len(), 2);
        assert_eq!(page.uploads[1].key, "runs/a/media/x&y.mp4");
        assert_eq!(page.uploads[1].id, "id-2");
        let secs =
            |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(
            secs(page.uploads[1].initiated) - secs(page.uploads[0].initiated),
            5400
        );
        assert_eq!(
            page.next,
            Some(("runs/a/media/x&y.mp4".to_string(), "id-2".to_string()))
        );
        let last = xml.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(parse_uploads(&last).unwrap().next, None);
        assert!(parse_uploads("<Error><Code>AccessDenied</Code></Error>").is_err());
        assert!(parse_uploads(&xml.replace("<UploadId>id-1</UploadId>", "")).is_err());
    }

    #[test]
    fn s3_error_bodies_lose_what_names_the_key() {
        let body = "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIAVIDCURATE0TEST01</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256\n20261201T000000Z\n20261201/us-east-1/s3/aws4_request\nabc</StringToSign>\
            <CanonicalRequest>PUT\n/b/k\n</CanonicalRequest><HostId>h</HostId></Error> (key AKIAVIDCURATE0TEST01)";
        let out = scrub_body(body);
        assert!(!out.contains("AKIAVIDCURATE0TEST01"), "{out}");
        assert!(!out.contains("aws4_request"), "{out}");
        assert!(out.contains("<Code>SignatureDoesNotMatch</Code>"), "{out}");
        assert!(
            out.contains("<AWSAccessKeyId>***</AWSAccessKeyId>"),
            "{out}"
        );
    }
}
