//! `transcript`: what is said in each video, as timed segments and as one text per video
//! (HarmVideoBench's input is 12 frames and the transcript).
//!
//! Reads: the media slot, and the captions beside the media file when there are any (yt-dlp's
//! naming, `<media stem>.<lang>.json3`: what the download stage keeps with `captions = true`, or
//! what `yt-dlp --write-subs --sub-format json3` wrote next to a local file). Writes: the
//! `transcript` table, one row per segment (index, start and end in seconds of the video, text,
//! language, source `asr:<model>` or `captions:youtube` / `captions:json3`, the upload it came
//! from); a video with no text has one row with a null index, empty text and the reason
//! (`no_audio_stream`, `empty_audio`, `no_speech`): it is not rejected, since a silent clip is
//! still a video. `vidcurate release` joins the segments into per-video `transcript`,
//! `transcript_source`, `transcript_language` and `transcript_reason` columns.
//! Calls: libavformat/libavcodec/libswresample on the CPU pool (audio to 16 kHz mono, cut into
//! uploads under `max_upload_bytes` at the quietest point, see `engines::audio`), then an
//! OpenAI-compatible `audio/transcriptions` service per upload, unless captions were used.
//! Caches: each upload's answer in the run's response cache, keyed by the service, the model,
//! the options and the BLAKE3 of the WAV bytes, so a rerun or a rebuilt table pays nothing.

use crate::clients::asr::{AsrService, TranscribeRequest, Transcription};
use crate::config::{ConfigError, Seg};
use crate::engines::audio;
use crate::error::StageError;
use crate::record::{Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::{BuildCx, yes};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// OpenAI's upload limit is 25 MiB (its 413 says "Maximum content size limit (26214400)"); a
/// mebibyte less leaves room for the multipart fields around the file.
const DEFAULT_MAX_UPLOAD: u64 = 24 << 20;

/// `compute` settings of a `transcript` stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptConfig {
    /// The `[services.<name>]` that transcribes (OpenAI-compatible `audio/transcriptions`).
    pub service: String,
    #[serde(default = "default_model")]
    pub model: String,
    /// ISO-639-1 code of the spoken language: sent to the service (which otherwise detects it)
    /// and preferred among caption tracks.
    #[serde(default)]
    pub language: Option<String>,
    /// Largest WAV file sent in one request; longer audio is cut into several.
    #[serde(default = "default_max_upload")]
    pub max_upload_bytes: u64,
    /// Use the captions kept beside the media when there are any, instead of calling the service.
    #[serde(default = "yes")]
    pub captions: bool,
}

fn default_model() -> String {
    "whisper-1".into()
}
fn default_max_upload() -> u64 {
    DEFAULT_MAX_UPLOAD
}

/// One timed segment of a video's speech (or, with a null index, why a video has none).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TranscriptSegment {
    /// 0-based, in time order; null on the single row of a video without text.
    pub segment_index: Option<u32>,
    /// Seconds from the start of the video.
    pub start_secs: Option<f64>,
    pub end_secs: Option<f64>,
    pub text: String,
    /// As the service or the caption file names it.
    pub language: Option<String>,
    /// `asr:<model>`, `captions:youtube`, `captions:json3`; `none` on a row without text.
    pub source: String,
    /// The upload the segment came from and where it starts in the video (ASR only), so a cut
    /// can be checked against the speech around it.
    pub chunk_index: Option<u32>,
    pub chunk_start_secs: Option<f64>,
    /// Why the video has no text: `no_audio_stream`, `empty_audio`, `no_speech`.
    pub reason: Option<String>,
}

impl TranscriptSegment {
    fn none(reason: &str) -> Self {
        Self {
            source: "none".into(),
            reason: Some(reason.into()),
            ..Default::default()
        }
    }
}

pub struct TranscriptStage {
    cfg: TranscriptConfig,
    svc: Arc<AsrService>,
}

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "transcript",
    about: "speech as timed segments and per-video text: the source's captions, else an OpenAI-compatible audio/transcriptions service (16 kHz mono WAV uploads cut at pauses, cached)",
    build: super::build_plain::<TranscriptConfig>,
    reselect: None,
    summary: Some(summary),
    release: crate::stages::Release::Transcript,
    keys: &[("compute", crate::config::keys_of::<TranscriptConfig>)],
};

fn summary(stage_id: &str, counts: &crate::runtime::StageCounts) -> String {
    let t = &counts.tally;
    let n = |k: &str| t.get(k).copied().unwrap_or(0);
    if n("uploads") + n("from_captions") == 0 {
        return String::new();
    }
    format!(
        "{stage_id}: {} videos from captions, {} uploads ({} answered by the cache), {} silent uploads skipped",
        n("from_captions"),
        n("uploads"),
        n("uploads_cached"),
        n("silent_uploads_skipped")
    )
}

