//! `vidcurate run PIPELINE --dry-run`: what a run would call, cost and write, before it calls
//! anything but the free model lists of the services behind vision stages (`modalities`). The
//! source says what it will fetch (a listing: exactly; a search: at most, with the days of
//! quota it needs); each stage says what one video costs it (its model calls, with prompt size,
//! images and output allowance; the frames it writes). Which videos reach each stage, and which
//! of them it must compute, is `reach`'s walk: a video a stage settled before from the same
//! settings and inputs is free and goes on as its stored rows decide under today's thresholds;
//! the YouTube responses in the cache are free too.
//!
//! Numbers are upper bounds where the run decides: every video a stage computes is assumed to
//! pass its `select`, and every answer uses its whole `max_tokens`. Tokens and prices count no
//! repair; the requests bound counts one for every call (a stage asks again at most once: a
//! repair of an answer it could not read, or relevance's reminder), and the one request a server
//! may refuse for its structured-output dialect.

use crate::error::RunError;
use crate::plan::Plan;
use crate::report::reach::{self, Listing};
use crate::runtime::runner::{self, RunOptions};
use crate::runtime::stage::{SourceEstimate, StageContext};
use crate::store::cache::ResponseCache;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One stage's line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageLine {
    pub stage: String,
    pub kind: String,
    /// Videos reaching the stage (at most).
    pub videos: u64,
    /// Of them, settled by an earlier run with the same settings and inputs.
    pub free: u64,
    /// Of those to compute, settled before from other inputs (a rerun's recomputation).
    pub recomputed: u64,
    /// Videos the stage refuses before computing, by reason (nothing after it is priced).
    pub refused: BTreeMap<String, u64>,
    pub calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub usd_live: f64,
    pub usd_batch: f64,
    /// `live`, `batch` or `offline` (the stage's services), empty for stages without calls.
    pub mode: String,
    pub frames: u64,
    pub disk_bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub struct DryRun {
    pub run_dir: std::path::PathBuf,
    pub source_kind: String,
    pub source: SourceEstimate,
    /// The source's listing against the stored source rows.
    pub changes: reach::SourceChanges,
    /// Source calls the response cache already holds, per method.
    pub source_cached: BTreeMap<String, u64>,
    pub stages: Vec<StageLine>,
    /// Cached answers per service (what is already paid for).
    pub cached: BTreeMap<String, i64>,
    /// What the services' model lists say the run cannot do (`modalities`).
    pub warnings: Vec<String>,
    /// (service, model) asked under a JSON Schema whose dialect is not known yet: each may cost
    /// one refused request more than the calls counted.
    pub dialects_unknown: Vec<(String, String)>,
}

impl DryRun {
    pub fn total_calls(&self) -> u64 {
        self.stages.iter().map(|s| s.calls).sum()
    }

    /// The requests the run may send at most: each call and its one repair, and one refused
    /// request per (service, model) whose dialect is not known yet.
    pub fn max_requests(&self) -> u64 {
        2 * self.total_calls() + self.dialects_unknown.len() as u64
    }
}

/// The characters-per-token and tokens-per-image the model client charges its budget with.
const CHARS_PER_TOKEN: u64 = 4;
const TOKENS_PER_IMAGE: u64 = 260;

pub async fn dry_run(mut plan: Plan, opts: &RunOptions) -> Result<DryRun, RunError> {
    let run_dir = runner::run_dir(&plan, opts);
    let mut cx = StageContext::detached(&run_dir)?;
    // The listing hashes files without ids, as the run's does: on as many threads.
    cx.cpu = crate::runtime::stage::CpuPool::new(plan.runtime.threads());
    let source = plan.source.estimate(&cx).await?;
    let mut out = DryRun {
        run_dir: run_dir.clone(),
        source_kind: plan.source_kind.clone(),
        source,
        ..Default::default()
    };
    let local = opts.work_dir.clone().unwrap_or_else(|| run_dir.clone());
    if let Some(cache) = ResponseCache::open_existing(&ResponseCache::path_in(&local))? {
        for s in cache.stats()? {
            if s.entries > 0 {
                *out.cached.entry(s.service.clone()).or_default() += s.entries;
                *out.source_cached.entry(s.method.clone()).or_default() += s.entries as u64;
            }
        }
    }
    let extras = plan.source.extras();
    let listing = if plan.source.collects_once() {
        let example = plan.source.example().unwrap_or_else(|| {
            crate::record::VideoRecord::new("example".into(), Default::default(), vec![])
        });
        Listing::Stored(
            out.source.videos.unwrap_or(0),
            out.source.more,
            Box::new(example),
            plan.source,
        )
    } else {
        Listing::Listed(plan.source)
    };
    let pipeline = toml::from_str(&plan.text)
        .map_err(|e| RunError::Config(format!("{}: {e}", plan.file.display())))?;
    let view = open_view(&run_dir).await;
    let reach = reach::walk(&plan.stages, pipeline, listing, &extras, view, cx).await?;
    out.warnings =
        crate::report::modalities::text_only_warnings(&plan.stages, &plan.services).await;
    out.changes = reach.source;
    for (st, r) in plan.stages.iter().zip(reach.stages) {
        out.stages.push(price(st, r, &plan.services));
    }
    out.dialects_unknown = dialects_unknown(&plan.stages, &plan.services, &local)?;
    Ok(out)
}

