//! Opening a run directory: the lock that keeps a second single-process run out, the store
//! (a local folder or an object-store URL, with its local work folder), the check that the
//! store takes our credentials, the pin every worker of a run must share, and Ctrl-C.
//! Reads `RunOptions` and the plan's fingerprints; writes `.lock` and the work folder; calls
//! `store::open_run`.

use super::RunOptions;
use crate::error::{RunError, io};
use crate::runtime::chain::Plan;
use crate::runtime::ranks::{self, Pin, Rank};
use crate::store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn lock(dir: &Path) -> Result<std::fs::File, RunError> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(RunError::Config(format!(
            "{}: another vidcurate run is using this run directory",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(io(&path)(e)),
    }
}

/// An opened run directory.
pub(super) struct OpenedRun {
    pub(super) store: Arc<dyn Store>,
    /// The local folder media and the response cache live in.
    pub(super) work: PathBuf,
    /// Keeps a second single-process run out of a local run directory while held.
    _lock: Option<std::fs::File>,
}

pub(super) fn open_store(dir: &Path, opts: &RunOptions) -> Result<OpenedRun, RunError> {
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
        std::fs::create_dir_all(&work).map_err(io(&work))?;
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
pub(super) async fn check_store(store: &dyn Store) -> Result<(), RunError> {
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
pub(super) fn pin_of(plan: &Plan, rank: &Rank) -> Pin {
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

/// First Ctrl-C: stop taking new videos, finish and persist what is in flight. Second: exit now
/// (shards already written stay valid; the rerun redoes the rest).
pub(super) fn spawn_ctrl_c(cancel: CancellationToken) {
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