impl super::PlainStage for TranscriptConfig {
    const IN_FLIGHT: usize = 2;
    fn task(self, at: &[Seg], bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        let key = |k: &str| crate::config::key_at(at, k);
        // Two seconds per upload at least: shorter cuts would land inside words whatever the search.
        if self.max_upload_bytes < (audio::WAV_HEADER as u64 + 2 * 2 * audio::RATE as u64)
            || self.max_upload_bytes > 1 << 30
        {
            return Err(bcx.src.error_at(
                &key("max_upload_bytes"),
                format!(
                    "must be between {} (2 s of 16 kHz audio) and 1 GiB, got {}",
                    audio::WAV_HEADER + 4 * audio::RATE as usize,
                    self.max_upload_bytes
                ),
            ));
        }
        if let Some(l) = &self.language
            && (!(2..=3).contains(&l.len()) || !l.chars().all(|c| c.is_ascii_lowercase()))
        {
            return Err(bcx.src.error_at(
                &key("language"),
                format!("an ISO-639-1 code such as \"en\", got {l:?}"),
            ));
        }
        if self.model.trim().is_empty() {
            return Err(bcx
                .src
                .error_at(&key("model"), "must name the model, e.g. \"whisper-1\""));
        }
        let svc_cfg = bcx.service(&self.service, &key("service"))?;
        let svc = AsrService::new(&self.service, svc_cfg)
            .map_err(|e| bcx.service_error(&self.service, e))?;
        Ok(super::processor_task(TranscriptStage {
            cfg: self,
            svc: Arc::new(svc),
        }))
    }
}

/// Why a json3 caption file cannot be read (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub enum CaptionError {
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("no `events` list")]
    NoEvents,
}

/// A caption file's segments: json3 `events[{tStartMs, dDurationMs, segs[{utf8}]}]`. Events
/// without `segs` (window definitions) and `aAppend` line breaks are skipped. In automatic
/// captions a line stays on screen while the next one rolls in, so each segment ends where the
/// next begins: the segments do not overlap, as spoken words do not.
pub fn parse_json3(body: &[u8]) -> Result<Vec<(f64, f64, String)>, CaptionError> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(CaptionError::Json)?;
    let events = v["events"].as_array().ok_or(CaptionError::NoEvents)?;
    let ms = |x: &serde_json::Value| {
        x.as_f64()
            .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
    };
    let mut out: Vec<(f64, f64, String)> = vec![];
    for e in events {
        let Some(segs) = e["segs"].as_array() else {
            continue;
        };
        if e["aAppend"].as_i64() == Some(1) {
            continue;
        }
        let text: String = segs.iter().filter_map(|s| s["utf8"].as_str()).collect();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let Some(start) = ms(&e["tStartMs"]) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        let end = start + ms(&e["dDurationMs"]).unwrap_or(0.0);
        out.push((start / 1000.0, end / 1000.0, text));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    for i in 1..out.len() {
        let next = out[i].0;
        if out[i - 1].1 > next {
            out[i - 1].1 = next.max(out[i - 1].0);
        }
    }
    Ok(out)
}

/// Rounded to the millisecond, so a table does not show float noise from the offsets.
fn ms3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The caption file beside the media (language, bytes, its name for messages): yt-dlp's
/// `<stem>.<lang>.json3`, the track in `prefer` first, then the shortest language tag (`en`
/// before `en-orig` or `en-US`).
async fn caption_file(
    rec: &VideoRecord,
    cx: &StageContext,
    prefer: Option<&str>,
) -> Result<Option<(String, Vec<u8>, String)>, StageError> {
    let Some(m) = &rec.media else {
        return Ok(None);
    };
    let media = std::path::Path::new(&m.path);
    let (Some(stem), dir) = (media.file_stem().and_then(|s| s.to_str()), media.parent()) else {
        return Ok(None);
    };
    let lang_of = |name: &str| -> Option<String> {
        let lang = name
            .strip_prefix(stem)?
            .strip_prefix('.')?
            .strip_suffix(".json3")?;
        (!lang.is_empty() && !lang.contains('/')).then(|| lang.to_string())
    };
    // (language, where to read it)
    let mut found: Vec<(String, String)> = vec![];
    if media.is_absolute() {
        let Some(dir) = dir else { return Ok(None) };
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(l) = lang_of(&name) {
                    found.push((l, e.path().display().to_string()));
                }
            }
        }
    } else {
        let dir = dir
            .map(|d| d.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let listed = cx.store.list(&dir).await.map_err(|e| {
            StageError::external(
                "captions_list",
                format!("{}/{dir}: {e}", cx.store.location()),
            )
        })?;
        for p in listed {
            let name = p.rsplit('/').next().unwrap_or(&p).to_string();
            if let Some(l) = lang_of(&name) {
                found.push((l, p));
            }
        }
    }
    let rank = |l: &str| match prefer {
        Some(p) if l == p => 0,
        Some(p) if l.starts_with(&format!("{p}-")) => 1,
        Some(_) => 2,
        None => 0,
    };
    found.sort_by(|a, b| (rank(&a.0), a.0.len(), &a.0).cmp(&(rank(&b.0), b.0.len(), &b.0)));
    let Some((lang, at)) = found.into_iter().next() else {
        return Ok(None);
    };
    let body = if media.is_absolute() {
        std::fs::read(&at)
            .map_err(|e| StageError::data("unreadable_captions", format!("{at}: {e}")))?
    } else {
        cx.store.get(&at).await.map_err(|e| {
            StageError::external(
                "captions_fetch",
                format!("{}/{at}: {e}", cx.store.location()),
            )
        })?
    };
    Ok(Some((lang, body, at)))
}

