//! The yt-dlp path of the download stage: YouTube and the `yt_dlp_hosts`.

use super::{Download, DownloadStage, extension, media_store, store_object};
use crate::error::StageError;
use crate::record::VideoRecord;
use crate::runtime::stage::StageContext;
use std::path::Path;
use std::time::Duration;

impl DownloadStage {
    pub(super) async fn ytdlp(
        &self,
        url: &str,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Download, StageError> {
        let work = cx
            .run_dir
            .join("media")
            .join("partial")
            .join(format!("yt-{}", rec.video_id));
        tokio::fs::create_dir_all(&work)
            .await
            .map_err(media_store)?;
        let out = self.run_ytdlp(self.ytdlp_command(url, &work), url).await?;
        let file = work.join(printed_file(url, &out)?);
        let ext = extension(&file.display().to_string(), None);
        let run_dir = cx.run_dir.clone();
        let (path, size, hash, captions) = cx
            .cpu
            .run(move || {
                let r = store_object(&run_dir, &file, &ext).and_then(|(path, size, hash)| {
                    let caps = keep_captions(&run_dir, file.parent().expect("in work dir"), &path)?;
                    Ok((path, size, hash, caps))
                });
                let _ = std::fs::remove_dir_all(file.parent().expect("in work dir"));
                r
            })
            .await?;
        for c in &captions {
            cx.keep_media(c).await?;
        }
        if size > self.cfg.max_bytes {
            return Err(StageError::data(
                "too_large",
                format!("{url}: {size} bytes"),
            ));
        }
        cx.keep_media(&path).await?;
        Ok(Download {
            url: Some(url.to_string()),
            method: "yt-dlp".into(),
            path,
            size_bytes: size,
            blake3: Some(hash),
            content_type: None,
        })
    }

    /// The yt-dlp command line for `url`, writing into `work`.
    fn ytdlp_command(&self, url: &str, work: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.ytdlp);
        if self.cfg.captions {
            // A caption track that fails to download must not fail the video (yt-dlp makes it
            // an error unless errors are ignored; a failed video still exits non-zero and
            // prints no file): the transcript stage falls back to speech recognition.
            cmd.args(["--write-subs", "--write-auto-subs", "--sub-format", "json3"])
                .args(["--sub-langs", &self.cfg.sub_langs.join(",")])
                .arg("--ignore-errors");
        }
        cmd.current_dir(work)
            .args([
                "--ignore-config",
                "--no-playlist",
                "--no-progress",
                "--continue",
            ])
            .args(["--format", &self.cfg.format])
            .args(["--max-filesize", &self.cfg.max_bytes.to_string()])
            // No retries of its own: the runner retries the video (one owner of attempts);
            // yt-dlp still retries single fragments of a download that is under way.
            .args(["--socket-timeout", "30", "--retries", "0"])
            .args(["--output", "media.%(ext)s"])
            .args(["--print", "after_move:filepath"])
            .arg("--")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs yt-dlp within the stage's time limit; its output, whatever its exit status.
    async fn run_ytdlp(
        &self,
        mut cmd: tokio::process::Command,
        url: &str,
    ) -> Result<std::process::Output, StageError> {
        let child = cmd.spawn().map_err(|e| {
            StageError::new(
                crate::error::ErrorKind::Config,
                "yt_dlp_missing",
                format!(
                    "cannot run {}: {e} (scripts/setup.sh installs it in data/venv-tools; set compute.yt_dlp)",
                    self.ytdlp.display()
                ),
            )
        })?;
        tokio::time::timeout(
            Duration::from_secs(self.cfg.timeout_secs),
            child.wait_with_output(),
        )
        .await
        .map_err(|_| {
            StageError::data(
                "timeout",
                format!("{url}: yt-dlp took longer than {} s", self.cfg.timeout_secs),
            )
        })?
        .map_err(|e| StageError::external("yt_dlp_failed", e.to_string()))
    }
}

/// The file yt-dlp says it wrote (its last printed line), or why it wrote none: its exit status
/// and last error line (`too_large` when the size cap stopped it).
fn printed_file(url: &str, out: &std::process::Output) -> Result<String, StageError> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(str::trim);
    if let (true, Some(printed)) = (out.status.success(), printed) {
        return Ok(printed.to_string());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.contains("ERROR") || !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string();
    let reason = if stderr.contains("File is larger than max-filesize")
        || stdout.contains("File is larger than max-filesize")
    {
        "too_large"
    } else {
        "yt_dlp_failed"
    };
    Err(StageError::data(
        reason,
        format!(
            "{url}: yt-dlp exit {}: {last}",
            out.status.code().unwrap_or(-1)
        ),
    ))
}

/// Moves yt-dlp's caption files (`media.<lang>.json3` in `work`) beside the stored media object
/// `media_rel` as `<object stem>.<lang>.json3`; returns their run-relative paths.
fn keep_captions(run_dir: &Path, work: &Path, media_rel: &str) -> Result<Vec<String>, StageError> {
    let io = |e: std::io::Error| media_store(format!("{}: {e}", work.display()));
    let stem = media_rel.rsplit_once('.').map_or(media_rel, |(s, _)| s);
    let mut kept = vec![];
    let Ok(rd) = std::fs::read_dir(work) else {
        return Ok(kept);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(lang) = name
            .strip_prefix("media.")
            .and_then(|n| n.strip_suffix(".json3"))
            .filter(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            })
        else {
            continue;
        };
        let rel = format!("{stem}.{lang}.json3");
        std::fs::rename(e.path(), run_dir.join(&rel)).map_err(io)?;
        kept.push(rel);
    }
    kept.sort();
    Ok(kept)
}
