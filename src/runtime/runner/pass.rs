//! One pass over the videos: what its stages share (`PassEnv`), the source opened for it, the
//! tasks spawned and joined by bounded channels, and, at its end, the answers published and
//! the deferred requests sent as batches.
//! Reads the plan and the opened run (`open`); writes through the stages' tasks, the cache
//! and the manifest (`manifest`); calls the batch services.

use super::manifest::finish_manifest;
use super::open::{OpenedRun, check_store, open_store, pin_of, spawn_ctrl_c};
use super::{RunOptions, run_dir};
use crate::error::RunError;
use crate::record::{Extras, VideoRecord};
use crate::runtime::chain::{Plan, SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use crate::runtime::progress::Progress;
use crate::runtime::ranks::{self, Pin, Rank};
use crate::runtime::stage::{CpuPool, StageContext};
use crate::runtime::watch::StageWatch;
use crate::runtime::{StageCounts, StageIo, StageSettings};
use crate::store::Store;
use crate::store::cache::for_stage;
use crate::store::manifest::{InvocationStatus, Manifest};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What one pass shares with every stage: the opened run, this worker's pin, Ctrl-C, the CPU
/// pool and the response cache.
pub(super) struct PassEnv {
    /// Held for the whole pass (it keeps the run directory's lock).
    _opened: OpenedRun,
    pub(super) store: Arc<dyn Store>,
    pub(super) run_dir: PathBuf,
    pub(super) rank: Rank,
    pin: Pin,
    pub(super) cancel: CancellationToken,
    pub(super) cpu: CpuPool,
    pub(super) cache: crate::store::cache::CacheHandle,
    /// Each stage's chain position: stages submit CPU work under it (later stages first).
    chain_pos: BTreeMap<String, u32>,
    local_media: crate::runtime::stage::LocalMedia,
    decoded: crate::runtime::decoded::DecodedFrames,
    media_digests: crate::store::media_digests::MediaDigests,
    unsent: crate::runtime::stage::Unsent,
}

/// Opens the run directory, checks the store and the pin, and sets up what the stages share.
pub(super) async fn open_pass(plan: &Plan, opts: &RunOptions) -> Result<PassEnv, RunError> {
    let dir = run_dir(plan, opts);
    let opened = open_store(&dir, opts)?;
    let (store, run_dir) = (opened.store.clone(), opened.work.clone());
    check_store(store.as_ref()).await?;
    let rank = opts.rank;
    let pin = pin_of(plan, &rank);
    ranks::pin(store.as_ref(), &pin, &rank, opts.repin).await?;
    let cancel = CancellationToken::new();
    spawn_ctrl_c(cancel.clone());
    let cpu = CpuPool::new(plan.runtime.threads());
    let decoded = crate::runtime::decoded::DecodedFrames::new(
        plan.runtime.decoded_frames_mib << 20,
        decoded_readers(plan),
    );
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
    let digests_dir = run_dir.join(crate::store::media_digests::DIR);
    let media_digests =
        crate::store::media_digests::MediaDigests::open(&run_dir, &rank.shard_prefix())
            .map_err(crate::error::io(&digests_dir))?;
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
        decoded,
        media_digests,
        unsent: Default::default(),
    })
}

/// Each stage that provides the frames slot, with how many later stages read those frames as
/// decoded (a reader reads the frames of the last such stage before it).
fn decoded_readers(plan: &Plan) -> BTreeMap<String, u32> {
    let mut readers = BTreeMap::new();
    let mut feeder: Option<&str> = None;
    for s in &plan.stages {
        if s.task.reads_decoded_frames()
            && let Some(f) = feeder
        {
            *readers.entry(f.to_string()).or_insert(0) += 1;
        }
        if s.task.provides() == crate::record::Slot::Frames {
            feeder = Some(&s.id);
        }
    }
    readers
}

impl PassEnv {
    /// The context of one stage (or of the source).
    fn context(&self, id: &str, fingerprint: &str, extras: Extras) -> StageContext {
        let pos = self.chain_pos.get(id).copied().unwrap_or(0);
        StageContext {
            stage_id: id.to_string(),
            fingerprint: fingerprint.to_string(),
            input_salt: String::new(),
            store: self.store.clone(),
            run_dir: self.run_dir.clone(),
            cache: self.cache.clone(),
            cpu: self.cpu.for_stage(id, pos),
            cancel: self.cancel.clone(),
            extras,
            tally: Default::default(),
            rank: self.rank,
            local_media: self.local_media.clone(),
            objects: Default::default(),
            decoded: self.decoded.clone(),
            media_digests: self.media_digests.clone(),
            unsent: self.unsent.clone(),
        }
    }

    /// Polls one batch service's batches to their end, adding what they answered to `settled`.
    async fn settle(
        &self,
        svc: &dyn crate::runtime::batch::BatchService,
        settled: &mut crate::runtime::batch::Settled,
    ) -> Result<(), RunError> {
        let c = self.cache.get()?;
        let s = svc.settle(&c, &self.cancel).await?;
        settled.jobs += s.jobs;
        settled.answered += s.answered;
        settled.errors += s.errors;
        Ok(())
    }
}

/// Batches recorded by an earlier invocation (a kill while they ran) are polled to their end
/// first, so this pass finds their answers and sends none of them again.
pub(super) async fn settle_recorded(
    env: &PassEnv,
    services: &[Arc<dyn crate::runtime::batch::BatchService>],
) -> Result<crate::runtime::batch::Settled, RunError> {
    let mut settled = crate::runtime::batch::Settled::default();
    for svc in services {
        svc.attach(&env.run_dir)?;
        if svc.sends_batches() {
            env.settle(svc.as_ref(), &mut settled).await?;
        }
    }
    Ok(settled)
}

