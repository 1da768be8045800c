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

mod retry;
#[cfg(test)]
mod tests;
mod uploads;

use super::{ObjectInfo, PendingUpload, Store};
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use retry::{BODY_ATTEMPTS, attempts, attempts_while, unretried_transport_fault};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uploads::ListFault;

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
        Ok(super::checked(path)?
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
        let dir = super::parent(file).map_err(local)?;
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
    fn relative(&self, key: &ObjPath) -> Option<String> {
        let parts: Vec<String> = key
            .prefix_match(&self.prefix)?
            .map(|p| p.as_ref().to_string())
            .collect();
        Some(parts.join("/"))
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
            Err(object_store::Error::AlreadyExists { .. }) => match self.get(path).await {
                Ok(got) => Ok(got == data),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
            },
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
