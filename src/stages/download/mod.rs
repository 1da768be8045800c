//! `download` stage: fetches each video's media into the run's content-addressed store.
//!
//! Reads: the source's `url` (a YouTube watch page or a direct HTTP(S) link) or its local `path`.
//! Calls: `yt-dlp` for YouTube (only with `youtube = true`: downloading from YouTube is subject
//! to its terms, so it is opt-in), run without a shell, `--` before the URL, with a format cap,
//! `--max-filesize` and a time limit; reqwest for direct links, resuming a partial file with a
//! Range request. Writes: `media/objects/<2 hex>/<blake3>.<ext>` (the same bytes are stored once
//! whatever their URL) and the `download` table: url, method, path, size, BLAKE3, content type.
//! With `captions = true`, yt-dlp also writes the captions as json3, kept beside the object as
//! `<blake3>.<lang>.json3` for the `transcript` stage. Local files are used where they are
//! (nothing copied). Caches: the table itself (a finished
//! video is never fetched again) and partial files under `media/partial/` (a crash resumes).
//! Every failure (HTTP status, size cap, yt-dlp error, timeout) is a reject row. On an
//! object-store run the file is written in the local work folder, then uploaded to the store
//! (multipart, streamed); later stages fetch it back when their machine lacks it.

mod ytdlp;

use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::{MediaFile, Slot, VideoRecord};
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use crate::stages::{Built, compute_settings, no_select};
use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownloadConfig {
    /// Fetch YouTube watch pages with yt-dlp. Off by default: downloading from YouTube is subject
    /// to YouTube's terms of service; turn it on only where you may.
    #[serde(default)]
    pub youtube: bool,
    /// The yt-dlp program (a relative path resolves against the pipeline file; a bare name is
    /// looked up on PATH). scripts/setup.sh installs it in data/venv-tools.
    #[serde(default = "default_ytdlp")]
    pub yt_dlp: PathBuf,
    /// yt-dlp format selection: at most 720p, video+audio merged when separate.
    #[serde(default = "default_format")]
    pub format: String,
    /// Other hosts to fetch with yt-dlp rather than as direct links (sites yt-dlp supports,
    /// e.g. "vimeo.com"); a host matches itself and its subdomains.
    #[serde(default)]
    pub yt_dlp_hosts: Vec<String>,
    /// Larger media is rejected (`too_large`), whatever the method.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Time limit of one download (yt-dlp is killed when it passes).
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// With yt-dlp, also fetch the video's captions (uploaded and automatic) as json3 and keep
    /// them beside the media (`<media>.<lang>.json3`), where the `transcript` stage uses them
    /// before paying for speech recognition. Left out of the settings when off, so turning it
    /// on redoes the downloads and an old run without it keeps its fingerprint.
    #[serde(default, skip_serializing_if = "is_false")]
    pub captions: bool,
    /// Caption languages for yt-dlp's `--sub-langs` (regular expressions; `-` excludes).
    #[serde(
        default = "default_sub_langs",
        skip_serializing_if = "is_default_sub_langs"
    )]
    pub sub_langs: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn default_sub_langs() -> Vec<String> {
    vec!["en.*".into(), "-live_chat".into()]
}
fn is_default_sub_langs(v: &[String]) -> bool {
    *v == default_sub_langs()
}

fn default_ytdlp() -> PathBuf {
    PathBuf::from("yt-dlp")
}
fn default_format() -> String {
    "bv*[height<=?720]+ba/b[height<=?720]/b".into()
}
fn default_max_bytes() -> u64 {
    2_000_000_000
}
fn default_timeout() -> u64 {
    1800
}

/// One downloaded (or found) media file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Download {
    pub url: Option<String>,
    /// "yt-dlp", "http" or "local".
    pub method: String,
    /// Relative to the run directory for stored objects; absolute for local files.
    pub path: String,
    pub size_bytes: u64,
    /// BLAKE3 of the bytes (stored objects only).
    pub blake3: Option<String>,
    pub content_type: Option<String>,
}

