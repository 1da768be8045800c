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
use std::future::Future;
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
    /// The stage that paid for the answer (None: stored outside any stage's scope, or by a
    /// version before stages were recorded). `put` fills it from `for_stage` when unset.
    pub stage: Option<String>,
}

tokio::task_local! {
    static STAGE: String;
}

/// Runs `f` as work of `stage`: the answers it stores and the lookups it makes are counted for
/// that stage. The runtime scopes each stage's task (and the source's) in it, so clients need not
/// know which stage calls them; a task spawned inside does not inherit it and needs its own.
pub fn for_stage<F: Future>(stage: impl Into<String>, f: F) -> impl Future<Output = F::Output> {
    STAGE.scope(stage.into(), f)
}

/// The stage whose scope the current task runs in.
pub fn current_stage() -> Option<String> {
    STAGE.try_with(Clone::clone).ok()
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

/// Totals per (service, method, stage), for `vidcurate cache stats` and the card's cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheStats {
    pub service: String,
    pub method: String,
    /// None: answers and lookups recorded with no stage (outside a stage, or before stages
    /// were recorded); also the stage of `by_service`'s totals.
    pub stage: Option<String>,
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

/// The answers' table, in the cache and in a published part alike.
macro_rules! responses_table {
    ($create:literal) => {
        concat!(
            $create,
            " (
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
    batch INTEGER NOT NULL DEFAULT 0,
    stage TEXT
            );"
        )
    };
}

/// Hits and misses per service, method and stage (`''`: none recorded), in the schema and in
/// the migration that adds the stage.
macro_rules! lookups_table {
    () => {
        "CREATE TABLE IF NOT EXISTS lookups (
    service TEXT NOT NULL,
    method TEXT NOT NULL,
    stage TEXT NOT NULL DEFAULT '',
    hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (service, method, stage)
);"
    };
}

const SCHEMA: &str = concat!(
    "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS sync (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS imported (part TEXT PRIMARY KEY);
",
    responses_table!("CREATE TABLE IF NOT EXISTS responses"),
    "\n",
    lookups_table!(),
    "\n"
);

/// A published part holds only answers (no lookups, no sync state).
const PART_SCHEMA: &str = responses_table!("CREATE TABLE responses");

const COLUMNS: &str = "key, service, method, request, status, body, parsed, input_tokens, output_tokens, latency_ms, created_at, batch, stage";

