//! `vidcurate run PIPELINE --dry-run`: what a run would call, cost and write, before it calls
//! anything. The source says what it will fetch (a listing: exactly; a search: at most, with
//! the days of quota it needs); each stage says what one video costs it (its model calls, with
//! prompt size, images and output allowance; the frames it writes). The run directory, when
//! there is one, says what is already done: videos a stage settled under the same fingerprint
//! are free, as are the YouTube responses in the cache.
//!
//! Numbers are upper bounds where the run decides: every video is assumed to pass every
//! `select`, no answer needs a repair, and every answer uses its whole `max_tokens`.

use crate::error::RunError;
use crate::plan::Plan;
use crate::runtime::runner::{self, RunOptions};
use crate::runtime::stage::{SourceEstimate, StageContext};
use crate::store::cache::ResponseCache;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// One stage's line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageLine {
    pub stage: String,
    pub kind: String,
    /// Videos reaching the stage (at most).
    pub videos: u64,
    /// Of them, settled by an earlier run under the same fingerprint.
    pub free: u64,
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
    /// Source calls the response cache already holds, per method.
    pub source_cached: BTreeMap<String, u64>,
    pub stages: Vec<StageLine>,
    /// Cached answers per service (what is already paid for).
    pub cached: BTreeMap<String, i64>,
}

impl DryRun {
    pub fn total_calls(&self) -> u64 {
        self.stages.iter().map(|s| s.calls).sum()
    }
}

/// The characters-per-token and tokens-per-image the model client charges its budget with.
const CHARS_PER_TOKEN: u64 = 4;
const TOKENS_PER_IMAGE: u64 = 260;

pub async fn dry_run(mut plan: Plan, opts: &RunOptions) -> Result<DryRun, RunError> {
    let run_dir = runner::run_dir(&plan, opts);
    let cx = StageContext::detached(&run_dir)?;
    let source = plan.source.estimate(&cx).await?;
    let mut out = DryRun {
        run_dir: run_dir.clone(),
        source_kind: plan.source_kind.clone(),
        source,
        ..Default::default()
    };
    // What an earlier run left: settled videos per stage (same fingerprint only), the cache.
    let (done, sources) = prior_work(&run_dir, &plan).await?;
    let local = opts.work_dir.clone().unwrap_or_else(|| run_dir.clone());
    if let Some(cache) = ResponseCache::open_existing(&ResponseCache::path_in(&local))? {
        for s in cache.stats()? {
            if s.entries > 0 {
                *out.cached.entry(s.service.clone()).or_default() += s.entries;
                *out.source_cached.entry(s.method.clone()).or_default() += s.entries as u64;
            }
        }
    }
    let mut reach = match (sources, out.source.videos) {
        // A collection that ran: its videos are known.
        (Some(n), _) if n > 0 => n,
        (_, Some(n)) => n,
        (_, None) => 0,
    };
    for st in &plan.stages {
        let est = st.task.estimate();
        let (settled, kept) = done.get(&st.id).copied().unwrap_or((0, 0));
        let todo = reach.saturating_sub(settled);
        let mut line = StageLine {
            stage: st.id.clone(),
            kind: st.kind.clone(),
            videos: reach,
            free: settled.min(reach),
            ..Default::default()
        };
        let mut modes = vec![];
        for call in &est.calls {
            let svc = plan.services.get(&call.service);
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
        out.stages.push(line);
        // Videos kept before plus the new ones (all assumed to pass).
        reach = kept + todo;
    }
    Ok(out)
}

/// Per stage id, (videos settled, videos kept) by an earlier run under the plan's fingerprint,
/// and the number of collected source videos; nothing when there is no run yet.
async fn prior_work(
    run_dir: &std::path::Path,
    plan: &Plan,
) -> Result<(HashMap<String, (u64, u64)>, Option<u64>), RunError> {
    let mut done = HashMap::new();
    let location = run_dir.to_string_lossy().to_string();
    let local_missing =
        !crate::store::objects::is_url(&location) && !run_dir.join("manifest.json").exists();
    if local_missing {
        return Ok((done, None));
    }
    let Ok(view) = crate::store::run::RunView::open(run_dir).await else {
        return Ok((done, None));
    };
    let data = crate::stages::selection::read_stages(&view, &[]).await?;
    let (rows, _) = data.funnel_of(&data.sources, false);
    let (_store, m) = (&view.store, &view.manifest);
    for row in &rows {
        let same = m.stages.iter().any(|ms| {
            ms.id == row.stage
                && plan
                    .stages
                    .iter()
                    .any(|s| s.id == ms.id && s.fingerprint == ms.fingerprint)
        });
        if same {
            done.insert(
                row.stage.clone(),
                ((row.done + row.rejected) as u64, row.out as u64),
            );
        }
    }
    Ok((done, Some(data.sources.len() as u64)))
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
        "dry run into {} (nothing is called)",
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
        "total: {} model calls, ${live:.4} live or ${batch:.4} in batch mode, {} of frames",
        d.total_calls(),
        gib(disk)
    );
    for (svc, n) in &d.cached {
        let _ = writeln!(t, "cache: {n} answers of service {svc} already paid for");
    }
    let _ = writeln!(
        t,
        "(upper bounds: every video passes every select, no repair, every answer uses max_tokens)"
    );
    t
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
}
