//! What `vidcurate rehydrate RELEASE [--out DIR]` does: fetches a release's videos again from the URLs its
//! `manifest.parquet` lists, with the download stage's own fetcher, and says which are still
//! there as released, which changed and which vanished.
//!
//! Reads: `croissant.json` (the folder must be as released), `manifest.parquet`. Calls: each
//! URL (HTTP, or yt-dlp for YouTube with `--youtube`). Writes: the media into `--out` when given
//! (`<video_id>.<ext>`), else nothing (a temporary folder, deleted).

use crate::error::RunError;
use crate::release::availability::{self, ManifestRow};
use crate::stages::download::{DownloadConfig, fetch_detached};
use futures::StreamExt;
use std::path::Path;

/// What became of one video.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Checked {
    pub video_id: String,
    pub split: String,
    pub url: Option<String>,
    pub status: &'static str,
    pub detail: String,
    pub expected_sha256: Option<String>,
    pub sha256: Option<String>,
    pub expected_duration_secs: Option<f64>,
    pub duration_secs: Option<f64>,
}

/// How `rehydrate` fetches and compares (its command-line flags).
pub struct Options<'a> {
    pub out: Option<&'a Path>,
    pub youtube: bool,
    pub yt_dlp: &'a Path,
    pub yt_dlp_hosts: &'a [String],
    pub jobs: usize,
    pub duration_tolerance_secs: f64,
}

/// Fetches every video `release`'s manifest lists and compares it with its row, in the
/// manifest's order. A release folder changed after release is refused.
pub fn rehydrate(release: &Path, o: &Options) -> Result<Vec<Checked>, RunError> {
    let rows = availability::read_manifest(release)?;
    crate::release::integrity::verify(release)
        .map_err(|e| RunError::Config(format!("{}: refused: {e}", release.display())))?;
    let cfg: DownloadConfig = serde_json::from_value(serde_json::json!({
        "youtube": o.youtube,
        "yt_dlp": o.yt_dlp,
        "yt_dlp_hosts": o.yt_dlp_hosts,
    }))
    .map_err(|e| RunError::Internal(format!("download settings: {e}")))?;
    let work = tempfile::tempdir().map_err(|e| RunError::io("temporary folder", e))?;
    if let Some(out) = o.out {
        std::fs::create_dir_all(out).map_err(crate::error::io(out))?;
    }
    Ok(crate::runtime::tokio_runtime()?.block_on(async {
        let mut all: Vec<(usize, Checked)> = futures::stream::iter(rows.iter().enumerate())
            .map(|(i, row)| {
                let (cfg, dir) = (cfg.clone(), work.path().join(i.to_string()));
                let (out, tol) = (o.out, o.duration_tolerance_secs);
                async move { (i, check(row, cfg, &dir, out, tol).await) }
            })
            .buffer_unordered(o.jobs.max(1))
            .collect()
            .await;
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, c)| c).collect::<Vec<_>>()
    }))
}

/// Fetches one video and compares it with its manifest row.
async fn check(
    row: &ManifestRow,
    cfg: DownloadConfig,
    work: &Path,
    out: Option<&Path>,
    tolerance: f64,
) -> Checked {
    let mut c = Checked {
        video_id: row.video_id.clone(),
        split: row.split.clone(),
        url: row.url.clone(),
        status: "present",
        detail: String::new(),
        expected_sha256: row.media_sha256.clone(),
        sha256: None,
        expected_duration_secs: row.duration_secs,
        duration_secs: None,
    };
    let Some(url) = &row.url else {
        (c.status, c.detail) = ("not_checked", "the manifest has no URL for it".into());
        return c;
    };
    let got = match fetch_detached(cfg, &row.video_id, url, work).await {
        Ok(d) => d,
        Err(e) => {
            c.status = vanished(&e.reason, &e.detail);
            c.detail = if e.reason == "youtube_download_off" {
                "a YouTube URL: pass --youtube if YouTube's terms allow downloading it".into()
            } else {
                e.detail
            };
            return c;
        }
    };
    let file = work.join(&got.path);
    let probed = {
        let f = file.clone();
        tokio::task::spawn_blocking(move || {
            let sha = crate::release::integrity::sha256_file(&f).map_err(|e| e.to_string());
            let secs = crate::engines::ffmpeg::probe(&f).map(|p| p.duration_secs);
            (sha, secs)
        })
        .await
    };
    let (sha, secs) = match probed {
        Ok(x) => x,
        Err(e) => {
            (c.status, c.detail) = ("unreachable", e.to_string());
            return c;
        }
    };
    c.sha256 = sha.as_ref().ok().cloned();
    c.duration_secs = secs.as_ref().ok().copied();
    compare(&mut c, &secs, tolerance);
    if let Some(out) = out {
        keep(&mut c, &file, out, &row.video_id);
    }
    c
}

