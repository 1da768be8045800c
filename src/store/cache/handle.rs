//! The run's cache handle, and the parts through which the workers of a run share answers.

use super::ResponseCache;
use crate::error::{RunError, StageError, io};
use crate::store::Store;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// Where the workers of a run on an object store publish their answers. Each worker's cache
/// lives in its own work folder; a part is a small cache file of the answers added since the
/// worker's last part. Every worker imports the parts at start, so a call committed by any
/// worker (of any world size) is not paid for again.
pub const PARTS: &str = "cache/parts";

struct Shared {
    store: Arc<dyn Store>,
    /// `rNNNN-<random>`: unique per worker process, so parts never collide.
    tag: String,
    seq: AtomicU32,
    /// One publish at a time (each takes the entries since the last one).
    lock: tokio::sync::Mutex<()>,
}

/// The run's cache, opened on first use (runs without API stages never create the file).
#[derive(Clone, Default)]
pub struct CacheHandle {
    dir: Arc<OnceLock<PathBuf>>,
    cache: Arc<OnceLock<Arc<ResponseCache>>>,
    shared: Option<Arc<Shared>>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StageError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RunError::Internal(format!("response cache: {e}")))?
        .map_err(RunError::from)
}

/// A new empty cache file named `<prefix>….sqlite` beside `cache`'s own, removed when dropped.
fn temp_beside(cache: &ResponseCache, prefix: &str) -> Result<tempfile::TempPath, RunError> {
    let dir = cache.path.parent().unwrap_or(Path::new(""));
    tempfile::Builder::new()
        .prefix(prefix)
        .suffix(".sqlite")
        .tempfile_in(dir)
        .map(tempfile::NamedTempFile::into_temp_path)
        .map_err(io(dir))
}

impl CacheHandle {
    pub fn new(run_dir: &Path) -> Self {
        let h = Self::default();
        let _ = h.dir.set(run_dir.to_path_buf());
        h
    }

    /// A cache in a worker's `work_dir` whose answers are shared with the run's other workers
    /// through `store` (see `PARTS`).
    pub fn shared(work_dir: &Path, store: Arc<dyn Store>, rank: u32) -> Self {
        let mut h = Self::new(work_dir);
        let nonce = blake3::hash(
            format!(
                "{}-{:?}-{}",
                std::process::id(),
                std::time::SystemTime::now(),
                work_dir.display()
            )
            .as_bytes(),
        );
        h.shared = Some(Arc::new(Shared {
            store,
            tag: format!("r{rank:04}-{}", &nonce.to_hex()[..8]),
            seq: AtomicU32::new(0),
            lock: tokio::sync::Mutex::new(()),
        }));
        h
    }

    /// The cache if it is open or its file exists (publishing never creates one).
    fn existing(&self) -> Result<Option<Arc<ResponseCache>>, StageError> {
        if let Some(c) = self.cache.get() {
            return Ok(Some(c.clone()));
        }
        match self.dir.get() {
            Some(d) if ResponseCache::path_in(d).exists() => self.get().map(Some),
            _ => Ok(None),
        }
    }

    /// Publishes the answers added since the last part as a new part (nothing when none, or
    /// when the cache is not shared). Called before every shard commit and at the end of a
    /// run: every committed row's paid calls are in the store.
    pub async fn publish(&self) -> Result<usize, RunError> {
        let Some(sh) = &self.shared else {
            return Ok(0);
        };
        let _one = sh.lock.lock().await;
        let Some(cache) = self.existing()? else {
            return Ok(0);
        };
        let c = cache.clone();
        let (done, last) = blocking(move || c.unpublished()).await?;
        if last <= done {
            return Ok(0);
        }
        let tmp = temp_beside(&cache, ".part-")?;
        let (c, to) = (cache.clone(), tmp.to_path_buf());
        // The temp file exists (empty): SQLite takes an empty file as a new database.
        let n = blocking(move || c.export(done, last, &to)).await?;
        let name = format!(
            "{PARTS}/{}-{:05}.sqlite",
            sh.tag,
            sh.seq.fetch_add(1, Ordering::SeqCst)
        );
        sh.store
            .put_file(&name, &tmp)
            .await
            .map_err(|e| sh.store.io_error(&name, e))?;
        let c = cache.clone();
        blocking(move || {
            c.mark_published(last)?;
            c.mark_imported(&name)
        })
        .await?;
        Ok(n)
    }

    /// At the start of a worker: publishes what an earlier run in this work folder left
    /// unpublished, then imports every part the run's workers published. Returns the answers
    /// that were new here.
    pub async fn import_parts(&self) -> Result<usize, RunError> {
        let Some(sh) = &self.shared else {
            return Ok(0);
        };
        self.publish().await?;
        let parts = sh
            .store
            .list(PARTS)
            .await
            .map_err(|e| sh.store.io_error(PARTS, e))?;
        if parts.is_empty() {
            return Ok(0);
        }
        let _one = sh.lock.lock().await;
        let cache = self.get()?;
        let mut added = 0;
        for name in parts.into_iter().filter(|p| p.ends_with(".sqlite")) {
            let (c, n) = (cache.clone(), name.clone());
            if blocking(move || c.is_imported(&n)).await? {
                continue;
            }
            let tmp = temp_beside(&cache, ".import-")?;
            sh.store
                .get_file(&name, &tmp)
                .await
                .map_err(|e| sh.store.io_error(&name, e))?;
            let (c, from) = (cache.clone(), tmp.to_path_buf());
            added += blocking(move || c.import(&from, &name)).await?;
        }
        // What came from other workers is theirs to have published, not ours.
        let c = cache.clone();
        blocking(move || {
            let (_, last) = c.unpublished()?;
            c.mark_published(last)
        })
        .await?;
        if added > 0 {
            tracing::info!(
                answers = added,
                "Imported the answers other workers of this run published."
            );
        }
        Ok(added)
    }

    /// The cache if a stage has opened it (a run that called nothing has none).
    pub fn opened(&self) -> Option<Arc<ResponseCache>> {
        self.cache.get().cloned()
    }

    pub fn get(&self) -> Result<Arc<ResponseCache>, StageError> {
        if let Some(c) = self.cache.get() {
            return Ok(c.clone());
        }
        let dir = self
            .dir
            .get()
            .ok_or_else(|| StageError::internal("response_cache", "no run directory"))?;
        let opened = Arc::new(ResponseCache::open(&ResponseCache::path_in(dir))?);
        // Two stages racing here both open the same file; one handle is kept.
        Ok(self.cache.get_or_init(|| opened).clone())
    }
}
