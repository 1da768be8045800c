//! Runs a `Plan` against a run directory: wires the channels, spawns the tasks, handles Ctrl-C,
//! and writes the manifest before and after.

use super::progress::Progress;
use super::ranks::{self, Pin, Rank};
use super::stage::{CpuPool, StageContext};
use super::watch::{self, StageWatch, StallPolicy};
use super::{StageCounts, StageIo, StageSettings};
use crate::error::RunError;
use crate::record::{Extras, VideoRecord};
use crate::runtime::chain::{Plan, SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use crate::store::Store;
use crate::store::manifest::{self, Invocation, InvocationStatus, Manifest, ManifestStage};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
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

fn lock(dir: &Path) -> Result<std::fs::File, RunError> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| RunError::io(path.display().to_string(), e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(RunError::Config(format!(
            "{}: another vidcurate run is using this run directory",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(RunError::io(path.display().to_string(), e)),
    }
}

/// An opened run directory.
struct OpenedRun {
    store: Arc<dyn Store>,
    /// The local folder media and the response cache live in.
    work: PathBuf,
    /// Keeps a second single-process run out of a local run directory while held.
    _lock: Option<std::fs::File>,
}

fn open_store(dir: &Path, opts: &RunOptions) -> Result<OpenedRun, RunError> {
    let location = dir.to_string_lossy().to_string();
    let err = |e| RunError::io(location.clone(), e);
    // Ranks share the folder, so a temp file may be another worker's write in progress.
    let access = if opts.rank.explicit {
        crate::store::Access::Share
    } else {
        crate::store::Access::Own
    };
    if crate::store::objects::is_url(&location) {
        let store = crate::store::open_run(&location, access).map_err(err)?;
        let work = opts.work_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir()
                .join("vidcurate-work")
                .join(&blake3::hash(location.as_bytes()).to_hex()[..16])
        });
        std::fs::create_dir_all(&work).map_err(|e| RunError::io(work.display().to_string(), e))?;
        return Ok(OpenedRun {
            store,
            work,
            _lock: None,
        });
    }
    std::fs::create_dir_all(dir).map_err(err)?;
    // Ranks share the folder (the shard protocol keeps them apart); a single process owns it.
    let lock = if opts.rank.explicit {
        None
    } else {
        Some(lock(dir)?)
    };
    let store = crate::store::open_run(&location, access).map_err(err)?;
    let work = dir.canonicalize().map_err(err)?;
    Ok(OpenedRun {
        store,
        work,
        _lock: lock,
    })
}

/// Checks that the store answers and accepts our credentials before any work: a refused
/// credential is a configuration error (exit 2), not a reject per video.
async fn check_store(store: &dyn Store) -> Result<(), RunError> {
    match store.exists(ranks::PIN).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(RunError::Config(format!(
                "{}: the store refused our credentials ({e}); set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the GCS/Azure equivalents) in the environment",
                store.location()
            )))
        }
        Err(e) => Err(RunError::io(store.location(), e)),
    }
}

