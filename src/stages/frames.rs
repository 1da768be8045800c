//! `frames`: samples frames and stores them as JPEG under the run directory.
//!
//! Reads: the source path and the `probe` slot (duration). Writes: the `frames` slot, one row per
//! frame (index, target and actual timestamps, path, size), and the JPEGs at
//! `media/<stage id>/<fingerprint>/<video id>/<index>.jpg` (through `StageContext::put_object`,
//! so the commit records each JPEG's size and BLAKE3 for `verify`). Calls: libavcodec on the CPU
//! pool (seek + decode forward, see `engines::ffmpeg`). Caches: nothing beyond its shards and JPEGs;
//! when a later stage reads pixels (OCR), the decoded frames are handed to it in memory
//! (`runtime::decoded`), so it reads what was decoded rather than the JPEG.
//!
//! Modes (SPEC §7):
//! - `uniform`: `count` frames (default 16) at the centres of `count` equal segments,
//!   t_i = D·(i + ½)/count — temporally equidistant, and never the black first or last frame.
//! - `fps`: one frame every 1/`fps` s from 0 (RiskCue: 1 fps); if that exceeds `max_frames`
//!   (default 16; MVFNDB "fps = 1 capped at 16"), `max_frames` uniform frames over the whole video.
//! - `range`: every frame with start_secs ≤ t < end_secs (end default: the end of the video).

use crate::config::{ConfigError, Seg};
use crate::engines::ffmpeg;
use crate::error::StageError;
use crate::record::{FrameRef, Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Uniform,
    Fps,
    Range,
}

/// `compute` settings of a `frames` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FramesConfig {
    /// `uniform`, `fps` or `range`.
    pub mode: Mode,
    /// uniform: number of frames.
    pub count: u32,
    /// fps: frames per second.
    pub fps: f64,
    /// fps: cap (default 16); range: cap (default unlimited).
    pub max_frames: Option<u32>,
    /// range: start of the range.
    pub start_secs: f64,
    /// range: end of the range (exclusive); default the end of the video.
    pub end_secs: Option<f64>,
    /// JPEG quality 1–100.
    pub jpeg_quality: u8,
    /// Scale frames down so the longer side is at most this many pixels.
    pub max_side: Option<u32>,
}

impl Default for FramesConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Uniform,
            count: 16,
            fps: 1.0,
            max_frames: None,
            start_secs: 0.0,
            end_secs: None,
            jpeg_quality: 90,
            max_side: None,
        }
    }
}

/// The bytes of one frame of the video as RGB, after scaling to `max_side` (as the grabber does).
fn frame_bytes(probe: &crate::record::Probe, max_side: Option<u32>) -> usize {
    let (w, h) = (probe.width.max(1) as f64, probe.height.max(1) as f64);
    let s = match max_side {
        Some(m) if w.max(h) > m as f64 => m as f64 / w.max(h),
        _ => 1.0,
    };
    ((w * s).round() * (h * s).round() * 3.0) as usize
}

/// Safety cap on `range` so one long video cannot fill the disk by accident.
const RANGE_LIMIT: u32 = 100_000;