pub struct DownloadStage {
    cfg: DownloadConfig,
    ytdlp: PathBuf,
    http: reqwest::Client,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "download",
    about: "media into the run's content-addressed store: direct links (resumable), YouTube via yt-dlp (opt-in), local files as they are",
    build,
    reselect: None,
    summary: None,
    release: crate::stages::Release::Columns(&["url", "blake3", "size_bytes", "content_type"]),
    keys: &[("compute", crate::config::keys_of::<DownloadConfig>)],
};

pub fn build(
    common: &StageCommon,
    compute_at: &[Seg],
    select_at: &[Seg],
    bcx: &BuildCx,
) -> Result<Built, ConfigError> {
    no_select(common, select_at, bcx)?;
    let (cfg, mut json): (DownloadConfig, _) = compute_settings(common, compute_at, bcx)?;
    let ytdlp = if cfg.yt_dlp.components().count() > 1 {
        bcx.resolve(&cfg.yt_dlp)
    } else {
        cfg.yt_dlp.clone()
    };
    // Where yt-dlp lives does not change what it downloads.
    if let Some(o) = json.as_object_mut() {
        o.remove("yt_dlp");
        o.remove("timeout_secs");
    }
    let http =
        http_client().map_err(|e| bcx.src.error_at(compute_at, format!("HTTP client: {e}")))?;
    Ok(Built {
        task: super::processor_task(DownloadStage { cfg, ytdlp, http }),
        compute: json,
        version: 1,
        default_in_flight: 4,
    })
}