/// Brings a cache written by an older version up to `SCHEMA`, in one write transaction (so two
/// processes opening the same old file do not both migrate it). Answers stored before a column
/// existed were live (`batch` 0) and of no known stage (`stage` NULL); lookups counted before
/// stages were recorded keep their totals under the empty stage.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let old = |t: &str, c: &str| has_column(conn, "main", t, c).map(|has| !has);
    if !(old("responses", "batch")? || old("responses", "stage")? || old("lookups", "stage")?) {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let run = || -> rusqlite::Result<()> {
        if old("responses", "batch")? {
            conn.execute_batch(
                "ALTER TABLE responses ADD COLUMN batch INTEGER NOT NULL DEFAULT 0",
            )?;
        }
        if old("responses", "stage")? {
            conn.execute_batch("ALTER TABLE responses ADD COLUMN stage TEXT")?;
        }
        // The key grows a column, which ALTER cannot do: the table is rebuilt.
        if old("lookups", "stage")? {
            conn.execute_batch("ALTER TABLE lookups RENAME TO lookups_before_stages;")?;
            conn.execute_batch(lookups_table!())?;
            conn.execute_batch(
                "INSERT INTO lookups (service, method, stage, hits, misses)
                     SELECT service, method, '', hits, misses FROM lookups_before_stages;
                 DROP TABLE lookups_before_stages;",
            )?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Whether `table` (optionally `schema.table`) has `column`: caches and parts written before the
/// `batch` or `stage` column existed lack it.
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
        migrate(&conn).map_err(|e| db_err(path, e))?;
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

    /// The status of the answer stored under `key`, without counting a lookup: what a dry run
    /// asks (it looks nothing up for a stage, so `cache stats` and the card must not see it).
    pub fn stored_status(&self, key: &CacheKey) -> Result<Option<u16>, StageError> {
        self.conn()
            .query_row(
                "SELECT status FROM responses WHERE key = ?1",
                params![key.hash()],
                |r| r.get::<_, u16>(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))
    }

    /// Looks `key` up and counts the hit or miss (for the stage whose scope this runs in).
    pub fn get(&self, key: &CacheKey) -> Result<Option<CachedResponse>, StageError> {
        self.get_for(key, current_stage())
    }

    /// `get`, counted for `stage`.
    fn get_for(
        &self,
        key: &CacheKey,
        stage: Option<String>,
    ) -> Result<Option<CachedResponse>, StageError> {
        let conn = self.conn();
        let found = conn
            .query_row(
                "SELECT status, body, parsed, input_tokens, output_tokens, latency_ms, batch, stage
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
                        stage: r.get(7)?,
                    })
                },
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        let (h, m) = if found.is_some() { (1, 0) } else { (0, 1) };
        conn.execute(
            "INSERT INTO lookups (service, method, stage, hits, misses) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (service, method, stage)
             DO UPDATE SET hits = hits + ?4, misses = misses + ?5",
            params![key.service, key.method, stage.unwrap_or_default(), h, m],
        )
        .map_err(|e| db_err(&self.path, e))?;
        Ok(found)
    }

    /// Stores an answer (replacing one under the same key: a repaired answer wins), for its
    /// `stage` or else the stage whose scope this runs in.
    pub fn put(&self, key: &CacheKey, value: &CachedResponse) -> Result<(), StageError> {
        let stage = value.stage.clone().or_else(current_stage);
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO responses
                 (key, service, method, request, status, body, parsed, input_tokens,
                  output_tokens, latency_ms, created_at, batch, stage)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
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
                    stage,
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
        // The blocking thread is outside the task's scope: the stage goes along.
        let (me, key, stage) = (self.clone(), key.clone(), current_stage());
        tokio::task::spawn_blocking(move || me.get_for(&key, stage))
            .await
            .map_err(|e| StageError::internal("response_cache", e.to_string()))?
    }

    /// `put` on a blocking thread (see `lookup`).
    pub async fn store(
        self: &Arc<Self>,
        key: &CacheKey,
        mut value: CachedResponse,
    ) -> Result<(), StageError> {
        if value.stage.is_none() {
            value.stage = current_stage();
        }
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
            // A part of an older version lacks `batch` (its answers were live) or `stage`
            // (no stage recorded).
            let mut select = COLUMNS.to_string();
            if !has_column(&conn, "part", "responses", "batch")? {
                select = select.replace(", batch", ", 0");
            }
            if !has_column(&conn, "part", "responses", "stage")? {
                select = select.replace(", stage", ", NULL");
            }
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

    /// Totals per (service, method, stage), ordered so; a stage's row counts the answers it
    /// stored and the lookups it made (see `by_service` for the totals across stages).
    pub fn stats(&self) -> Result<Vec<CacheStats>, StageError> {
        let conn = self.conn();
        // Answers store no stage as NULL, lookups as '' (a key column): both read as None.
        let mut st = conn
            .prepare(
                "SELECT s.service, s.method, NULLIF(s.stage, ''), COALESCE(r.n, 0),
                        COALESCE(l.hits, 0), COALESCE(l.misses, 0), COALESCE(r.tin, 0),
                        COALESCE(r.tout, 0), COALESCE(r.lat, 0), COALESCE(r.bn, 0),
                        COALESCE(r.btin, 0), COALESCE(r.btout, 0)
                 FROM (SELECT service, method, COALESCE(stage, '') stage FROM responses
                       UNION SELECT service, method, stage FROM lookups) s
                 LEFT JOIN (SELECT service, method, COALESCE(stage, '') stage, COUNT(*) n,
                                   SUM(input_tokens) tin, SUM(output_tokens) tout,
                                   SUM(latency_ms) lat, SUM(batch) bn,
                                   SUM(CASE WHEN batch = 1 THEN input_tokens ELSE 0 END) btin,
                                   SUM(CASE WHEN batch = 1 THEN output_tokens ELSE 0 END) btout
                            FROM responses GROUP BY service, method, COALESCE(stage, '')) r
                   ON r.service = s.service AND r.method = s.method AND r.stage = s.stage
                 LEFT JOIN lookups l
                   ON l.service = s.service AND l.method = s.method AND l.stage = s.stage
                 ORDER BY s.service, s.method, s.stage",
            )
            .map_err(|e| db_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| {
                Ok(CacheStats {
                    service: r.get(0)?,
                    method: r.get(1)?,
                    stage: r.get(2)?,
                    entries: r.get(3)?,
                    hits: r.get(4)?,
                    misses: r.get(5)?,
                    input_tokens: r.get(6)?,
                    output_tokens: r.get(7)?,
                    latency_ms: r.get(8)?,
                    batch_entries: r.get(9)?,
                    batch_input_tokens: r.get(10)?,
                    batch_output_tokens: r.get(11)?,
                })
            })
            .map_err(|e| db_err(&self.path, e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| db_err(&self.path, e))
    }
}

/// `stats` (in its order) summed over stages: one row per (service, method), its stage None.
pub fn by_service(rows: &[CacheStats]) -> Vec<CacheStats> {
    let mut out: Vec<CacheStats> = vec![];
    for r in rows {
        match out.last_mut() {
            Some(t) if t.service == r.service && t.method == r.method => {
                t.entries += r.entries;
                t.hits += r.hits;
                t.misses += r.misses;
                t.input_tokens += r.input_tokens;
                t.output_tokens += r.output_tokens;
                t.latency_ms += r.latency_ms;
                t.batch_entries += r.batch_entries;
                t.batch_input_tokens += r.batch_input_tokens;
                t.batch_output_tokens += r.batch_output_tokens;
            }
            _ => out.push(CacheStats {
                stage: None,
                ..r.clone()
            }),
        }
    }
    out
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

    fn key(request: &str) -> CacheKey {
        CacheKey {
            service: "vlm".into(),
            method: "openai:gpt-4o".into(),
            request: request.into(),
        }
    }

    fn answer(tokens: i64) -> CachedResponse {
        CachedResponse {
            status: 200,
            body: b"{}".to_vec(),
            input_tokens: Some(tokens),
            output_tokens: Some(1),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn answers_and_lookups_count_for_the_stage_that_made_them() {
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
        for_stage("caption", async {
            assert!(c.lookup(&key("a")).await.unwrap().is_none());
            c.store(&key("a"), answer(10)).await.unwrap();
            c.store(&key("b"), answer(20)).await.unwrap();
        })
        .await;
        for_stage("questions", async {
            assert!(c.lookup(&key("c")).await.unwrap().is_none());
            c.store(&key("c"), answer(5)).await.unwrap();
            // Another stage's answer: a hit of this stage, still stored for the one that paid.
            assert!(c.lookup(&key("a")).await.unwrap().is_some());
        })
        .await;
        // Outside any stage, and a stage the record names itself (a batch's answer).
        c.store(&key("d"), answer(1)).await.unwrap();
        let named = CachedResponse {
            stage: Some("blind".into()),
            ..answer(2)
        };
        for_stage("questions", async { c.store(&key("e"), named).await })
            .await
            .unwrap();
        assert_eq!(
            c.get(&key("a")).unwrap().unwrap().stage.as_deref(),
            Some("caption")
        );
        let got: Vec<_> = c
            .stats()
            .unwrap()
            .into_iter()
            .map(|s| (s.stage, s.entries, s.hits, s.misses, s.input_tokens))
            .collect();
        assert_eq!(
            got,
            vec![
                // The `get` above, outside a stage, is the no-stage row's hit.
                (None, 1, 1, 0, 1),
                (Some("blind".into()), 1, 0, 0, 2),
                (Some("caption".into()), 2, 0, 1, 30),
                (Some("questions".into()), 1, 1, 1, 5),
            ]
        );
        let total = by_service(&c.stats().unwrap());
        assert_eq!(total.len(), 1);
        assert_eq!(
            (total[0].entries, total[0].hits, total[0].misses),
            (5, 2, 2)
        );
        assert_eq!((total[0].input_tokens, total[0].stage.clone()), (38, None));
    }

    /// The tables as the version before `batch` and `stage` wrote them.
    const OLD_SCHEMA: &str = "
        CREATE TABLE responses (
            key TEXT PRIMARY KEY, service TEXT NOT NULL, method TEXT NOT NULL,
            request TEXT NOT NULL, status INTEGER NOT NULL, body BLOB NOT NULL, parsed TEXT,
            input_tokens INTEGER, output_tokens INTEGER, latency_ms INTEGER NOT NULL,
            created_at TEXT NOT NULL);
        CREATE TABLE lookups (
            service TEXT NOT NULL, method TEXT NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0, misses INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (service, method));
        INSERT INTO responses VALUES ('k1', 'vlm', 'openai:gpt-4o', 'r', 200, x'7b7d', NULL, 7, 3, 4, 'then');
        INSERT INTO lookups VALUES ('vlm', 'openai:gpt-4o', 2, 1);";

    #[tokio::test]
    async fn an_old_cache_opens_and_keeps_its_totals_under_no_stage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite");
        Connection::open(&path)
            .unwrap()
            .execute_batch(OLD_SCHEMA)
            .unwrap();
        let c = Arc::new(ResponseCache::open(&path).unwrap());
        let s = c.stats().unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            (
                s[0].stage.clone(),
                s[0].entries,
                s[0].hits,
                s[0].misses,
                s[0].input_tokens
            ),
            (None, 1, 2, 1, 7)
        );
        // New answers and lookups go on beside the old ones, per stage.
        for_stage("caption", async {
            assert!(c.lookup(&key("new")).await.unwrap().is_none());
            c.store(&key("new"), answer(10)).await.unwrap();
        })
        .await;
        let s = c.stats().unwrap();
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(
            (s[1].stage.as_deref(), s[1].entries, s[1].misses),
            (Some("caption"), 1, 1)
        );
        // Opening again finds nothing left to migrate.
        drop(c);
        assert_eq!(ResponseCache::open(&path).unwrap().stats().unwrap(), s);
    }

    #[test]
    fn parts_of_an_old_version_and_of_this_one_import() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old-part.sqlite");
        Connection::open(&old)
            .unwrap()
            .execute_batch(OLD_SCHEMA)
            .unwrap();
        let writer = ResponseCache::open(&dir.path().join("w.sqlite")).unwrap();
        let staged = CachedResponse {
            stage: Some("questions".into()),
            ..answer(4)
        };
        writer.put(&key("q"), &staged).unwrap();
        let (done, last) = writer.unpublished().unwrap();
        let new = dir.path().join("new-part.sqlite");
        assert_eq!(writer.export(done, last, &new).unwrap(), 1);

        let c = ResponseCache::open(&dir.path().join("c.sqlite")).unwrap();
        assert_eq!(c.import(&old, "old").unwrap(), 1);
        assert_eq!(c.import(&new, "new").unwrap(), 1);
        let got: Vec<_> = c
            .stats()
            .unwrap()
            .into_iter()
            .map(|s| (s.stage, s.entries, s.batch_entries))
            .collect();
        assert_eq!(got, vec![(None, 1, 0), (Some("questions".into()), 1, 0)]);
    }
}
