//! Runs a `Plan` against a run directory: wires the channels, spawns the tasks, handles Ctrl-C,
//! and writes the manifest before and after.
//!
//! Here: the options, the report, and the loop over passes (a pass again after batches
//! answered deferred requests). `open` opens and locks the run directory and pins the worker,
//! `pass` sets up and runs the tasks of one pass, `manifest` records each invocation.

mod manifest;
mod open;
mod pass;

use super::StageCounts;
use super::progress::Progress;
use super::ranks::Rank;
use super::watch::{self, StallPolicy};
use crate::error::RunError;
use crate::runtime::chain::Plan;
use manifest::start_manifest;
use pass::{
    compact_tables, end_pass, open_pass, open_source, remove_local_media, send_deferred,
    settle_recorded, spawn_chain,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Run directory (a folder or an object-store URL); overrides the pipeline's `output.dir`.
    pub out: Option<PathBuf>,
    /// No progress bars.
    pub quiet: bool,
    /// This process's share of the videos.
    pub rank: Rank,
    /// Replace the run's pin with this worker's settings (start over with new settings).
    pub repin: bool,
    /// Local working folder of a run on an object store (media to decode, the response cache);
    /// default: a folder under the system temp dir named after the run's URL.
    pub work_dir: Option<PathBuf>,
    /// The metrics endpoint's view of the run (`run --metrics`).
    pub metrics: Option<std::sync::Arc<super::metrics::Hub>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RunStatus {
    Complete,
    Interrupted,
}

#[derive(Debug)]
pub struct RunReport {
    pub run_dir: PathBuf,
    pub status: RunStatus,
    pub counts: BTreeMap<String, StageCounts>,
    /// Stage ids in chain order (source first).
    pub order: Vec<String>,
    /// Passes over the videos (more than one when model requests went through batches).
    pub passes: u32,
    /// What the batches between passes answered.
    pub batches: super::batch::Settled,
    /// (service, model, what it refused) of each server whose structured-output dialect the
    /// run's cache holds (`clients::llm`'s ladder).
    pub dialects: Vec<(String, String, Vec<String>)>,
}

impl RunReport {
    /// Videos rejected by any stage, in this invocation or an earlier one (the final dataset's view).
    pub fn rejected(&self) -> u64 {
        self.counts
            .values()
            .map(|c| c.rejected + c.rejected_before)
            .sum()
    }
}

/// The run directory a plan writes to.
pub fn run_dir(plan: &Plan, opts: &RunOptions) -> PathBuf {
    opts.out
        .clone()
        .or_else(|| plan.output.dir.clone())
        .unwrap_or_else(|| Path::new("data").join("runs").join(&plan.name))
}

/// Runs `plan` to the end: one pass over the videos, and when model services in batch mode
/// deferred requests, their batches and another pass (which finds the answers in the cache),
/// until no video waits. An offline-mode service's requests stop the run with what to do.
///
/// `replan` builds the chain again for the next pass (a chain's tasks are consumed by a pass):
/// the command hands it over, so the runtime needs no planner.
pub async fn run(
    plan: Plan,
    opts: RunOptions,
    replan: &(dyn Fn() -> Result<Plan, RunError> + Sync),
) -> Result<RunReport, RunError> {
    let mut plan = plan;
    let mut passes = 1;
    let mut batches = super::batch::Settled::default();
    loop {
        let (mut report, pass) = run_pass(plan, &opts).await?;
        batches.jobs += pass.settled.jobs;
        batches.answered += pass.settled.answered;
        batches.errors += pass.settled.errors;
        report.passes = passes;
        report.batches = batches;
        let deferred: u64 = report.counts.values().map(|c| c.deferred).sum();
        if report.status == RunStatus::Interrupted || deferred == 0 {
            return Ok(report);
        }
        if !pass.offline.is_empty() {
            // Named when one stage waits, so the two commands can be pasted as they are.
            let waiting: Vec<&str> = (report.counts.iter())
                .filter(|(_, c)| c.deferred > 0)
                .map(|(s, _)| s.as_str())
                .collect();
            let stage = match waiting[..] {
                [one] => one,
                _ => "STAGE",
            };
            let run = report.run_dir.display();
            return Err(RunError::Stopped(format!(
                "{deferred} videos wait for answers of an offline-mode service ({}): write the requests with `vidcurate batch export {run} {stage} > requests.jsonl`, answer them (e.g. `vllm run-batch -i requests.jsonl -o results.jsonl -m MODEL`), read them back with `vidcurate batch import {run} {stage} results.jsonl`, and rerun",
                pass.offline.join(", "),
            )));
        }
        if pass.settled.answered + pass.settled.errors == 0 {
            return Err(RunError::Internal(format!(
                "{deferred} videos were deferred to a batch, but no batch answered anything; see {}/batches/",
                report.run_dir.display()
            )));
        }
        tracing::info!(
            pass = passes,
            deferred,
            answered = pass.settled.answered,
            errors = pass.settled.errors,
            "Batches answered; running the deferred videos again."
        );
        passes += 1;
        plan = replan()?;
    }
}

/// `run`, with the metrics endpoint on `endpoint` (bound by the caller) while it runs, and up
/// to `hold` after it, until Prometheus has read the final counts.
pub async fn run_watched(
    plan: Plan,
    opts: RunOptions,
    endpoint: Option<std::net::TcpListener>,
    hold: Duration,
    replan: &(dyn Fn() -> Result<Plan, RunError> + Sync),
) -> Result<RunReport, RunError> {
    let hub = opts.metrics.clone();
    if let (Some(l), Some(hub)) = (endpoint, &hub) {
        super::metrics::serve(l, hub.clone())
            .map_err(|e| RunError::Config(format!("--metrics: {e}")))?;
    }
    let report = run(plan, opts, replan).await;
    if let Some(hub) = hub {
        hub.run_ended();
        hub.hold(hold).await;
    }
    report
}

/// What one pass did with batches.
struct PassBatches {
    settled: super::batch::Settled,
    /// Offline-mode services with requests waiting.
    offline: Vec<String>,
}

async fn run_pass(plan: Plan, opts: &RunOptions) -> Result<(RunReport, PassBatches), RunError> {
    let env = open_pass(&plan, opts).await?;
    let batch_services = plan.batch_services.clone();
    let mut settled = settle_recorded(&env, &batch_services).await?;
    let mut plan = plan;
    let opened = open_source(&mut plan, &env).await?;
    let mut m = start_manifest(env.store.as_ref(), &plan, &opened.extras, &env.rank).await?;

    let mut progress = Progress::new(opts.quiet);
    let (cap, stall_secs) = (plan.runtime.channel_capacity, plan.runtime.stall_secs);
    let services = plan.services.clone();
    let chain = spawn_chain(
        &env,
        plan,
        opened.collect_for,
        &opened.extras,
        &mut progress,
    );
    if let Some(t) = opened.total {
        progress.set_total(t);
    }
    if let Some(hub) = &opts.metrics {
        hub.pass_started(super::metrics::PassView {
            watches: chain.watches.clone(),
            capacity: cap,
            cache: env.cache.clone(),
            cpu: env.cpu.clone(),
            services,
        });
    }
    let log_stop = CancellationToken::new();
    progress.spawn_logger(Duration::from_secs(10), log_stop.clone());
    if stall_secs > 0 {
        watch::spawn_monitor(
            chain.watches,
            cap,
            env.cpu.clone(),
            StallPolicy::new(Duration::from_secs(stall_secs)),
            log_stop.clone(),
        );
    }

    let (counts, interrupted) =
        end_pass(&env, chain.tasks, &chain.source_stop, &log_stop, &mut m).await?;
    if !interrupted {
        remove_local_media(&env);
        compact_tables(&env, &chain.order).await?;
    }
    let offline = send_deferred(&env, &batch_services, interrupted, &mut settled).await?;
    let interrupted = interrupted || env.cancel.is_cancelled();
    Ok((
        RunReport {
            run_dir: env.run_dir.clone(),
            status: if interrupted {
                RunStatus::Interrupted
            } else {
                RunStatus::Complete
            },
            counts,
            order: chain.order,
            passes: 1,
            batches: Default::default(),
            dialects: (env.cache.opened())
                .and_then(|c| c.dialects().ok())
                .unwrap_or_default(),
        },
        PassBatches { settled, offline },
    ))
}
