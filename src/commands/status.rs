//! `vidcurate status RUN`: per rank and per stage, how many videos are done, rejected and still
//! pending, and how each rank's last invocation ended, so an operator knows which ranks to
//! resubmit. Reads committed shards only (through the same readers as `rethreshold`), the pin and
//! the per-rank manifests; writes nothing.
//!
//! `pending` follows the funnel: a video is pending at a stage when every stage before it passed
//! it on (under the pipeline's own thresholds) and this stage has not settled it yet.

use crate::error::RunError;
use crate::runtime::ranks::{self, Pin, Rank};
use crate::stages::selection::{FunnelRow, read_stages};
use crate::store::manifest::{self, InvocationStatus};
use crate::store::run::RunView;
use std::path::Path;

/// One rank's view.
#[derive(Debug)]
pub struct RankStatus {
    pub rank: u32,
    /// How its last invocation ended (None: no worker of this rank has started).
    pub last: Option<(InvocationStatus, String)>,
    pub funnel: Vec<FunnelRow>,
    /// Source videos of this rank.
    pub videos: usize,
}

impl RankStatus {
    /// Whether a worker must still run for this rank: it never ran, its last run did not end
    /// complete, or videos are pending.
    pub fn unfinished(&self) -> bool {
        !matches!(self.last, Some((InvocationStatus::Complete, _)))
            || self.funnel.iter().any(|r| r.pending > 0)
    }
}

#[derive(Debug)]
pub struct Status {
    pub pin: Option<Pin>,
    pub ranks: Vec<RankStatus>,
    /// Per table, the videos whose rows reruns retired, by reason (`store::shards::retired`).
    pub retired: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>>,
    /// Stored splits holding videos the run no longer selects.
    pub stale_splits: Vec<crate::release::split::stale::StaleSplit>,
}

pub async fn status(run: &Path) -> Result<Status, RunError> {
    let view = RunView::open(run).await?;
    let store = &view.store;
    let pin: Option<Pin> = match store.get(ranks::PIN).await {
        Ok(b) => serde_json::from_slice(&b).ok(),
        Err(_) => None,
    };
    let world = pin.as_ref().map_or(1, |p| p.world.max(1));
    let data = read_stages(&view, &[]).await?;
    let retired = crate::store::shards::retired::all_counts(store.as_ref()).await?;
    let shown = run.display().to_string();
    let stale_splits = crate::release::split::stale::stale_splits(&view, &shown).await?;
    let mut out = Status {
        pin,
        ranks: vec![],
        retired,
        stale_splits,
    };
    for r in 0..world {
        let rank = Rank {
            rank: r,
            world,
            explicit: world > 1,
        };
        let mine: Vec<String> = data
            .sources
            .iter()
            .filter(|v| rank.owns(v))
            .cloned()
            .collect();
        let (rows, _) = data.funnel_of(&mine, false);
        let last = manifest::load_at(store.as_ref(), &rank.manifest_path())
            .await
            .and_then(|m| m.invocations.last().cloned())
            .map(|i| (i.status, i.finished_at.unwrap_or(i.started_at)));
        out.ranks.push(RankStatus {
            rank: r,
            last,
            funnel: rows,
            videos: mine.len(),
        });
    }
    Ok(out)
}

/// The report as printed by the CLI.
pub fn render(s: &Status) -> String {
    let mut t = String::new();
    match &s.pin {
        Some(p) => {
            t += &format!(
                "world {} (pipeline {}, vidcurate {})\n",
                p.world, p.pipeline_fingerprint, p.tool_version
            )
        }
        None => t += "no run.json: a run of an earlier version, read as one rank\n",
    }
    t += &format!(
        "{:<6} {:<12} {:<26} {:>7} {:<14} {:>7} {:>8} {:>8} {:>7}\n",
        "rank", "last run", "at", "videos", "stage", "done", "rejected", "pending", "out"
    );
    for r in &s.ranks {
        let (state, at) = match &r.last {
            Some((st, at)) => (format!("{st:?}").to_lowercase(), at.clone()),
            None => ("never".into(), "-".into()),
        };
        for (i, f) in r.funnel.iter().enumerate() {
            let (rank, state, at, videos) = if i == 0 {
                (
                    r.rank.to_string(),
                    state.as_str(),
                    at.as_str(),
                    r.videos.to_string(),
                )
            } else {
                (String::new(), "", "", String::new())
            };
            t += &format!(
                "{rank:<6} {state:<12} {at:<26} {videos:>7} {:<14} {:>7} {:>8} {:>8} {:>7}\n",
                f.stage, f.done, f.rejected, f.pending, f.out
            );
        }
        if r.funnel.is_empty() {
            t += &format!("{:<6} {state:<12} {at:<26} {:>7}\n", r.rank, r.videos);
        }
    }
    for (table, why) in &s.retired {
        let parts: Vec<String> = why.iter().map(|(w, n)| format!("{n} {w}")).collect();
        t += &format!("retired from {table} by reruns: {}\n", parts.join(", "));
    }
    for st in &s.stale_splits {
        t += &crate::release::split::stale::render(st);
    }
    let todo: Vec<String> = s
        .ranks
        .iter()
        .filter(|r| r.unfinished())
        .map(|r| r.rank.to_string())
        .collect();
    t += &if todo.is_empty() {
        "every rank is complete\n".to_string()
    } else {
        format!("ranks to run again: {}\n", todo.join(","))
    };
    t
}

/// Per rank and stage: videos done, rejected, pending, and how each rank's last run ended;
/// the last line lists the ranks to run again (exit 0 when every rank is complete, 5 when
/// some are not), for scripts that resubmit only those.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …).
    pub run: std::path::PathBuf,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let s = crate::runtime::tokio_runtime()?.block_on(status(&a.run))?;
    print!("{}", render(&s));
    Ok(if s.ranks.iter().any(|r| r.unfinished()) {
        crate::error::Exit::Unfinished
    } else {
        crate::error::Exit::Done
    })
}