/// The client of direct links, for the stage and for `fetch_detached` alike.
fn http_client() -> reqwest::Result<reqwest::Client> {
    crate::tls::ensure_provider();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .user_agent(concat!("vidcurate/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Fetches one video's `url` as the stage would (yt-dlp for YouTube and `yt_dlp_hosts`, HTTP
/// otherwise), outside a run: `work` stands in for the run directory and receives the object.
/// `vidcurate rehydrate` checks a release's media with it, so a fetch there fails exactly as it
/// would in a run (the same status codes, the same YouTube opt-in).
pub async fn fetch_detached(
    cfg: DownloadConfig,
    video_id: &str,
    url: &str,
    work: &Path,
) -> Result<Download, StageError> {
    let http = http_client().map_err(|e| StageError::internal("http_client", e.to_string()))?;
    let ytdlp = cfg.yt_dlp.clone();
    let stage = DownloadStage { cfg, ytdlp, http };
    let cx = StageContext::detached(work).map_err(media_store)?;
    let source = crate::record::SourceInfo {
        url: Some(url.to_string()),
        ..Default::default()
    };
    let rec = VideoRecord::new(video_id.to_string(), source, vec![]);
    let mut rows = stage.process(&rec, &cx).await?;
    rows.pop()
        .ok_or_else(|| StageError::internal("no_media", format!("{url}: nothing fetched")))
}

pub(crate) fn is_youtube(url: &str) -> bool {
    host_in(url, &["youtube.com", "youtu.be"])
}

/// Is the URL's host one of `hosts` or a subdomain of one?
fn host_in(url: &str, hosts: &[&str]) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split(['/', '?', '#']).next())
        .unwrap_or("")
        .to_ascii_lowercase();
    let host = host.rsplit('@').next().unwrap_or("");
    let host = host.split(':').next().unwrap_or("");
    hosts
        .iter()
        .any(|h| host == *h || host.ends_with(&format!(".{h}")))
}

/// Extension for the stored object: from the file name, else from the content type.
fn extension(name: &str, content_type: Option<&str>) -> String {
    let from_name = Path::new(name.split(['?', '#']).next().unwrap_or(""))
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .filter(|e| e.len() <= 5 && e.chars().all(|c| c.is_ascii_alphanumeric()));
    from_name.unwrap_or_else(|| {
        match content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
        {
            "video/mp4" => "mp4",
            "video/webm" => "webm",
            "video/x-matroska" => "mkv",
            "video/quicktime" => "mov",
            _ => "bin",
        }
        .to_string()
    })
}

/// Hashes `file` and moves it to `media/objects/<h2>/<h>.<ext>`; returns the relative path.
fn store_object(
    run_dir: &Path,
    file: &Path,
    ext: &str,
) -> Result<(String, u64, String), StageError> {
    let io = |e: std::io::Error| media_store(format!("{}: {e}", file.display()));
    let mut h = blake3::Hasher::new();
    h.update_reader(std::fs::File::open(file).map_err(io)?)
        .map_err(io)?;
    let hash = h.finalize().to_hex().to_string();
    let rel = format!("media/objects/{}/{hash}.{ext}", &hash[..2]);
    let dest = run_dir.join(&rel);
    std::fs::create_dir_all(dest.parent().expect("has parent")).map_err(io)?;
    let size = std::fs::metadata(file).map_err(io)?.len();
    if dest.exists() {
        // Same bytes already stored (another URL, an earlier run).
        std::fs::remove_file(file).map_err(io)?;
    } else {
        std::fs::rename(file, &dest).map_err(io)?;
    }
    Ok((rel, size, hash))
}

/// The partial file a direct link downloads into (`media/partial/`, one per video and URL), so
/// a crash resumes it.
async fn partial_file(
    url: &str,
    rec: &VideoRecord,
    cx: &StageContext,
) -> Result<PathBuf, StageError> {
    let partial_dir = cx.run_dir.join("media").join("partial");
    tokio::fs::create_dir_all(&partial_dir)
        .await
        .map_err(media_store)?;
    let key = &blake3::hash(url.as_bytes()).to_hex()[..16];
    Ok(partial_dir.join(format!("{}-{key}.part", rec.video_id)))
}

/// A failure to keep media in the run's store: the stage's, not the video's.
fn media_store(e: impl std::fmt::Display) -> StageError {
    StageError::internal("media_store", e.to_string())
}

/// A failed request or body read (worth a retry), without the URL reqwest would repeat.
fn http_error(url: &str, e: reqwest::Error) -> StageError {
    StageError::external("http_error", format!("{url}: {}", e.without_url()))
}

/// A reject for an HTTP error status (`external` when retrying may help); 416 on a resumed
/// download means the partial file is already whole.
fn check_status(url: &str, status: reqwest::StatusCode, have: u64) -> Result<(), StageError> {
    if status.as_u16() == 416 && have > 0 {
        // The partial file is already whole.
    } else if !status.is_success() {
        let kind = if status.is_server_error() || status.as_u16() == 429 {
            StageError::external
        } else {
            StageError::data
        };
        return Err(kind("http_status", format!("{url}: HTTP {status}")));
    }
    Ok(())
}

impl DownloadStage {
    async fn http(
        &self,
        url: &str,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Download, StageError> {
        let part = partial_file(url, rec, cx).await?;
        let have = tokio::fs::metadata(&part)
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        let mut req = self.http.get(url);
        if have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let resp = req.send().await.map_err(|e| http_error(url, e))?;
        let status = resp.status();
        check_status(url, status, have)?;
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let resumed = status.as_u16() == 206;
        let total = if resumed { have } else { 0 } + resp.content_length().unwrap_or(0);
        if total > self.cfg.max_bytes {
            return Err(StageError::data(
                "too_large",
                format!(
                    "{url}: {total} bytes, over max_bytes {}",
                    self.cfg.max_bytes
                ),
            ));
        }
        if status.as_u16() != 416 {
            let written = if resumed { have } else { 0 };
            self.write_body(url, resp, &part, resumed, written).await?;
        }
        let ext = extension(url, content_type.as_deref());
        let run_dir = cx.run_dir.clone();
        let (path, size, hash) = cx
            .cpu
            .run(move || store_object(&run_dir, &part, &ext))
            .await?;
        cx.keep_media(&path).await?;
        Ok(Download {
            url: Some(url.to_string()),
            method: "http".into(),
            path,
            size_bytes: size,
            blake3: Some(hash),
            content_type,
        })
    }

    /// Streams `resp`'s body into `part` (appended when `resumed`, `written` bytes already
    /// there), removing it once it grows over `max_bytes`.
    async fn write_body(
        &self,
        url: &str,
        resp: reqwest::Response,
        part: &Path,
        resumed: bool,
        mut written: u64,
    ) -> Result<(), StageError> {
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumed)
            .truncate(!resumed)
            .open(part)
            .await
            .map_err(media_store)?;
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| http_error(url, e))?;
            written += chunk.len() as u64;
            if written > self.cfg.max_bytes {
                drop(f);
                let _ = tokio::fs::remove_file(part).await;
                return Err(StageError::data(
                    "too_large",
                    format!("{url}: over max_bytes {}", self.cfg.max_bytes),
                ));
            }
            f.write_all(&chunk).await.map_err(media_store)?;
        }
        f.sync_all().await.map_err(media_store)
    }
}