impl FramesConfig {
    /// Only the settings the mode uses, so changing an unused one does not redo the stage.
    fn fingerprint_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "mode": self.mode, "jpeg_quality": self.jpeg_quality, "max_side": self.max_side });
        let m = v.as_object_mut().expect("object");
        match self.mode {
            Mode::Uniform => {
                m.insert("count".into(), self.count.into());
            }
            Mode::Fps => {
                m.insert("fps".into(), self.fps.into());
                m.insert("max_frames".into(), self.max_frames.unwrap_or(16).into());
            }
            Mode::Range => {
                m.insert("start_secs".into(), self.start_secs.into());
                m.insert("end_secs".into(), self.end_secs.into());
                m.insert(
                    "max_frames".into(),
                    self.max_frames.unwrap_or(RANGE_LIMIT).into(),
                );
            }
        }
        v
    }

    /// About how many frames a video of `duration` seconds at `fps` gives.
    fn frames_expected(&self, duration: f64, fps: f64) -> usize {
        match self.mode {
            Mode::Range => {
                let end = self.end_secs.unwrap_or(duration).min(duration);
                let n = ((end - self.start_secs).max(0.0) * fps.max(1.0)).ceil() as usize;
                n.clamp(1, self.max_frames.unwrap_or(RANGE_LIMIT) as usize)
            }
            _ => self.targets(duration).len().max(1),
        }
    }

    /// Target times for a video of `duration` seconds (uniform and fps modes).
    pub fn targets(&self, duration: f64) -> Vec<f64> {
        let uniform = |n: u32| {
            (0..n)
                .map(|i| duration * (i as f64 + 0.5) / n as f64)
                .collect::<Vec<_>>()
        };
        match self.mode {
            Mode::Uniform => uniform(self.count),
            Mode::Fps => {
                let cap = self.max_frames.unwrap_or(16);
                let n = ((duration * self.fps).ceil() as u32).max(1);
                if n > cap {
                    uniform(cap)
                } else {
                    (0..n)
                        .map(|i| i as f64 / self.fps)
                        .filter(|t| *t < duration)
                        .collect()
                }
            }
            Mode::Range => vec![],
        }
    }
}

pub struct FramesStage {
    cfg: FramesConfig,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "frames",
    about: "sampled frames as JPEG: uniform N, fps with a cap, or every frame in a time range",
    build: super::build_plain::<FramesConfig>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::Frames,
    keys: &[("compute", crate::config::keys_of::<FramesConfig>)],
};

impl super::PlainStage for FramesConfig {
    const IN_FLIGHT: usize = 2;
    /// Only the settings of the chosen mode: changing another mode's knob redoes nothing.
    fn fingerprint(&self, _compute: serde_json::Value) -> serde_json::Value {
        self.fingerprint_json()
    }
    fn task(self, at: &[Seg], bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        let key = |k: &str| crate::config::key_at(at, k);
        if self.mode == Mode::Uniform && self.count == 0 {
            return Err(bcx.src.error_at(&key("count"), "must be at least 1"));
        }
        if self.mode == Mode::Fps && !(self.fps > 0.0 && self.fps.is_finite()) {
            return Err(bcx.src.error_at(&key("fps"), "must be a positive number"));
        }
        if self.max_frames == Some(0) {
            return Err(bcx.src.error_at(&key("max_frames"), "must be at least 1"));
        }
        if !(1..=100).contains(&self.jpeg_quality) {
            return Err(bcx
                .src
                .error_at(&key("jpeg_quality"), "must be between 1 and 100"));
        }
        if self.mode == Mode::Range
            && (self.start_secs < 0.0 || self.end_secs.is_some_and(|e| e <= self.start_secs))
        {
            return Err(bcx
                .src
                .error_at(&key("end_secs"), "need 0 <= start_secs < end_secs"));
        }
        if self.max_side.is_some_and(|m| m < 16) {
            return Err(bcx.src.error_at(&key("max_side"), "must be at least 16"));
        }
        Ok(super::processor_task(FramesStage { cfg: self }))
    }
}

/// One decoded frame, encoded: target and presented time, size, its JPEG, and its pixels when a
/// later stage wants them as decoded.
type Encoded = (f64, f64, u32, u32, Vec<u8>, Option<image::RgbImage>);

/// Grabs the frames at `chunk` (all of the range in `Mode::Range`) and encodes each as JPEG.
fn grab_encoded(
    cfg: &FramesConfig,
    path: &std::path::Path,
    chunk: &[f64],
    hand_over: bool,
) -> Result<Vec<Encoded>, StageError> {
    let grabs = match cfg.mode {
        Mode::Range => ffmpeg::grab_range(
            path,
            cfg.start_secs,
            cfg.end_secs.unwrap_or(f64::INFINITY),
            cfg.max_frames.unwrap_or(RANGE_LIMIT) as usize,
            cfg.max_side,
        )?,
        _ => ffmpeg::grab_at(path, chunk, cfg.max_side)?,
    };
    grabs
        .into_iter()
        .map(|g| {
            let jpeg = ffmpeg::jpeg(&g.image, cfg.jpeg_quality)?;
            Ok((
                g.target_secs,
                g.timestamp_secs,
                g.image.width(),
                g.image.height(),
                jpeg,
                hand_over.then_some(g.image),
            ))
        })
        .collect()
}

