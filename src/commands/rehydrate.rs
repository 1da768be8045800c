//! `vidcurate rehydrate RELEASE [--out DIR]`: fetches a release's videos again from the URLs its
//! `manifest.parquet` lists, with the download stage's own fetcher, and says which are still
//! there as released, which changed and which vanished.
//!
//! Reads: `croissant.json` (the folder must be as released), `manifest.parquet`. Calls: each
//! URL (HTTP, or yt-dlp for YouTube with `--youtube`). Writes: the media into `--out` when given
//! (`<video_id>.<ext>`), else nothing (a temporary folder, deleted).

use crate::error::{Exit, RunError};
use crate::release::availability::{self, ManifestRow};
use crate::stages::download::{DownloadConfig, fetch_detached};
use futures::StreamExt;
use std::path::{Path, PathBuf};

/// Fetch a release's videos again and check them against its manifest.
///
/// For every row of manifest.parquet: the URL is fetched as the run's download stage fetched
/// it (a direct link over HTTP, a YouTube or --yt-dlp-host page through yt-dlp), its SHA-256
/// compared with `media_sha256` and its duration (ffmpeg's container duration) with
/// `duration_secs`. Statuses: present (same bytes), changed (another checksum or duration: a
/// re-encode, a replaced upload), not_found (HTTP 404, "does not exist"), private (401/403,
/// "Private video"), removed (410, 451, taken down by the uploader or the platform),
/// unreachable (a timeout, a 5xx: try again later), not_checked (no URL; a YouTube URL without
/// --youtube).
///
/// The release folder must be as released: its files are checked against croissant.json's
/// SHA-256s first, and a changed file is named and refused.
///
/// Exit codes: 0 every video present and equal; 1 some changed, vanished or not checked (the
/// table lists them); 2 bad input (no manifest.parquet, a file changed after release).
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vidcurate rehydrate data/releases/demo\n  vidcurate rehydrate data/releases/demo --out media/ --youtube --json > availability.json\n\nDownloading from YouTube is subject to its terms of service: --youtube is off unless you pass it."
)]
pub struct Args {
    /// The release folder (`vidcurate release --out`).
    pub release: PathBuf,
    /// Keep the fetched media here as `<video_id>.<ext>` (created); without it they are
    /// checked and deleted.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// One JSON object per video on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Fetch YouTube pages with yt-dlp, as the download stage's `youtube = true` does.
    #[arg(long)]
    pub youtube: bool,
    /// The yt-dlp program (scripts/setup.sh installs it in data/venv-tools).
    #[arg(long, default_value = "yt-dlp")]
    pub yt_dlp: PathBuf,
    /// Other hosts to fetch with yt-dlp (the download stage's `yt_dlp_hosts`).
    #[arg(long, value_name = "HOST")]
    pub yt_dlp_hosts: Vec<String>,
    /// Videos fetched at once.
    #[arg(long, default_value_t = 4)]
    pub jobs: usize,
    /// How far a duration may be from the manifest's and count as equal (seconds).
    #[arg(long, default_value_t = 0.05)]
    pub duration_tolerance_secs: f64,
}

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

pub fn run(a: Args) -> Result<Exit, RunError> {
    let rows = availability::read_manifest(&a.release)?;
    crate::release::integrity::verify(&a.release)
        .map_err(|e| RunError::Config(format!("{}: refused: {e}", a.release.display())))?;
    let cfg: DownloadConfig = serde_json::from_value(serde_json::json!({
        "youtube": a.youtube,
        "yt_dlp": a.yt_dlp,
        "yt_dlp_hosts": a.yt_dlp_hosts,
    }))
    .map_err(|e| RunError::Internal(format!("download settings: {e}")))?;
    let work = tempfile::tempdir().map_err(|e| RunError::io("temporary folder", e))?;
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).map_err(|e| RunError::io(out.display().to_string(), e))?;
    }
    let checked = super::tokio_runtime()?.block_on(async {
        let mut all: Vec<(usize, Checked)> = futures::stream::iter(rows.iter().enumerate())
            .map(|(i, row)| {
                let (cfg, dir) = (cfg.clone(), work.path().join(i.to_string()));
                let (out, tol) = (a.out.clone(), a.duration_tolerance_secs);
                async move { (i, check(row, cfg, &dir, out.as_deref(), tol).await) }
            })
            .buffer_unordered(a.jobs.max(1))
            .collect()
            .await;
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, c)| c).collect::<Vec<_>>()
    });
    print(&checked, a.json);
    Ok(if checked.iter().all(|c| c.status == "present") {
        Exit::Done
    } else {
        Exit::Found
    })
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
    let mut differs = vec![];
    if let (Some(want), Some(have)) = (&c.expected_sha256, &c.sha256)
        && want != have
    {
        differs.push("sha256".to_string());
    }
    match (c.expected_duration_secs, &secs) {
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
    if let Some(out) = out {
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("bin");
        let dest = out.join(format!("{}.{ext}", row.video_id));
        if std::fs::rename(&file, &dest).is_err()
            && let Err(e) = std::fs::copy(&file, &dest)
        {
            c.detail += &format!(" (not kept: {}: {e})", dest.display());
        }
    }
    c
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

fn print(checked: &[Checked], json: bool) {
    if json {
        for c in checked {
            println!(
                "{}",
                serde_json::to_string(c).expect("plain values serialise")
            );
        }
        return;
    }
    println!("{:<24} {:<12} {:<12} detail", "video_id", "split", "status");
    for c in checked {
        println!(
            "{:<24} {:<12} {:<12} {}",
            c.video_id, c.split, c.status, c.detail
        );
    }
    let mut counts = std::collections::BTreeMap::new();
    for c in checked {
        *counts.entry(c.status).or_insert(0usize) += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!("{} videos: {}", checked.len(), parts.join(", "));
}

#[cfg(test)]
mod tests {
    use super::vanished;

    #[test]
    fn failures_are_told_apart() {
        assert_eq!(
            vanished("http_status", "http://h/a.mp4: HTTP 404 Not Found"),
            "not_found"
        );
        assert_eq!(
            vanished("http_status", "http://h/a.mp4: HTTP 410 Gone"),
            "removed"
        );
        assert_eq!(vanished("http_status", "u: HTTP 403 Forbidden"), "private");
        assert_eq!(
            vanished("http_status", "u: HTTP 503 Service Unavailable"),
            "unreachable"
        );
        assert_eq!(
            vanished(
                "yt_dlp_failed",
                "u: yt-dlp exit 1: ERROR: [youtube] x: Private video. Sign in"
            ),
            "private"
        );
        assert_eq!(
            vanished(
                "yt_dlp_failed",
                "u: yt-dlp exit 1: ERROR: [youtube] x: This video has been removed by the uploader"
            ),
            "removed"
        );
        assert_eq!(
            vanished("http_error", "u: connection refused"),
            "unreachable"
        );
        assert_eq!(vanished("youtube_download_off", ""), "not_checked");
    }
}