/// Whether a chunk holds nothing a recogniser could hear (peak under −66 dBFS): such uploads
/// cost money and Whisper answers them with invented text ("Thank you.").
fn is_silent(pcm: &[i16]) -> bool {
    pcm.iter().all(|s| s.unsigned_abs() < 16)
}

/// A caption file's segments as rows; the source names YouTube when the video came from there.
fn caption_rows(
    rec: &VideoRecord,
    lang: String,
    body: &[u8],
    name: &str,
) -> Result<Vec<TranscriptSegment>, StageError> {
    let segs = parse_json3(body)
        .map_err(|e| StageError::data("unreadable_captions", format!("{name}: {e}")))?;
    let youtube = rec
        .source
        .url
        .as_deref()
        .is_some_and(crate::stages::download::is_youtube);
    let source = if youtube {
        "captions:youtube"
    } else {
        "captions:json3"
    };
    Ok(segs
        .into_iter()
        .enumerate()
        .map(|(i, (start, end, text))| TranscriptSegment {
            segment_index: Some(i as u32),
            start_secs: Some(ms3(start)),
            end_secs: Some(ms3(end)),
            text,
            language: Some(lang.clone()),
            source: source.into(),
            ..Default::default()
        })
        .collect())
}

/// Appends the segments of upload `k` (`offset` seconds into the audio, `len` long) to `rows`,
/// in seconds of the whole audio.
fn push_segments(
    rows: &mut Vec<TranscriptSegment>,
    t: Transcription,
    k: usize,
    offset: f64,
    len: f64,
    source: &str,
) {
    for mut s in t.segments {
        if !t.timed {
            // An untimed answer (gpt-4o models) is known only to lie in its upload.
            (s.start, s.end) = (0.0, len);
        }
        rows.push(TranscriptSegment {
            segment_index: Some(rows.len() as u32),
            // A segment cannot run past the audio it was heard in.
            start_secs: Some(ms3(offset + s.start.clamp(0.0, len))),
            end_secs: Some(ms3(offset + s.end.clamp(s.start.max(0.0), len))),
            text: s.text,
            language: t.language.clone(),
            source: source.to_string(),
            chunk_index: Some(k as u32),
            chunk_start_secs: Some(ms3(offset)),
            reason: None,
        });
    }
}