#[async_trait]
impl Processor for FramesStage {
    type Row = FrameRef;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Media, Slot::Probe]
    }
    fn provides(&self) -> Slot {
        Slot::Frames
    }

    fn estimate(&self) -> crate::runtime::stage::StageEstimate {
        let c = &self.cfg;
        let n = match c.mode {
            Mode::Uniform => c.count,
            Mode::Fps => c.max_frames.unwrap_or(16),
            Mode::Range => c.max_frames.unwrap_or(c.count),
        };
        // About 1.5 bits a pixel at quality 90 for camera footage; 1280x720 when not scaled.
        let side = c.max_side.unwrap_or(1280).min(1920) as u64;
        let bytes = side * side * 9 / 16 * 3 / 16 * c.jpeg_quality.max(10) as u64 / 90;
        crate::runtime::stage::StageEstimate {
            calls: vec![],
            frames: Some((n, bytes)),
        }
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<FrameRef>, StageError> {
        let probe = rec
            .probe
            .as_ref()
            .ok_or_else(|| StageError::internal("missing_probe", "frames needs probe"))?;
        let duration = probe.video_duration_secs;
        let path = cx.media_file(rec).await?;
        let cfg = self.cfg.clone();
        let targets = cfg.targets(duration);
        // A later stage that reads pixels (OCR) gets the frames as decoded, once there is room
        // for them (this waits while the frames held for it fill `runtime.decoded_frames_mib`).
        let room = frame_bytes(probe, cfg.max_side) * cfg.frames_expected(duration, probe.fps);
        let admission = cx.decoded.admit(&cx.stage_id, room, &cx.cancel).await;
        let hand_over = admission.is_some();
        // Targets are split into contiguous chunks decoded on separate cores (each chunk opens
        // the file itself), so one long video does not leave a core idle. The CPU pool bounds the
        // total, so with many videos in flight this costs only a few extra seeks.
        let chunks: Vec<Vec<f64>> = match cfg.mode {
            Mode::Range => vec![vec![]],
            _ => {
                let k = cx.cpu.threads().min(targets.len().div_ceil(4)).max(1);
                let per = targets.len().div_ceil(k).max(1);
                targets.chunks(per).map(|c| c.to_vec()).collect()
            }
        };
        let jobs = chunks.into_iter().map(|chunk| {
            let (cfg, path) = (cfg.clone(), path.clone());
            cx.cpu
                .run(move || grab_encoded(&cfg, &path, &chunk, hand_over))
        });
        let grabs: Vec<_> = futures::future::try_join_all(jobs)
            .await?
            .into_iter()
            .flatten()
            .collect();
        if grabs.is_empty() {
            return Err(StageError::data(
                "no_frames",
                format!("{}: no frame in the requested range", path.display()),
            ));
        }
        let mut rows = Vec::with_capacity(grabs.len());
        let mut decoded = vec![];
        for (i, (target_secs, timestamp_secs, width, height, jpeg, image)) in
            grabs.into_iter().enumerate()
        {
            let rel = format!(
                "media/{}/{}/{}/{:05}.jpg",
                cx.stage_id, cx.fingerprint, rec.video_id, i
            );
            cx.put_object(&rec.video_id, &rel, jpeg).await?;
            decoded.extend(image.map(|img| (rel.clone(), img)));
            rows.push(FrameRef {
                frame_index: i as u32,
                target_secs,
                timestamp_secs,
                path: rel,
                width,
                height,
            });
        }
        if let Some(a) = admission {
            a.keep(&rec.video_id, decoded);
        }
        Ok(rows)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<FrameRef>) {
        rec.frames = Some(rows);
    }
}