#[async_trait]
impl Processor for DownloadStage {
    type Row = Download;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Source]
    }
    fn provides(&self) -> Slot {
        Slot::Media
    }

    fn refuses(&self, rec: &VideoRecord) -> Option<StageError> {
        let url = rec.source.url.as_deref().filter(|_| rec.media.is_none())?;
        (is_youtube(url) && !self.cfg.youtube).then(|| {
            StageError::data(
                "youtube_download_off",
                "downloading from YouTube is off: set compute.youtube = true in the download stage if YouTube's terms allow it for your use",
            )
        })
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<Download>, StageError> {
        if let Some(m) = &rec.media {
            return Ok(vec![Download {
                url: rec.source.url.clone(),
                method: "local".into(),
                path: m.path.clone(),
                size_bytes: m.size_bytes,
                blake3: None,
                content_type: None,
            }]);
        }
        let Some(url) = rec.source.url.as_deref() else {
            return Err(StageError::data(
                "no_url",
                "the source gave neither a file nor a URL",
            ));
        };
        if let Some(e) = self.refuses(rec) {
            return Err(e);
        }
        if is_youtube(url) {
            return self.ytdlp(url, rec, cx).await.map(|d| vec![d]);
        }
        let extra: Vec<&str> = self.cfg.yt_dlp_hosts.iter().map(String::as_str).collect();
        if host_in(url, &extra) {
            return self.ytdlp(url, rec, cx).await.map(|d| vec![d]);
        }
        if url.starts_with("http://") || url.starts_with("https://") {
            return self.http(url, rec, cx).await.map(|d| vec![d]);
        }
        Err(StageError::data(
            "unsupported_url",
            format!("{url}: not http(s)"),
        ))
    }

    fn attach(rec: &mut VideoRecord, mut rows: Vec<Download>) {
        rec.media = rows.pop().map(|d| MediaFile {
            path: d.path,
            size_bytes: d.size_bytes,
            blake3: d.blake3,
            hashed: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn youtube_hosts_and_extensions() {
        assert!(is_youtube("https://www.youtube.com/watch?v=abc"));
        assert!(is_youtube("https://youtu.be/abc"));
        assert!(is_youtube("https://m.youtube.com/watch?v=abc"));
        assert!(!is_youtube("https://notyoutube.com/watch?v=abc"));
        assert!(!is_youtube("http://127.0.0.1:8080/youtube.com/a.mp4"));
        assert_eq!(extension("http://h/a/clip.MP4?x=1", None), "mp4");
        assert_eq!(
            extension("http://h/a/clip", Some("video/webm; codecs=vp9")),
            "webm"
        );
        assert_eq!(extension("http://h/", None), "bin");
    }
}