/// The source of this pass, opened.
pub(super) struct OpenedSource {
    /// Rank 0 of a ranked run whose source collects once: the pipeline fingerprint.
    pub(super) collect_for: Option<String>,
    pub(super) extras: Extras,
    pub(super) total: Option<u64>,
}

/// Opens the plan's source (on ranks other than 0 of a source that collects once: the table
/// rank 0 collects instead) and checks its extra columns against the stages'.
pub(super) async fn open_source(plan: &mut Plan, env: &PassEnv) -> Result<OpenedSource, RunError> {
    let rank = env.rank;
    // A source that spends a quota collects once per run: on rank 0, for every rank.
    let collects_once = rank.world > 1 && plan.source.collects_once();
    // The collection is of this pipeline and of what its source lists from (a query file):
    // after an edit there the other ranks wait for the new collection.
    let collection = match plan.source.inputs_digest() {
        d if d.is_empty() => env.pin.pipeline_fingerprint.clone(),
        d => format!("{}+{d}", env.pin.pipeline_fingerprint),
    };
    if collects_once && rank.rank != 0 {
        plan.source = Box::new(crate::runtime::collected::CollectedSource::instead_of(
            plan.source.as_ref(),
            &collection,
        ));
    }
    let collect_for = (collects_once && rank.rank == 0).then_some(collection);
    let pre_cx = env.context(SOURCE_STAGE_ID, SOURCE_FINGERPRINT, Arc::new(vec![]));
    for_stage(SOURCE_STAGE_ID, plan.source.open(&pre_cx)).await?;
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
pub(super) struct Chain {
    pub(super) tasks: JoinSet<(String, Result<StageCounts, RunError>)>,
    /// Stage ids in chain order (source first).
    pub(super) order: Vec<String>,
    pub(super) watches: Vec<Arc<StageWatch>>,
    /// Where a source that stops half-way leaves its error.
    pub(super) source_stop: Arc<std::sync::Mutex<Option<RunError>>>,
}

/// Spawns the source task, one task per stage (each reading the channel of the one before),
/// and the drain at the end of the chain.
pub(super) fn spawn_chain(
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
    sw.attach_tally(scx.tally.clone());
    let ss = settings_for(1, None, 0);
    let source_stop = Arc::new(std::sync::Mutex::new(None));
    let stop_slot = source_stop.clone();
    // Each task runs in its stage's scope: the response cache counts what it pays for there.
    let role = crate::runtime::SourceRole {
        collect_for,
        stopped: stop_slot,
        tables: plan.stages.iter().map(|s| s.id.clone()).collect(),
    };
    let source_task = crate::runtime::run_source(source, tx, scx, ss, sp, sw, role);
    tasks.spawn(for_stage(SOURCE_STAGE_ID, async move {
        (SOURCE_STAGE_ID.to_string(), source_task.await)
    }));
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
        let mut cx = env.context(&st.id, &st.fingerprint, extras.clone());
        cx.input_salt = st.input_salt.clone();
        io.watch.attach_tally(cx.tally.clone());
        order.push(st.id.clone());
        let id = st.id.clone();
        let task = st.task;
        tasks.spawn(for_stage(id.clone(), async move {
            (id, task.run(io, cx).await)
        }));
        rx = next_rx;
    }
    // The end of the chain: everything is persisted by the stages, so just drain (and drop
    // frames held for a reader that reused its rows instead of reading them).
    let decoded = env.decoded.clone();
    tasks.spawn(async move {
        while let Some(rec) = rx.recv().await {
            decoded.forget(&rec.video_id);
        }
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
pub(super) async fn end_pass(
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
pub(super) fn remove_local_media(env: &PassEnv) {
    let (files, bytes) = env.local_media.remove_all();
    if files > 0 {
        tracing::info!(
            files,
            mib = bytes >> 20,
            "Removed the local media copies of this run from the work folder."
        );
    }
}

/// After a complete pass of a single process: each stage's rows of videos the pass did not send
/// it (the selection moved on) are held apart from the table's files (`store::shards::held`).
async fn hold_unsent(env: &PassEnv) -> Result<(), RunError> {
    for (stage, settled) in env.unsent.take() {
        let n =
            crate::store::shards::held::hold(env.store.as_ref(), &stage, &settled, "held").await?;
        if n > 0 {
            tracing::info!(
                stage = %stage,
                videos = n,
                "Held apart the rows of videos the selection no longer sends to this stage (under _held/: a lowered threshold takes them back uncomputed)."
            );
        }
    }
    Ok(())
}

/// After a complete pass of a single process: the shards holding rows this pass retired are
/// written again without them (`store::shards::compact`), so the tables' files are what a clean
/// run writes. Ranks share the tables; there the tombstones alone keep the readers right.
pub(super) async fn compact_tables(env: &PassEnv, tables: &[String]) -> Result<(), RunError> {
    if env.rank.explicit {
        return Ok(());
    }
    hold_unsent(env).await?;
    for t in tables {
        let n = crate::store::shards::compact::compact(env.store.as_ref(), t).await?;
        if n > 0 {
            tracing::info!(table = %t, shards = n, "Rewrote shards without their retired rows.");
        }
    }
    Ok(())
}

/// The requests this pass deferred go out now; the next pass reads their answers. Returns the
/// offline-mode services with requests waiting (nobody sends theirs).
pub(super) async fn send_deferred(
    env: &PassEnv,
    services: &[Arc<dyn crate::runtime::batch::BatchService>],
    interrupted: bool,
    settled: &mut crate::runtime::batch::Settled,
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
