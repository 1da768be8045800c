//! What the model-judging stages share: the papers' prompts, the video's title and description,
//! and frames as model inputs; the service a stage names.

use crate::clients::llm::{ImageInput, LlmService};
use crate::config::{ConfigError, Seg, StageCommon};
use crate::error::StageError;
use crate::record::VideoRecord;
use crate::runtime::stage::StageContext;
use crate::stages::BuildCx;
use std::path::PathBuf;

/// What a stage's fingerprint records of a prompt template: its full text, hashed.
pub fn text_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..16].to_string()
}

/// RiskCue §3.2, verbatim, with the domain's risk event in place of `[risk event]`.
pub const RELEVANCE_PROMPT: &str = "On a scale from 1 to 10, how likely is this video to contain [risk event] video in action but not lecture/tutorial/slides, etc.? Answer with a single integer from 1 (very unlikely) to 10 (very likely).";

/// RiskCue appendix A.4, verbatim.
pub const QUALITY_PROMPT: &str = include_str!("quality_prompt.txt");

/// The twelve criteria of A.2 / A.4, in order, with the names the prompt asks the model to use.
pub const CRITERIA: [&str; 12] = [
    "Logo Assessment",
    "Location Information",
    "Time/Date Information",
    "Reporter Presence",
    "SNS Engagement Overlays",
    "Natural Image Quality",
    "Natural Temporal Continuity",
    "Consequence Text",
    "Title/Description/Banner Text",
    "Subtitle Text",
    "Camera Perspective",
    "Post-Production Effects",
];

/// The video's value in the extra (manifest) column `name`, of the columns `extras` names.
pub fn extra_column(rec: &VideoRecord, extras: &[String], name: &str) -> Option<String> {
    let i = extras.iter().position(|n| n == name)?;
    rec.extra.get(i).cloned().flatten()
}

/// Title and description: the source's metadata, else manifest columns `title` / `description`.
pub fn title_description(rec: &VideoRecord, cx: &StageContext) -> (String, String) {
    let extra = |name: &str| extra_column(rec, &cx.extras, name);
    let title = rec.source.title.clone().or_else(|| extra("title"));
    let desc = rec
        .source
        .description
        .clone()
        .or_else(|| extra("description"));
    (title.unwrap_or_default(), desc.unwrap_or_default())
}

/// Up to `max` of the video's sampled frames, evenly spread, as model inputs.
///
/// A video without sampled frames is rejected (`no_frames`): there is nothing to show `to`.
pub async fn frame_inputs(
    rec: &VideoRecord,
    cx: &StageContext,
    max: usize,
    to: &str,
) -> Result<Vec<ImageInput>, StageError> {
    let frames: &[crate::record::FrameRef] = rec.frames.as_deref().unwrap_or_default();
    if frames.is_empty() || max == 0 {
        return Err(StageError::data(
            "no_frames",
            format!("no sampled frames to show {to}"),
        ));
    }
    let pick = pick(frames.len(), max);
    let mut out = Vec::with_capacity(pick.len());
    for i in pick {
        let bytes = crate::runtime::stage::frame_jpeg(cx.store.as_ref(), &frames[i]).await?;
        out.push(ImageInput::new(bytes.to_vec()));
    }
    Ok(out)
}

/// At most `max` of `n` frames, evenly spread: the ones `frame_inputs` sends.
fn pick(n: usize, max: usize) -> Vec<usize> {
    if n <= max {
        (0..n).collect()
    } else {
        (0..max).map(|i| i * n / max + n / (2 * max)).collect()
    }
}

/// The times (seconds) of the frames `frame_inputs` sends, in the order sent.
pub fn frame_times(rec: &VideoRecord, max: usize) -> Vec<f64> {
    let frames: &[crate::record::FrameRef] = rec.frames.as_deref().unwrap_or_default();
    pick(frames.len(), max)
        .into_iter()
        .map(|i| frames[i].timestamp_secs)
        .collect()
}

/// The service a stage's `service` setting names (an unknown one is reported at that key).
pub fn stage_service(
    bcx: &BuildCx,
    common: &StageCommon,
    compute_at: &[Seg],
    name: &str,
) -> Result<std::sync::Arc<LlmService>, ConfigError> {
    bcx.llm_service(name, &crate::config::key_at(compute_at, "service"), common)
}

/// `max_images` of a stage that shows the model the video: 0 would reject every video at run
/// time ("no sampled frames"), after the run was paid for up to this stage.
pub fn images_at_least_one(
    max_images: usize,
    compute_at: &[Seg],
    bcx: &BuildCx,
) -> Result<(), ConfigError> {
    if max_images == 0 {
        return Err(bcx.src.error_at(
            &crate::config::key_at(compute_at, "max_images"),
            "max_images must be at least 1: this stage shows the model the video's frames",
        ));
    }
    Ok(())
}

