//! The response cache: every answer of a paid or quota-limited API, kept in the run directory so
//! a rerun, a new stage or a new threshold never repeats a call.
//!
//! One SQLite file (`cache/responses.sqlite`, WAL mode so readers never block the writer) shared
//! by every stage of a run. The key is a BLAKE3 hash of everything that decides the answer
//! (service, method, the request without credentials); the value is the raw body plus what the
//! caller parsed from it, token usage and latency. Requests are stored without secrets: callers
//! pass the canonical request text they built without the key.

use crate::error::StageError;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
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
}

pub struct ResponseCache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
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
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lookups (
    service TEXT NOT NULL,
    method TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (service, method)
);
";

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
                "SELECT status, body, parsed, input_tokens, output_tokens, latency_ms
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
                  output_tokens, latency_ms, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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

    pub fn stats(&self) -> Result<Vec<CacheStats>, StageError> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT s.service, s.method, COALESCE(r.n, 0), COALESCE(l.hits, 0),
                        COALESCE(l.misses, 0), COALESCE(r.tin, 0), COALESCE(r.tout, 0),
                        COALESCE(r.lat, 0)
                 FROM (SELECT service, method FROM responses UNION SELECT service, method FROM lookups) s
                 LEFT JOIN (SELECT service, method, COUNT(*) n, SUM(input_tokens) tin,
                                   SUM(output_tokens) tout, SUM(latency_ms) lat
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
                })
            })
            .map_err(|e| db_err(&self.path, e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| db_err(&self.path, e))
    }
}

/// The run's cache, opened on first use (runs without API stages never create the file).
#[derive(Clone, Default)]
pub struct CacheHandle {
    dir: Arc<OnceLock<PathBuf>>,
    cache: Arc<OnceLock<Arc<ResponseCache>>>,
}

impl CacheHandle {
    pub fn new(run_dir: &Path) -> Self {
        let h = Self::default();
        let _ = h.dir.set(run_dir.to_path_buf());
        h
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
