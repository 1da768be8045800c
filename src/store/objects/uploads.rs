//! Listing the incomplete multipart uploads of an S3 run directory: S3's ListMultipartUploads,
//! sent as a URL the crate signs, and its XML answer.

use super::{ObjectStoreRun, scrub_body};
use object_store::path::Path as ObjPath;
use std::time::Duration;

impl ObjectStoreRun {
    /// One page of S3's ListMultipartUploads under the run's prefix, from a marker.
    pub(super) async fn uploads_page(
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
        parse_uploads(&body).map_err(|e| ListFault::fatal(e.to_string()))
    }
}

/// Why listing incomplete uploads failed, and whether trying again may help.
pub(super) struct ListFault {
    pub(super) transient: bool,
    pub(super) text: String,
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

pub(super) struct ListedUpload {
    pub(super) key: String,
    pub(super) id: String,
    pub(super) initiated: std::time::SystemTime,
}

pub(super) struct UploadsPage {
    pub(super) uploads: Vec<ListedUpload>,
    /// (key-marker, upload-id-marker) of the next page, when the answer was truncated.
    pub(super) next: Option<(String, String)>,
}

/// Why an answer to ListMultipartUploads could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum UploadsError {
    /// Not the answer asked for (its first 200 characters).
    #[error("not a ListMultipartUploads answer: {0:?}")]
    NotAListing(String),
    #[error("an <Upload> without Key, UploadId or Initiated: {0:?}")]
    IncompleteUpload(String),
    #[error("upload {key}: Initiated {at:?}: {error}")]
    Initiated {
        key: String,
        at: String,
        error: chrono::ParseError,
    },
    #[error("a truncated answer without NextKeyMarker")]
    NoNextKeyMarker,
}

/// Reads a ListMultipartUploadsResult (the elements we use; keys are not URL-encoded, since we
/// do not ask for `encoding-type`).
pub(super) fn parse_uploads(xml: &str) -> Result<UploadsPage, UploadsError> {
    static UPLOAD: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?s)<Upload>(.*?)</Upload>").expect("valid regex")
    });
    if !xml.contains("<ListMultipartUploadsResult") {
        let start: String = xml.chars().take(200).collect();
        return Err(UploadsError::NotAListing(start));
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
            return Err(UploadsError::IncompleteUpload(u.to_string()));
        };
        let initiated =
            chrono::DateTime::parse_from_rfc3339(&at).map_err(|error| UploadsError::Initiated {
                key: key.clone(),
                at: at.clone(),
                error,
            })?;
        uploads.push(ListedUpload {
            key,
            id,
            initiated: initiated.with_timezone(&chrono::Utc).into(),
        });
    }
    let truncated = field(xml, "IsTruncated").is_some_and(|t| t == "true");
    let next = match (truncated, field(xml, "NextKeyMarker")) {
        (true, Some(key)) => Some((key, field(xml, "NextUploadIdMarker").unwrap_or_default())),
        (true, None) => return Err(UploadsError::NoNextKeyMarker),
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
