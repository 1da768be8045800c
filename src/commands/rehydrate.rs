//! `vidcurate rehydrate RELEASE`: parses, runs `release::rehydrate` and prints what became of each video.

use crate::error::{Exit, RunError};
use crate::release::rehydrate::{Options, rehydrate, render};
use std::path::PathBuf;

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

pub fn run(a: Args) -> Result<Exit, RunError> {
    let checked = rehydrate(
        &a.release,
        &Options {
            out: a.out.as_deref(),
            youtube: a.youtube,
            yt_dlp: &a.yt_dlp,
            yt_dlp_hosts: &a.yt_dlp_hosts,
            jobs: a.jobs,
            duration_tolerance_secs: a.duration_tolerance_secs,
        },
    )?;
    print!("{}", render(&checked, a.json));
    Ok(if checked.iter().all(|c| c.status == "present") {
        Exit::Done
    } else {
        Exit::Found
    })
}