/// How a stage that reads pixels got a video's frames (counted into its tally).
#[derive(Debug, Default, Clone, Copy)]
pub struct FramesRead {
    /// Handed over by this pass's frames stage.
    pub handed: u64,
    /// Decoded again from the media (an earlier invocation sampled them, or the hand-off was full).
    pub decoded_again: u64,
    /// Read from the stored JPEG because the media could not be decoded again.
    pub from_jpeg: u64,
}

/// The frames of `chain` as decoded, whatever this process did before: handed over by the frames
/// stage of this pass, else decoded again from the media at their timestamps (the same seek and
/// decode, so the same pixels), else, when the media cannot be decoded again (deleted, or
/// changed so the frame's size differs), read from their stored JPEGs (the only case where what
/// a reader sees depends on the history of the run; it is counted).
pub async fn decoded(
    rec: &VideoRecord,
    chain: &[FrameRef],
    cx: &StageContext,
) -> Result<(Vec<image::RgbImage>, FramesRead), StageError> {
    let mut read = FramesRead::default();
    let mut out: Vec<Option<image::RgbImage>> = chain
        .iter()
        .map(|f| cx.decoded.take(&rec.video_id, &f.path))
        .collect();
    read.handed = out.iter().flatten().count() as u64;
    let missing: Vec<usize> = (0..chain.len()).filter(|&i| out[i].is_none()).collect();
    if !missing.is_empty() {
        let again = match cx.media_file(rec).await {
            Ok(path) if path.exists() => {
                let times: Vec<f64> = missing.iter().map(|&i| chain[i].timestamp_secs).collect();
                // The stored size is the scaled size: its longer side is the cap it was scaled to.
                let side = missing
                    .iter()
                    .map(|&i| chain[i].width.max(chain[i].height))
                    .max();
                cx.cpu
                    .run(move || ffmpeg::grab_at(&path, &times, side))
                    .await
                    .ok()
            }
            _ => None,
        };
        let mut again = again.unwrap_or_default().into_iter();
        for &i in &missing {
            let f = &chain[i];
            match again.next() {
                Some(g) if g.image.dimensions() == (f.width, f.height) => {
                    read.decoded_again += 1;
                    out[i] = Some(g.image);
                }
                _ => {
                    let jpeg = crate::runtime::stage::frame_jpeg(cx.store.as_ref(), f).await?;
                    let img = cx
                        .cpu
                        .run(move || {
                            image::load_from_memory(&jpeg)
                                .map(|i| i.to_rgb8())
                                .map_err(|e| StageError::data("bad_frame", e.to_string()))
                        })
                        .await?;
                    read.from_jpeg += 1;
                    out[i] = Some(img);
                }
            }
        }
    }
    Ok((out.into_iter().flatten().collect(), read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_targets_are_segment_centres() {
        let c = FramesConfig {
            count: 4,
            ..Default::default()
        };
        assert_eq!(c.targets(8.0), vec![1.0, 3.0, 5.0, 7.0]);
    }

    #[test]
    fn fps_mode_caps_by_spreading_over_the_video() {
        let c = FramesConfig {
            mode: Mode::Fps,
            fps: 1.0,
            max_frames: Some(16),
            ..Default::default()
        };
        assert_eq!(
            c.targets(10.5),
            (0..11).map(|i| i as f64).collect::<Vec<_>>()
        );
        let long = c.targets(160.0);
        assert_eq!(long.len(), 16);
        assert_eq!(long[0], 5.0);
        assert_eq!(long[15], 155.0);
    }

    #[test]
    fn unused_settings_do_not_change_the_fingerprint() {
        let fps_mode = |count, fps| {
            FramesConfig {
                mode: Mode::Fps,
                count,
                fps,
                ..Default::default()
            }
            .fingerprint_json()
        };
        assert_eq!(fps_mode(3, 1.0), fps_mode(99, 1.0));
        assert_ne!(fps_mode(3, 1.0), fps_mode(16, 2.0));
    }
}
