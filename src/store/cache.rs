//! The response cache: every answer of a paid or quota-limited API, kept in the run directory so
//! a rerun, a new stage or a new threshold never repeats a call.
//!
//! One SQLite file (`cache/responses.sqlite`, WAL mode so readers never block the writer) shared
//! by every stage of a run. The key is a BLAKE3 hash of everything that decides the answer
//! (service, method, the request without credentials); the value is the raw body plus what the
//! caller parsed from it, token usage and latency. Requests are stored without secrets: callers
//! pass the canonical request text they built without the key.

use crate::error::{RunError, StageError};
use crate::store::Store;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A stored answer.
#[derive(Debug, Clone, Default)]
pub struct CachedResponse {
    pub status: u16,
    pub body: Vec<u8>,
    /// What the caller made of the body (JSON), when it keeps one.
    pub parsed: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub latency_ms: i64,
    /// Answered through a provider's batch interface (priced at the batch rate).
    pub batch: bool,
}

/// What a lookup is about; the key is derived from these.
#[derive(Debug, Clone)]
pub struct CacheKey {
    pub service: String,
    pub method: String,
    /// Canonical request text (sorted parameters, prompt, input hashes), credentials left out.
    pub request: String,
}

impl CacheKey {
    pub fn hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        for part in [&self.service, &self.method, &self.request] {
            h.update(part.as_bytes());
            h.update(b"\0");
        }
        h.finalize().to_hex().to_string()
    }
}

/// Totals per (service, method), for `vidcurate cache stats`.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheStats {
    pub service: String,
    pub method: String,
    pub entries: i64,
    pub hits: i64,
    pub misses: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub latency_ms: i64,
    /// Of the entries, those answered through a batch, and their tokens.
    pub batch_entries: i64,
    pub batch_input_tokens: i64,
    pub batch_output_tokens: i64,
}