/// Sets `changed` when the checksum or the duration differ from the manifest's.
fn compare(c: &mut Checked, secs: &Result<f64, crate::error::StageError>, tolerance: f64) {
    let mut differs = vec![];
    if let (Some(want), Some(have)) = (&c.expected_sha256, &c.sha256)
        && want != have
    {
        differs.push("sha256".to_string());
    }
    match (c.expected_duration_secs, secs) {
        (Some(want), Ok(have)) if (want - have).abs() > tolerance => {
            differs.push(format!("duration {have:.3} s, was {want:.3} s"))
        }
        (Some(_), Err(e)) => differs.push(format!("not a readable video: {}", e.detail)),
        _ => {}
    }
    if !differs.is_empty() {
        (c.status, c.detail) = ("changed", differs.join("; "));
    } else if c.expected_sha256.is_none() {
        c.detail = "no checksum in the manifest: duration compared only".into();
    }
}

/// Moves (or copies) the fetched file to `out` as `<video_id>.<ext>`; a failure is noted.
fn keep(c: &mut Checked, file: &Path, out: &Path, video_id: &str) {
    let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("bin");
    let dest = out.join(format!("{video_id}.{ext}"));
    if std::fs::rename(file, &dest).is_err()
        && let Err(e) = std::fs::copy(file, &dest)
    {
        c.detail += &format!(" (not kept: {}: {e})", dest.display());
    }
}

/// The status a failed fetch means: the status code or yt-dlp's words say whether the video is
/// gone for good, hidden, or only out of reach now.
fn vanished(reason: &str, detail: &str) -> &'static str {
    let d = detail.to_ascii_lowercase();
    let http = d
        .split("http ")
        .nth(1)
        .and_then(|r| r.get(..3))
        .and_then(|n| n.parse::<u16>().ok());
    match (reason, http) {
        ("youtube_download_off" | "unsupported_url", _) => "not_checked",
        (_, Some(404)) => "not_found",
        (_, Some(401 | 403)) => "private",
        (_, Some(410 | 451)) => "removed",
        _ if d.contains("private video") => "private",
        _ if d.contains("removed")
            || d.contains("terminated")
            || d.contains("no longer available") =>
        {
            "removed"
        }
        _ if d.contains("video unavailable") || d.contains("does not exist") => "not_found",
        _ => "unreachable",
    }
}

/// The table (or one JSON object per video) and the count per status.
pub fn render(checked: &[Checked], json: bool) -> String {
    let mut out = String::new();
    if json {
        for c in checked {
            out += &serde_json::to_string(c).expect("plain values serialise");
            out += "\n";
        }
        return out;
    }
    out += &format!(
        "{:<24} {:<12} {:<12} detail\n",
        "video_id", "split", "status"
    );
    for c in checked {
        out += &format!(
            "{:<24} {:<12} {:<12} {}\n",
            c.video_id, c.split, c.status, c.detail
        );
    }
    let mut counts = std::collections::BTreeMap::new();
    for c in checked {
        *counts.entry(c.status).or_insert(0usize) += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    out += &format!("{} videos: {}\n", checked.len(), parts.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::vanished;

    #[test]
    fn failures_are_told_apart() {
        for (reason, detail, want) in [
            (
                "http_status",
                "http://h/a.mp4: HTTP 404 Not Found",
                "not_found",
            ),
            ("http_status", "http://h/a.mp4: HTTP 410 Gone", "removed"),
            ("http_status", "u: HTTP 403 Forbidden", "private"),
            (
                "http_status",
                "u: HTTP 503 Service Unavailable",
                "unreachable",
            ),
            (
                "yt_dlp_failed",
                "u: yt-dlp exit 1: ERROR: [youtube] x: Private video. Sign in",
                "private",
            ),
            (
                "yt_dlp_failed",
                "u: yt-dlp exit 1: ERROR: [youtube] x: This video has been removed by the uploader",
                "removed",
            ),
            ("http_error", "u: connection refused", "unreachable"),
            ("youtube_download_off", "", "not_checked"),
        ] {
            assert_eq!(vanished(reason, detail), want, "{reason}: {detail}");
        }
    }
}