#[async_trait]
impl Processor for TranscriptStage {
    type Row = TranscriptSegment;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Media]
    }
    fn provides(&self) -> Slot {
        Slot::Transcript
    }

    /// One upload a video (24 MiB of 16 kHz mono is about 13 minutes; captions make it none).
    fn estimate(&self) -> crate::runtime::stage::StageEstimate {
        crate::runtime::stage::StageEstimate {
            calls: vec![crate::runtime::stage::CallEstimate {
                service: self.svc.name.clone(),
                model: self.cfg.model.clone(),
                ..Default::default()
            }],
            frames: None,
        }
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<TranscriptSegment>, StageError> {
        if self.cfg.captions
            && let Some((lang, body, name)) =
                caption_file(rec, cx, self.cfg.language.as_deref()).await?
        {
            let rows = caption_rows(rec, lang, &body, &name)?;
            // An empty track (music only) says nothing about speech: ask the service.
            if !rows.is_empty() {
                cx.tally.add("from_captions", 1);
                return Ok(rows);
            }
        }
        let path = cx.media_file(rec).await?;
        let max = audio::max_chunk_samples(self.cfg.max_upload_bytes);
        let decoded = cx
            .cpu
            .run(move || {
                Ok(audio::decode_mono_16k(&path)?.map(|pcm| {
                    let chunks = audio::plan_chunks(&pcm, max);
                    (Arc::new(pcm), chunks)
                }))
            })
            .await?;
        let Some((pcm, chunks)) = decoded else {
            return Ok(vec![TranscriptSegment::none("no_audio_stream")]);
        };
        if pcm.is_empty() {
            return Ok(vec![TranscriptSegment::none("empty_audio")]);
        }
        let cache = cx.cache.get()?;
        let source = format!("asr:{}", self.cfg.model);
        let rate = audio::RATE as f64;
        let mut rows = vec![];
        for (k, &(a, b)) in chunks.iter().enumerate() {
            // A full upload is 24 MiB to scan and write: on the CPU pool, not a runtime worker.
            let samples = pcm.clone();
            let wav = cx
                .cpu
                .run(move || {
                    let part = &samples[a..b];
                    Ok((!is_silent(part)).then(|| Arc::new(audio::wav(part))))
                })
                .await?;
            let Some(wav) = wav else {
                cx.tally.add("silent_uploads_skipped", 1);
                continue;
            };
            let req = TranscribeRequest {
                model: self.cfg.model.clone(),
                language: self.cfg.language.clone(),
                wav,
            };
            let t = self.svc.transcribe(&req, &cache).await?;
            cx.tally.add("uploads", 1);
            if t.cached {
                cx.tally.add("uploads_cached", 1);
            }
            let (offset, len) = (a as f64 / rate, (b - a) as f64 / rate);
            push_segments(&mut rows, t, k, offset, len, &source);
        }
        if rows.is_empty() {
            return Ok(vec![TranscriptSegment::none("no_speech")]);
        }
        Ok(rows)
    }

    fn attach(rec: &mut VideoRecord, rows: Vec<TranscriptSegment>) {
        rec.transcript = Some(joined(&rows));
    }
}

/// The video's text: its segments' text in order, one space between.
pub fn joined(rows: &[TranscriptSegment]) -> String {
    rows.iter()
        .filter(|r| r.segment_index.is_some() && !r.text.is_empty())
        .map(|r| r.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written for this test in the documented shape of YouTube's automatic captions as yt-dlp
    /// saves them (`--sub-format json3`): a window event without `segs`, word-timed `segs` with
    /// `tOffsetMs`/`acAsrConf`, `aAppend` line breaks, lines that stay up while the next rolls
    /// in, and a millisecond value written as a string.
    const AUTO: &str = r#"{"wireMagic":"pb3","pens":[{}],"wsWinStyles":[{},{"mhModeHint":2}],"wpWinPositions":[{},{"apPoint":6,"ahHorPos":20,"avVerPos":100}],
      "events":[
        {"tStartMs":0,"dDurationMs":12000,"id":1,"wpWinPosId":1,"wsWinStyleId":1},
        {"tStartMs":919,"dDurationMs":5121,"wWinId":1,"segs":[{"utf8":"hello","acAsrConf":0},{"utf8":" and","tOffsetMs":441,"acAsrConf":0},{"utf8":" welcome","tOffsetMs":601,"acAsrConf":0}]},
        {"tStartMs":3030,"dDurationMs":3010,"wWinId":1,"aAppend":1,"segs":[{"utf8":"\n"}]},
        {"tStartMs":3040,"dDurationMs":6639,"wWinId":1,"segs":[{"utf8":"we","acAsrConf":0},{"utf8":" are","tOffsetMs":80},{"utf8":" about","tOffsetMs":280},{"utf8":" to begin","tOffsetMs":520}]},
        {"tStartMs":"7000","dDurationMs":2000,"wWinId":1,"segs":[{"utf8":"[Music]"}]},
        {"tStartMs":9500,"dDurationMs":1000,"segs":[{"utf8":"\n"}]}
      ]}"#;

    #[test]
    fn json3_events_become_segments() {
        let s = parse_json3(AUTO.as_bytes()).unwrap();
        assert_eq!(
            s,
            vec![
                (0.919, 3.04, "hello and welcome".to_string()),
                (3.04, 7.0, "we are about to begin".to_string()),
                (7.0, 9.0, "[Music]".to_string()),
            ]
        );
        assert!(parse_json3(b"{}").is_err());
        assert!(parse_json3(br#"{"events":[]}"#).unwrap().is_empty());
    }

    #[test]
    fn a_video_without_text_joins_to_nothing() {
        assert_eq!(joined(&[TranscriptSegment::none("no_audio_stream")]), "");
        assert!(is_silent(&[0, 3, -15]) && !is_silent(&[0, 300]));
    }
}