/// The (service, model) pairs of the plan's structured calls to an OpenAI-compatible server
/// that pins no `structured` and whose dialect the run's cache does not hold yet.
fn dialects_unknown(
    stages: &[crate::runtime::chain::PlannedStage],
    services: &BTreeMap<String, crate::config::ServiceConfig>,
    local: &std::path::Path,
) -> Result<Vec<(String, String)>, RunError> {
    let cache = ResponseCache::open_existing(&ResponseCache::path_in(local))?;
    let mut out = vec![];
    for call in stages.iter().flat_map(|s| s.task.estimate().calls) {
        let Some(svc) = services.get(&call.service) else {
            continue;
        };
        let gemini = svc.api == Some(crate::config::ServiceApi::Gemini)
            || (svc.api.is_none() && svc.base_url.contains("generativelanguage"));
        let pair = (call.service.clone(), call.model.clone());
        if !call.structured || gemini || svc.structured.is_some() || out.contains(&pair) {
            continue;
        }
        let known = match &cache {
            Some(c) => c.dialect(&pair.0, &pair.1)?.is_some(),
            None => false,
        };
        if !known {
            out.push(pair);
        }
    }
    Ok(out)
}

/// A stage's line: what its videos to compute cost.
fn price(
    st: &crate::runtime::chain::PlannedStage,
    r: reach::StageReach,
    services: &BTreeMap<String, crate::config::ServiceConfig>,
) -> StageLine {
    let est = st.task.estimate();
    let todo = r.todo;
    let mut line = StageLine {
        stage: st.id.clone(),
        kind: st.kind.clone(),
        videos: r.videos,
        free: r.free,
        recomputed: r.recomputed,
        refused: r.refused,
        ..Default::default()
    };
    let mut modes = vec![];
    for call in &est.calls {
        let svc = services.get(&call.service);
        let prices = svc.map(|s| s.prices()).unwrap_or_default();
        let tin = call.prompt_chars / CHARS_PER_TOKEN + call.images as u64 * TOKENS_PER_IMAGE;
        let tout = call.max_tokens as u64;
        line.calls += todo;
        line.tokens_in += todo * tin;
        line.tokens_out += todo * tout;
        line.usd_live += prices.cost((todo * tin) as i64, (todo * tout) as i64, false);
        line.usd_batch += prices.cost((todo * tin) as i64, (todo * tout) as i64, true);
        let mode = svc
            .map(|s| format!("{:?}", s.mode).to_lowercase())
            .unwrap_or_default();
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    line.mode = modes.join("+");
    if let Some((n, bytes)) = est.frames {
        line.frames = todo * n as u64;
        line.disk_bytes = line.frames * bytes;
    }
    line
}

/// The run directory as a reader opens it; None before the first run.
async fn open_view(run_dir: &std::path::Path) -> Option<crate::store::run::RunView> {
    let location = run_dir.to_string_lossy().to_string();
    let local_missing =
        !crate::store::objects::is_url(&location) && !run_dir.join("manifest.json").exists();
    if local_missing {
        return None;
    }
    crate::store::run::RunView::open(run_dir).await.ok()
}

fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// The report as printed.
pub fn render(d: &DryRun) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "dry run into {} (nothing is paid for: no model is called)",
        d.run_dir.display()
    );
    render_source(&mut t, d);
    let _ = writeln!(
        t,
        "{:<14} {:<10} {:>8} {:>8} {:>8} {:>12} {:>11} {:>10} {:>10} {:>8} {:>9} {:>10}",
        "stage",
        "type",
        "videos",
        "free",
        "calls",
        "tokens_in",
        "tokens_out",
        "usd_live",
        "usd_batch",
        "mode",
        "frames",
        "disk"
    );
    let (mut live, mut batch, mut disk) = (0.0, 0.0, 0);
    for l in &d.stages {
        live += l.usd_live;
        batch += l.usd_batch;
        disk += l.disk_bytes;
        let _ = writeln!(
            t,
            "{:<14} {:<10} {:>8} {:>8} {:>8} {:>12} {:>11} {:>10.4} {:>10.4} {:>8} {:>9} {:>10}",
            l.stage,
            l.kind,
            l.videos,
            l.free,
            l.calls,
            l.tokens_in,
            l.tokens_out,
            l.usd_live,
            l.usd_batch,
            l.mode,
            l.frames,
            if l.disk_bytes > 0 {
                gib(l.disk_bytes)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        t,
        "total: {} model calls ({} requests at most), ${live:.4} live or ${batch:.4} in batch mode, {} of frames",
        d.total_calls(),
        d.max_requests(),
        gib(disk)
    );
    for (svc, n) in &d.cached {
        let _ = writeln!(t, "cache: {n} answers of service {svc} already paid for");
    }
    render_changes(&mut t, d);
    for w in &d.warnings {
        let _ = writeln!(t, "warning: {w}");
    }
    for (svc, model) in &d.dialects_unknown {
        let _ = writeln!(
            t,
            "structured output: service {svc}, model {model}: 1 request more at most, if the server refuses json_schema (learnt once; `structured = ...` on the service pins it)"
        );
    }
    let _ = writeln!(
        t,
        "(upper bounds: every video computed passes its select, every answer uses max_tokens; tokens and prices count no repair, requests one for every call)"
    );
    t
}

/// What a rerun would compute again, and the videos a stage refuses outright.
fn render_changes(t: &mut String, d: &DryRun) {
    let c = &d.changes;
    // A first run adds every video it lists: that is not a change.
    let rerun = !c.assumed && (c.changed + c.removed > 0 || c.added < c.listed);
    let parts: Vec<String> = [
        (c.changed, "changed"),
        (c.removed, "removed"),
        (c.added, "added"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, w)| format!("{n} {w}"))
    .collect();
    if rerun && !parts.is_empty() {
        let _ = writeln!(t, "source: {} since the last run", parts.join(", "));
    }
    if rerun && !c.removed_ids.is_empty() {
        // Named, so a query-file or manifest edit that drops more than meant is seen before.
        const SHOWN: usize = 20;
        let ids = &c.removed_ids;
        let more = match ids.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let shown = ids[..ids.len().min(SHOWN)].join(", ");
        let _ = writeln!(t, "source: leaving the run: {shown}{more}");
    }
    for l in &d.stages {
        if l.recomputed > 0 {
            let _ = writeln!(
                t,
                "{}: {} recomputed (inputs changed)",
                l.stage, l.recomputed
            );
        }
        for (why, n) in &l.refused {
            let _ = writeln!(
                t,
                "{}: {n} of {} videos stop here, nothing after it is priced for them: {why}",
                l.stage, l.videos
            );
        }
    }
}

/// What the source will fetch: its videos, its calls and their quota.
fn render_source(t: &mut String, d: &DryRun) {
    let s = &d.source;
    let videos = match s.videos {
        Some(n) if s.at_most => format!("at most {n} videos"),
        Some(n) => format!("{n} videos"),
        None => "an unknown number of videos".into(),
    };
    let _ = writeln!(t, "source {}: {videos} ({})", d.source_kind, s.note);
    for (method, calls, units) in &s.calls {
        let cached = d.source_cached.get(method).copied().unwrap_or(0);
        let _ = writeln!(
            t,
            "  {method:<12} at most {calls} calls, {units} quota units{}",
            if cached > 0 {
                format!(" ({cached} already in the cache: free)")
            } else {
                String::new()
            }
        );
    }
    if let Some(days) = s.quota_days {
        let _ = writeln!(t, "  quota: {days:.2} days at the configured daily limits");
    }
    if let Some((calls, days)) = s.unsplit {
        let _ = writeln!(
            t,
            "  (the bound splits every dated window over split_above; with none split: {calls} searches, {days:.2} days)"
        );
    }
}