pub struct ResponseCache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS sync (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS imported (part TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    service TEXT NOT NULL,
    method TEXT NOT NULL,
    request TEXT NOT NULL,
    status INTEGER NOT NULL,
    body BLOB NOT NULL,
    parsed TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    latency_ms INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    batch INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS lookups (
    service TEXT NOT NULL,
    method TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (service, method)
);
";

/// A published part holds only answers (no lookups, no sync state).
const PART_SCHEMA: &str = "
CREATE TABLE responses (
    key TEXT PRIMARY KEY,
    service TEXT NOT NULL,
    method TEXT NOT NULL,
    request TEXT NOT NULL,
    status INTEGER NOT NULL,
    body BLOB NOT NULL,
    parsed TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    latency_ms INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    batch INTEGER NOT NULL DEFAULT 0
);
";

const COLUMNS: &str = "key, service, method, request, status, body, parsed, input_tokens, output_tokens, latency_ms, created_at, batch";

/// Whether `table` (optionally `schema.table`) has `column`: caches and parts written before the
/// `batch` column existed lack it.
fn has_column(
    conn: &Connection,
    schema: &str,
    table: &str,
    column: &str,
) -> rusqlite::Result<bool> {
    let mut st = conn.prepare(&format!("PRAGMA {schema}.table_info({table})"))?;
    let names = st.query_map([], |r| r.get::<_, String>(1))?;
    for n in names {
        if n? == column {
            return Ok(true);
        }
    }
    Ok(false)
}

fn db_err(path: &Path, e: rusqlite::Error) -> StageError {
    StageError::internal(
        "response_cache",
        format!("response cache {}: {e}", path.display()),
    )
}

impl ResponseCache {
    /// The cache file of a run directory.
    pub fn path_in(run_dir: &Path) -> PathBuf {
        run_dir.join("cache").join("responses.sqlite")
    }

    pub fn open(path: &Path) -> Result<Self, StageError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                StageError::internal("response_cache", format!("{}: {e}", dir.display()))
            })?;
        }
        let conn = Connection::open(path).map_err(|e| db_err(path, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| db_err(path, e))?;
        conn.execute_batch(SCHEMA).map_err(|e| db_err(path, e))?;
        if !has_column(&conn, "main", "responses", "batch").map_err(|e| db_err(path, e))? {
            conn.execute_batch("ALTER TABLE responses ADD COLUMN batch INTEGER NOT NULL DEFAULT 0")
                .map_err(|e| db_err(path, e))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    /// Opens an existing cache read-only use (no file is created when there is none).
    pub fn open_existing(path: &Path) -> Result<Option<Self>, StageError> {
        if !path.exists() {
            return Ok(None);
        }
        Self::open(path).map(Some)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (each call is one statement).
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks `key` up and counts the hit or miss.
    pub fn get(&self, key: &CacheKey) -> Result<Option<CachedResponse>, StageError> {
        let conn = self.conn();
        let found = conn
            .query_row(
                "SELECT status, body, parsed, input_tokens, output_tokens, latency_ms, batch
                 FROM responses WHERE key = ?1",
                params![key.hash()],
                |r| {
                    Ok(CachedResponse {
                        status: r.get::<_, i64>(0)? as u16,
                        body: r.get(1)?,
                        parsed: r.get(2)?,
                        input_tokens: r.get(3)?,
                        output_tokens: r.get(4)?,
                        latency_ms: r.get(5)?,
                        batch: r.get::<_, i64>(6)? != 0,
                    })
                },
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        let (h, m) = if found.is_some() { (1, 0) } else { (0, 1) };
        conn.execute(
            "INSERT INTO lookups (service, method, hits, misses) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (service, method) DO UPDATE SET hits = hits + ?3, misses = misses + ?4",
            params![key.service, key.method, h, m],
        )
        .map_err(|e| db_err(&self.path, e))?;
        Ok(found)
    }

    /// Stores an answer (replacing one under the same key: a repaired answer wins).
    pub fn put(&self, key: &CacheKey, value: &CachedResponse) -> Result<(), StageError> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO responses
                 (key, service, method, request, status, body, parsed, input_tokens,
                  output_tokens, latency_ms, created_at, batch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    key.hash(),
                    key.service,
                    key.method,
                    key.request,
                    value.status as i64,
                    value.body,
                    value.parsed,
                    value.input_tokens,
                    value.output_tokens,
                    value.latency_ms,
                    chrono::Utc::now().to_rfc3339(),
                    value.batch as i64,
                ],
            )
            .map_err(|e| db_err(&self.path, e))?;
        Ok(())
    }

    /// `get` on a blocking thread: SQLite may wait on a lock (busy timeout 30 s), and a tokio
    /// worker must not.
    pub async fn lookup(
        self: &Arc<Self>,
        key: &CacheKey,
    ) -> Result<Option<CachedResponse>, StageError> {
        let (me, key) = (self.clone(), key.clone());
        tokio::task::spawn_blocking(move || me.get(&key))
            .await
            .map_err(|e| StageError::internal("response_cache", e.to_string()))?
    }

    /// `put` on a blocking thread (see `lookup`).
    pub async fn store(
        self: &Arc<Self>,
        key: &CacheKey,
        value: CachedResponse,
    ) -> Result<(), StageError> {
        let (me, key) = (self.clone(), key.clone());
        tokio::task::spawn_blocking(move || me.put(&key, &value))
            .await
            .map_err(|e| StageError::internal("response_cache", e.to_string()))?
    }

    /// Entries added since the last `mark_published` (rowids grow; a replaced entry gets a new
    /// one, so a repaired answer is published again).
    pub fn unpublished(&self) -> Result<(i64, i64), StageError> {
        let conn = self.conn();
        let done: i64 = conn
            .query_row(
                "SELECT COALESCE((SELECT value FROM sync WHERE name = 'published'), 0)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| db_err(&self.path, e))?;
        let last: i64 = conn
            .query_row("SELECT COALESCE(MAX(rowid), 0) FROM responses", [], |r| {
                r.get(0)
            })
            .map_err(|e| db_err(&self.path, e))?;
        Ok((done, last))
    }

    pub fn mark_published(&self, upto: i64) -> Result<(), StageError> {
        self.conn()
            .execute(
                "INSERT INTO sync (name, value) VALUES ('published', ?1)
                 ON CONFLICT (name) DO UPDATE SET value = MAX(value, ?1)",
                params![upto],
            )
            .map_err(|e| db_err(&self.path, e))?;
        Ok(())
    }

    /// Copies the entries with rowid in (`after`, `upto`] into a new cache file at `to` (a part
    /// other workers import); returns how many.
    pub fn export(&self, after: i64, upto: i64, to: &Path) -> Result<usize, StageError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            conn.execute("ATTACH DATABASE ?1 AS part", params![to.to_string_lossy()])?;
            let copied = conn
                .execute_batch(&PART_SCHEMA.replace("responses (", "part.responses ("))
                .and_then(|_| {
                    conn.execute(
                        &format!(
                            "INSERT INTO part.responses ({COLUMNS}) SELECT {COLUMNS} FROM main.responses
                             WHERE rowid > ?1 AND rowid <= ?2"
                        ),
                        params![after, upto],
                    )
                });
            conn.execute("DETACH DATABASE part", [])?;
            copied
        };
        run().map_err(|e| db_err(&self.path, e))
    }

    pub fn is_imported(&self, name: &str) -> Result<bool, StageError> {
        self.conn()
            .query_row(
                "SELECT 1 FROM imported WHERE part = ?1",
                params![name],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(|e| db_err(&self.path, e))
    }

    /// Our own part: never to be imported back.
    pub fn mark_imported(&self, name: &str) -> Result<(), StageError> {
        self.conn()
            .execute(
                "INSERT OR IGNORE INTO imported (part) VALUES (?1)",
                params![name],
            )
            .map_err(|e| db_err(&self.path, e))?;
        Ok(())
    }

    /// Adds the entries of a part another worker published and remembers its name (callers skip
    /// parts `is_imported`); an entry this cache already has is kept. Returns how many were new.
    pub fn import(&self, part: &Path, name: &str) -> Result<usize, StageError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            conn.execute(
                "ATTACH DATABASE ?1 AS part",
                params![part.to_string_lossy()],
            )?;
            // A part of an older version has no `batch` column: its answers were live.
            let select = if has_column(&conn, "part", "responses", "batch")? {
                COLUMNS.to_string()
            } else {
                COLUMNS.replace(", batch", ", 0")
            };
            let added = conn.execute(
                &format!(
                    "INSERT OR IGNORE INTO main.responses ({COLUMNS}) SELECT {select} FROM part.responses"
                ),
                [],
            );
            conn.execute("DETACH DATABASE part", [])?;
            conn.execute(
                "INSERT OR IGNORE INTO imported (part) VALUES (?1)",
                params![name],
            )?;
            added
        };
        run().map_err(|e| db_err(&self.path, e))
    }

    pub fn stats(&self) -> Result<Vec<CacheStats>, StageError> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT s.service, s.method, COALESCE(r.n, 0), COALESCE(l.hits, 0),
                        COALESCE(l.misses, 0), COALESCE(r.tin, 0), COALESCE(r.tout, 0),
                        COALESCE(r.lat, 0), COALESCE(r.bn, 0), COALESCE(r.btin, 0),
                        COALESCE(r.btout, 0)
                 FROM (SELECT service, method FROM responses UNION SELECT service, method FROM lookups) s
                 LEFT JOIN (SELECT service, method, COUNT(*) n, SUM(input_tokens) tin,
                                   SUM(output_tokens) tout, SUM(latency_ms) lat,
                                   SUM(batch) bn,
                                   SUM(CASE WHEN batch = 1 THEN input_tokens ELSE 0 END) btin,
                                   SUM(CASE WHEN batch = 1 THEN output_tokens ELSE 0 END) btout
                            FROM responses GROUP BY service, method) r
                   ON r.service = s.service AND r.method = s.method
                 LEFT JOIN lookups l ON l.service = s.service AND l.method = s.method
                 ORDER BY s.service, s.method",
            )
            .map_err(|e| db_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                Ok(CacheStats {
                    service: r.get(0)?,
                    method: r.get(1)?,
                    entries: r.get(2)?,
                    hits: r.get(3)?,
                    misses: r.get(4)?,
                    input_tokens: r.get(5)?,
                    output_tokens: r.get(6)?,
                    latency_ms: r.get(7)?,
                    batch_entries: r.get(8)?,
                    batch_input_tokens: r.get(9)?,
                    batch_output_tokens: r.get(10)?,
                })
            })
            .map_err(|e| db_err(&self.path, e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| db_err(&self.path, e))
    }
}

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
        .map_err(|e| RunError::Internal(e.detail))
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
        let Some(cache) = self.existing().map_err(|e| RunError::Internal(e.detail))? else {
            return Ok(0);
        };
        let c = cache.clone();
        let (done, last) = blocking(move || c.unpublished()).await?;
        if last <= done {
            return Ok(0);
        }
        let dir = cache
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(".part-")
            .suffix(".sqlite")
            .tempfile_in(&dir)
            .map_err(|e| RunError::io(dir.display().to_string(), e))?
            .into_temp_path();
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
            .map_err(|e| RunError::io(format!("{}/{name}", sh.store.location()), e))?;
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
            .map_err(|e| RunError::io(format!("{}/{PARTS}", sh.store.location()), e))?;
        if parts.is_empty() {
            return Ok(0);
        }
        let _one = sh.lock.lock().await;
        let cache = self.get().map_err(|e| RunError::Internal(e.detail))?;
        let dir = cache
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut added = 0;
        for name in parts.into_iter().filter(|p| p.ends_with(".sqlite")) {
            let (c, n) = (cache.clone(), name.clone());
            if blocking(move || c.is_imported(&n)).await? {
                continue;
            }
            let tmp = tempfile::Builder::new()
                .prefix(".import-")
                .suffix(".sqlite")
                .tempfile_in(&dir)
                .map_err(|e| RunError::io(dir.display().to_string(), e))?
                .into_temp_path();
            sh.store
                .get_file(&name, &tmp)
                .await
                .map_err(|e| RunError::io(format!("{}/{name}", sh.store.location()), e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_counts_hits_and_misses() {
        let dir = tempfile::tempdir().unwrap();
        let c = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
        let k = CacheKey {
            service: "youtube".into(),
            method: "search.list".into(),
            request: "q=riot".into(),
        };
        assert!(c.get(&k).unwrap().is_none());
        c.put(
            &k,
            &CachedResponse {
                status: 200,
                body: b"{}".to_vec(),
                latency_ms: 5,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.get(&k).unwrap().unwrap().body, b"{}");
        let s = c.stats().unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].entries, s[0].hits, s[0].misses), (1, 1, 1));
    }
}