/// The risk event a stage names: inline (`event`), the `[event]` table of a query file
/// (`queries`, relative to the pipeline file), or both when they name the same event. One
/// source of truth: a pipeline copied for another domain cannot keep judging by a leftover
/// inline event while its query file names a new one. Returns the name and the file's table.
pub fn risk_event(
    event: Option<&str>,
    queries: Option<&std::path::Path>,
    compute_at: &[Seg],
    bcx: &BuildCx,
) -> Result<(String, Option<crate::config::queries::EventText>), ConfigError> {
    let key = |k: &str| crate::config::key_at(compute_at, k);
    let table = match queries {
        Some(q) => {
            let (qf, _) = crate::config::queries::QueryFile::load(&bcx.resolve(q))?;
            let e = qf.event.ok_or_else(|| {
                bcx.src.error_at(
                    &key("queries"),
                    format!("{}: no [event] table", q.display()),
                )
            })?;
            Some(e)
        }
        None => None,
    };
    let name = match (event, &table) {
        (Some(n), Some(t)) if n.trim() != t.name.trim() => {
            return Err(bcx.src.error_at(
                &key("event"),
                format!(
                    "{n:?} is not the event of {} ({:?}): give one of `event` and `queries`",
                    queries.unwrap_or(std::path::Path::new("")).display(),
                    t.name
                ),
            ));
        }
        (Some(n), _) => n.to_string(),
        (None, Some(t)) => t.name.clone(),
        (None, None) => String::new(),
    };
    if name.trim().is_empty() {
        return Err(bcx.src.error_at(
            compute_at,
            "give the risk event: `queries = \"../queries/<domain>.toml\"` (its [event] name) or `event = \"a protest turning violent\"`",
        ));
    }
    Ok((name, table))
}

/// A stage's prompt: the file `path` names (relative to the pipeline file), or `default`.
pub fn prompt_text(
    path: &Option<PathBuf>,
    default: &str,
    compute_at: &[Seg],
    bcx: &BuildCx,
) -> Result<String, ConfigError> {
    let Some(p) = path else {
        return Ok(default.to_string());
    };
    let full = bcx.resolve(p);
    std::fs::read_to_string(&full).map_err(|e| {
        bcx.src.error_at(
            &crate::config::key_at(compute_at, "prompt"),
            format!("{}: {e}", full.display()),
        )
    })
}

/// The text between the first `open` and the last `close` (model answers wrap JSON in prose and
/// code fences).
pub fn span(text: &str, open: char, close: char) -> Option<&str> {
    let a = text.find(open)?;
    let b = text.rfind(close)?;
    (b > a).then(|| &text[a..=b])
}

/// One answer to `req`; a refusal or safety block rejects the video with the reason.
pub async fn ask_text(
    svc: &crate::clients::llm::LlmService,
    req: &crate::clients::llm::ChatRequest,
    cx: &StageContext,
) -> Result<crate::clients::llm::ChatAnswer, StageError> {
    ask_text_in(svc, req, &cx.cache.get()?, &cx.stage_id).await
}

/// `ask_text` through the response cache `cache`, for `stage` (its batch queue's name): what a
/// caller outside a run's stage uses (`evaluate`'s judge).
pub async fn ask_text_in(
    svc: &crate::clients::llm::LlmService,
    req: &crate::clients::llm::ChatRequest,
    cache: &std::sync::Arc<crate::store::cache::ResponseCache>,
    stage: &str,
) -> Result<crate::clients::llm::ChatAnswer, StageError> {
    let a = svc.chat(req, cache, stage).await?;
    if let Some(why) = &a.refusal {
        let r = if a.finish == "blocked" {
            "blocked"
        } else {
            "refused"
        };
        return Err(StageError::data(r, format!("{}: {why}", svc.name)));
    }
    Ok(a)
}

/// A validated answer and what it took to get it.
pub struct Answer<T> {
    pub value: T,
    pub raw: String,
    pub attempts: u32,
}

/// Asks `req`; a refusal or safety block rejects the video with the reason; an answer that
/// `parse` refuses gets one repair request (`repair(problem)` appended to the prompt), then the
/// video is rejected as `reason` with the problem and the last answer.
pub async fn ask_validated<T, E: std::fmt::Display>(
    svc: &crate::clients::llm::LlmService,
    req: crate::clients::llm::ChatRequest,
    cx: &StageContext,
    reason: &str,
    parse: impl Fn(&str) -> Result<T, E>,
    repair: impl Fn(&str) -> String,
) -> Result<Answer<T>, StageError> {
    let cache = cx.cache.get()?;
    ask_validated_in(svc, req, (&cache, &cx.stage_id), reason, parse, repair).await
}

/// Whether `ask_validated`'s error is an answer the model was still writing at `max_tokens`
/// (the fix is a larger `max_tokens`, not another prompt).
pub fn cut_at_max_tokens(e: &StageError) -> bool {
    e.detail.ends_with("(finish: length)")
}

/// `ask_validated` through a response cache and a stage name of the caller's.
pub async fn ask_validated_in<T, E: std::fmt::Display>(
    svc: &crate::clients::llm::LlmService,
    mut req: crate::clients::llm::ChatRequest,
    (cache, stage): (&std::sync::Arc<crate::store::cache::ResponseCache>, &str),
    reason: &str,
    parse: impl Fn(&str) -> Result<T, E>,
    repair: impl Fn(&str) -> String,
) -> Result<Answer<T>, StageError> {
    let base = req.prompt.clone();
    let mut problem = String::new();
    for attempt in 1..=2u32 {
        req.repair = attempt > 1;
        let a = ask_text_in(svc, &req, cache, stage).await?;
        let text = a.text.unwrap_or_default();
        match parse(&text) {
            Ok(value) => {
                return Ok(Answer {
                    value,
                    raw: text,
                    attempts: attempt,
                });
            }
            Err(e) => {
                let cut = if a.finish == "length" {
                    " (the answer was cut off at max_tokens)"
                } else {
                    ""
                };
                problem = format!("{e}{cut}; last answer {text:?} (finish: {})", a.finish);
                req.prompt = format!("{base}\n\n{}", repair(&format!("{e}{cut}")));
            }
        }
    }
    Err(StageError::data(reason, problem))
}