/// What every worker of a run must share: world size, the pipeline's fingerprint (source
/// settings and every stage's), tool version.
fn pin_of(plan: &Plan, rank: &Rank) -> Pin {
    let mut h = blake3::Hasher::new();
    h.update(plan.source_kind.as_bytes());
    h.update(plan.source_settings.to_string().as_bytes());
    for s in &plan.stages {
        h.update(s.id.as_bytes());
        h.update(s.fingerprint.as_bytes());
    }
    Pin {
        world: rank.world,
        pipeline_fingerprint: h.finalize().to_hex()[..16].to_string(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
    }
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
            return Err(RunError::Stopped(format!(
                "{deferred} videos wait for answers of an offline-mode service ({}): write the requests with `vidcurate batch export {} STAGE > requests.jsonl`, answer them (e.g. `vllm run-batch -i requests.jsonl -o results.jsonl -m MODEL`), read them back with `vidcurate batch import {} results.jsonl`, and rerun",
                pass.offline.join(", "),
                report.run_dir.display(),
                report.run_dir.display()
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
        },
        PassBatches { settled, offline },
    ))
}

/// What one pass shares with every stage: the opened run, this worker's pin, Ctrl-C, the CPU
/// pool and the response cache.
struct PassEnv {
    /// Held for the whole pass (it keeps the run directory's lock).
    _opened: OpenedRun,
    store: Arc<dyn Store>,
    run_dir: PathBuf,
    rank: Rank,
    pin: Pin,
    cancel: CancellationToken,
    cpu: CpuPool,
    cache: crate::store::cache::CacheHandle,
    /// Each stage's chain position: stages submit CPU work under it (later stages first).
    chain_pos: BTreeMap<String, u32>,
    local_media: super::stage::LocalMedia,
}

/// Opens the run directory, checks the store and the pin, and sets up what the stages share.
async fn open_pass(plan: &Plan, opts: &RunOptions) -> Result<PassEnv, RunError> {
    let dir = run_dir(plan, opts);
    let opened = open_store(&dir, opts)?;
    let (store, run_dir) = (opened.store.clone(), opened.work.clone());
    check_store(store.as_ref()).await?;
    let rank = opts.rank;
    let pin = pin_of(plan, &rank);
    ranks::pin(store.as_ref(), &pin, &rank, opts.repin).await?;
    let cancel = CancellationToken::new();
    spawn_ctrl_c(cancel.clone());
    let threads = plan.runtime.cpu_threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let cpu = CpuPool::new(threads);
    // On an object store each worker's cache is in its own work folder: answers are shared
    // through the store (published with every shard commit, imported here).
    let cache = if store.local_path("").is_none() {
        let c = crate::store::cache::CacheHandle::shared(&run_dir, store.clone(), rank.rank);
        c.import_parts().await?;
        c
    } else {
        crate::store::cache::CacheHandle::new(&run_dir)
    };
    let chain_pos = std::iter::once(SOURCE_STAGE_ID.to_string())
        .chain(plan.stages.iter().map(|s| s.id.clone()))
        .zip(0u32..)
        .collect();
    Ok(PassEnv {
        _opened: opened,
        store,
        run_dir,
        rank,
        pin,
        cancel,
        cpu,
        cache,
        chain_pos,
        local_media: Default::default(),
    })
}

impl PassEnv {
    /// The context of one stage (or of the source).
    fn context(&self, id: &str, fingerprint: &str, extras: Extras) -> StageContext {
        let pos = self.chain_pos.get(id).copied().unwrap_or(0);
        StageContext {
            stage_id: id.to_string(),
            fingerprint: fingerprint.to_string(),
            store: self.store.clone(),
            run_dir: self.run_dir.clone(),
            cache: self.cache.clone(),
            cpu: self.cpu.for_stage(id, pos),
            cancel: self.cancel.clone(),
            extras,
            tally: Default::default(),
            rank: self.rank,
            local_media: self.local_media.clone(),
        }
    }

    /// Polls one batch service's batches to their end, adding what they answered to `settled`.
    async fn settle(
        &self,
        svc: &dyn super::batch::BatchService,
        settled: &mut super::batch::Settled,
    ) -> Result<(), RunError> {
        let c = self.cache.get().map_err(|e| RunError::Internal(e.detail))?;
        let s = svc.settle(&c, &self.cancel).await?;
        settled.jobs += s.jobs;
        settled.answered += s.answered;
        settled.errors += s.errors;
        Ok(())
    }
}

/// Batches recorded by an earlier invocation (a kill while they ran) are polled to their end
/// first, so this pass finds their answers and sends none of them again.
async fn settle_recorded(
    env: &PassEnv,
    services: &[Arc<dyn super::batch::BatchService>],
) -> Result<super::batch::Settled, RunError> {
    let mut settled = super::batch::Settled::default();
    for svc in services {
        svc.attach(&env.run_dir)?;
        if svc.sends_batches() {
            env.settle(svc.as_ref(), &mut settled).await?;
        }
    }
    Ok(settled)
}

/// The source of this pass, opened.
struct OpenedSource {
    /// Rank 0 of a ranked run whose source collects once: the pipeline fingerprint.
    collect_for: Option<String>,
    extras: Extras,
    total: Option<u64>,
}

/// Opens the plan's source (on ranks other than 0 of a source that collects once: the table
/// rank 0 collects instead) and checks its extra columns against the stages'.
async fn open_source(plan: &mut Plan, env: &PassEnv) -> Result<OpenedSource, RunError> {
    let rank = env.rank;
    // A source that spends a quota collects once per run: on rank 0, for every rank.
    let collects_once = rank.world > 1 && plan.source.collects_once();
    if collects_once && rank.rank != 0 {
        plan.source = Box::new(super::collected::CollectedSource::instead_of(
            plan.source.as_ref(),
            &env.pin.pipeline_fingerprint,
        ));
    }
    let collect_for =
        (collects_once && rank.rank == 0).then(|| env.pin.pipeline_fingerprint.clone());
    let pre_cx = env.context(SOURCE_STAGE_ID, SOURCE_FINGERPRINT, Arc::new(vec![]));
    plan.source.open(&pre_cx).await?;
    let extras = plan.source.extras();
    check_extra_columns(&extras, &plan.stages)?;
    let total = plan.source.total();
    Ok(OpenedSource {
        collect_for,
        extras,
        total,
    })
}

/// The tasks of one pass and what the runner watches them by.
struct Chain {
    tasks: JoinSet<(String, Result<StageCounts, RunError>)>,
    /// Stage ids in chain order (source first).
    order: Vec<String>,
    watches: Vec<Arc<StageWatch>>,
    /// Where a source that stops half-way leaves its error.
    source_stop: Arc<std::sync::Mutex<Option<RunError>>>,
}

/// Spawns the source task, one task per stage (each reading the channel of the one before),
/// and the drain at the end of the chain.
fn spawn_chain(
    env: &PassEnv,
    plan: Plan,
    collect_for: Option<String>,
    extras: &Extras,
    progress: &mut Progress,
) -> Chain {
    let source = plan.source;
    let flush_every = Duration::from_secs(plan.output.flush_secs);
    let settings_for = |max_in_flight, timeout, retries| StageSettings {
        max_in_flight,
        timeout,
        retries,
        max_rows_per_shard: plan.output.max_rows_per_shard,
        flush_every,
    };
    let cap = plan.runtime.channel_capacity;
    let mut order = vec![SOURCE_STAGE_ID.to_string()];
    let mut tasks: JoinSet<(String, Result<StageCounts, RunError>)> = JoinSet::new();

    let started = std::time::Instant::now();
    let mut watches = vec![];
    let (tx, mut rx) = mpsc::channel::<VideoRecord>(cap);
    let sw = StageWatch::new(SOURCE_STAGE_ID, started);
    watches.push(sw.clone());
    let sp = progress.stage(SOURCE_STAGE_ID);
    let scx = env.context(SOURCE_STAGE_ID, SOURCE_FINGERPRINT, extras.clone());
    let ss = settings_for(1, None, 0);
    let source_stop = Arc::new(std::sync::Mutex::new(None));
    let stop_slot = source_stop.clone();
    tasks.spawn(async move {
        (
            SOURCE_STAGE_ID.to_string(),
            super::run_source(
                source,
                tx,
                scx,
                ss,
                sp,
                sw,
                super::SourceRole {
                    collect_for,
                    stopped: stop_slot,
                },
            )
            .await,
        )
    });
    for st in plan.stages {
        let (tx, next_rx) = mpsc::channel::<VideoRecord>(cap);
        let watch = StageWatch::new(&st.id, started);
        watches.push(watch.clone());
        let io = StageIo {
            input: rx,
            output: tx,
            settings: settings_for(st.max_in_flight, st.timeout, st.retries),
            progress: progress.stage(&st.id),
            watch,
        };
        let cx = env.context(&st.id, &st.fingerprint, extras.clone());
        order.push(st.id.clone());
        let id = st.id.clone();
        let task = st.task;
        tasks.spawn(async move { (id, task.run(io, cx).await) });
        rx = next_rx;
    }
    // The end of the chain: everything is persisted by the stages, so just drain.
    tasks.spawn(async move {
        while rx.recv().await.is_some() {}
        (DRAIN.to_string(), Ok(StageCounts::default()))
    });
    Chain {
        tasks,
        order,
        watches,
        source_stop,
    }
}

/// Waits for the stages, publishes this worker's answers, stops the logger and records how the
/// invocation ended in the manifest. Ok: the counts, and whether Ctrl-C interrupted the pass;
/// Err: the first failure (a stage's, or the source's).
async fn end_pass(
    env: &PassEnv,
    tasks: JoinSet<(String, Result<StageCounts, RunError>)>,
    source_stop: &std::sync::Mutex<Option<RunError>>,
    log_stop: &CancellationToken,
    m: &mut Manifest,
) -> Result<(BTreeMap<String, StageCounts>, bool), RunError> {
    let (counts, failure) = join_stages(tasks, &env.cancel).await;
    let failure = failure.or_else(|| source_stop.lock().unwrap_or_else(|p| p.into_inner()).take());
    // Calls of videos not committed yet (a failure, an interrupt) are paid for too.
    if let Err(e) = env.cache.publish().await {
        tracing::warn!(error = %e, "Could not publish this worker's last answers to the run's store; a rerun elsewhere may repeat those calls.");
    }
    log_stop.cancel();

    let interrupted = env.cancel.is_cancelled() && failure.is_none();
    let status = match (&failure, interrupted) {
        (Some(_), _) => InvocationStatus::Failed,
        (None, true) => InvocationStatus::Interrupted,
        (None, false) => InvocationStatus::Complete,
    };
    finish_manifest(
        env.store.as_ref(),
        m,
        &counts,
        status,
        failure.as_ref(),
        &env.rank,
    )
    .await?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok((counts, interrupted))
}

/// Every video of this invocation is committed: the store has its media, and a rerun fetches
/// again what it needs. (After an interrupt the copies save the resume a fetch.)
fn remove_local_media(env: &PassEnv) {
    let (files, bytes) = env.local_media.remove_all();
    if files > 0 {
        tracing::info!(
            files,
            mib = bytes >> 20,
            "Removed the local media copies of this run from the work folder."
        );
    }
}

/// The requests this pass deferred go out now; the next pass reads their answers. Returns the
/// offline-mode services with requests waiting (nobody sends theirs).
async fn send_deferred(
    env: &PassEnv,
    services: &[Arc<dyn super::batch::BatchService>],
    interrupted: bool,
    settled: &mut super::batch::Settled,
) -> Result<Vec<String>, RunError> {
    let mut offline = vec![];
    for svc in services.iter().filter(|_| !interrupted) {
        if svc.pending() == 0 {
            continue;
        }
        if !svc.sends_batches() {
            offline.push(svc.name().to_string());
            continue;
        }
        let jobs = svc.chunk()?;
        tracing::info!(service = %svc.name(), jobs, "Sending the deferred requests as batches.");
        env.settle(svc.as_ref(), settled).await?;
    }
    Ok(offline)
}

/// Writes the manifest for this invocation before any work: the pipeline as run, each stage's
/// fingerprint and compute settings, and a `running` entry (what a killed run leaves behind).
async fn start_manifest(
    store: &dyn Store,
    plan: &Plan,
    extras: &[String],
    rank: &Rank,
) -> Result<Manifest, RunError> {
    let started_at = manifest::now();
    let previous = manifest::load_at(store, &rank.manifest_path()).await;
    let mut m = Manifest {
        tool: "vidcurate".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        pipeline_name: plan.name.clone(),
        pipeline_file: plan.file.display().to_string(),
        pipeline_toml: plan.text.clone(),
        source: serde_json::json!({ "type": plan.source_kind, "settings": plan.source_settings, "extra_columns": extras }),
        stages: std::iter::once(ManifestStage {
            id: SOURCE_STAGE_ID.into(),
            kind: plan.source_kind.clone(),
            fingerprint: SOURCE_FINGERPRINT.into(),
            compute: serde_json::Value::Null,
            table: format!("{SOURCE_STAGE_ID}/"),
        })
        .chain(plan.stages.iter().map(|s| ManifestStage {
            id: s.id.clone(),
            kind: s.kind.clone(),
            fingerprint: s.fingerprint.clone(),
            compute: s.compute.clone(),
            table: format!("{}/", s.id),
        }))
        .collect(),
        invocations: previous.map(|p| p.invocations).unwrap_or_default(),
    };
    m.invocations.push(Invocation {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        finished_at: None,
        status: InvocationStatus::Running,
        error: None,
        counts: BTreeMap::new(),
    });
    save_manifest(store, &m, rank).await?;
    Ok(m)
}

/// Waits for every stage task. The first failure cancels the run and aborts the other tasks
/// (dropping their channel ends stops them); a panic is an internal error.
async fn join_stages(
    mut tasks: JoinSet<(String, Result<StageCounts, RunError>)>,
    cancel: &CancellationToken,
) -> (BTreeMap<String, StageCounts>, Option<RunError>) {
    let mut counts = BTreeMap::new();
    let mut failure: Option<RunError> = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((id, Ok(c))) => {
                if id != DRAIN {
                    counts.insert(id, c);
                }
            }
            Ok((id, Err(e))) => {
                tracing::error!(stage = %id, error = %e, "Stage failed; stopping the run.");
                failure.get_or_insert(e);
                cancel.cancel();
                tasks.abort_all();
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                failure.get_or_insert(RunError::Internal(format!("a stage task panicked: {e}")));
                cancel.cancel();
                tasks.abort_all();
            }
        }
    }
    (counts, failure)
}

/// Records how the invocation ended, with its counts.
async fn finish_manifest(
    store: &dyn Store,
    m: &mut Manifest,
    counts: &BTreeMap<String, StageCounts>,
    status: InvocationStatus,
    failure: Option<&RunError>,
    rank: &Rank,
) -> Result<(), RunError> {
    let inv = m.invocations.last_mut().expect("start_manifest pushed it");
    inv.finished_at = Some(manifest::now());
    inv.counts = counts.clone();
    inv.status = status;
    inv.error = failure.map(|e| e.to_string());
    save_manifest(store, m, rank).await
}

/// A rank keeps its invocations in `ranks/rNNNN/manifest.json`; `manifest.json` then carries the
/// pipeline and fingerprints (the same for every rank: the pin guarantees it) for the readers.
async fn save_manifest(store: &dyn Store, m: &Manifest, rank: &Rank) -> Result<(), RunError> {
    let path = rank.manifest_path();
    manifest::save_at(store, &path, m)
        .await
        .map_err(|e| RunError::io(path.clone(), e))?;
    if path != manifest::MANIFEST {
        manifest::save_at(store, manifest::MANIFEST, m)
            .await
            .map_err(|e| RunError::io(manifest::MANIFEST, e))?;
    }
    Ok(())
}

/// The task that drains the end of the chain (everything is persisted by the stages).
const DRAIN: &str = "_drain";

/// The source's extra columns are written into every table: one named like a stage's own
/// column would sit beside it under the same name, and readers would pick either.
fn check_extra_columns(
    extras: &[String],
    stages: &[crate::runtime::chain::PlannedStage],
) -> Result<(), RunError> {
    use crate::record::{COL_FINGERPRINT, COL_VIDEO_ID};
    for x in extras {
        if x == COL_VIDEO_ID || x == COL_FINGERPRINT {
            return Err(RunError::Config(format!(
                "manifest column `{x}` is a name every table uses; rename the column"
            )));
        }
        for st in stages {
            if st.task.columns().iter().any(|c| c == x) {
                return Err(RunError::Config(format!(
                    "manifest column `{x}` has the name of a column of stage `{}` (type {}); rename the manifest column",
                    st.id, st.kind
                )));
            }
        }
    }
    Ok(())
}

/// First Ctrl-C: stop taking new videos, finish and persist what is in flight. Second: exit now
/// (shards already written stay valid; the rerun redoes the rest).
fn spawn_ctrl_c(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\nvidcurate: stopping: finishing videos in flight (Ctrl-C again to quit at once)"
            );
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("vidcurate: quitting; rerun the same command to resume");
                std::process::exit(130);
            }
        }
    });
}
