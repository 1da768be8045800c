//! The response cache: every answer of a paid or quota-limited API, kept in the run directory so
//! a rerun, a new stage or a new threshold never repeats a call.
//!
//! One SQLite file (`cache/responses.sqlite`, WAL mode so readers never block the writer) shared
//! by every stage of a run. The key is a BLAKE3 hash of everything that decides the answer
//! (service, method, the request without credentials); the value is the raw body plus what the
//! caller parsed from it, token usage and latency. Requests are stored without secrets: callers
//! pass the canonical request text they built without the key.

mod handle;
mod schema;
#[cfg(test)]
mod tests;

pub use handle::{CacheHandle, PARTS};

use crate::error::StageError;
use rusqlite::{Connection, OptionalExtension, params};
use schema::{COLUMNS, PART_SCHEMA, SCHEMA, has_column, migrate};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

impl CacheStats {
    /// What these answers cost at `p` (batch answers at the batch rate), and what the batch rate
    /// saved on them.
    pub fn usd(&self, p: &crate::config::Prices) -> (f64, f64) {
        let (live_in, live_out) = (
            self.input_tokens - self.batch_input_tokens,
            self.output_tokens - self.batch_output_tokens,
        );
        let (bin, bout) = (self.batch_input_tokens, self.batch_output_tokens);
        (
            p.cost(live_in, live_out, false) + p.cost(bin, bout, true),
            p.cost(bin, bout, false) - p.cost(bin, bout, true),
        )
    }
}

pub struct ResponseCache {
    path: PathBuf,
    conn: Mutex<Connection>,
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

    /// What a (service, model) was learnt to refuse of structured output (`clients::llm`'s
    /// dialect: "json_schema", "strict", ...), kept beside the answers so a rerun and the other
    /// ranks (through the published parts) start from it. Not an answer: `stats` leaves it out.
    pub fn dialect(&self, service: &str, model: &str) -> Result<Option<Vec<String>>, StageError> {
        let key = dialect_key(service, model);
        let body: Option<Vec<u8>> = self
            .conn()
            .query_row(
                "SELECT body FROM responses WHERE key = ?1",
                params![key.hash()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        Ok(body.and_then(|b| {
            let v: serde_json::Value = serde_json::from_slice(&b).ok()?;
            serde_json::from_value(v["refused"].clone()).ok()
        }))
    }

    /// Records what `dialect` reads.
    pub fn set_dialect(
        &self,
        service: &str,
        model: &str,
        refused: &[String],
    ) -> Result<(), StageError> {
        let value = CachedResponse {
            status: 200,
            body: serde_json::to_vec(&serde_json::json!({"model": model, "refused": refused}))
                .unwrap_or_default(),
            parsed: None,
            input_tokens: None,
            output_tokens: None,
            latency_ms: 0,
            batch: false,
            stage: None,
        };
        self.put(&dialect_key(service, model), &value)
    }

    /// Every learnt dialect: (service, model, what it refuses).
    pub fn dialects(&self) -> Result<Vec<(String, String, Vec<String>)>, StageError> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT service, body FROM responses WHERE method = ?1 ORDER BY service")
            .map_err(|e| db_err(&self.path, e))?;
        let rows = st
            .query_map(params![DIALECT_METHOD], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| db_err(&self.path, e))?;
        let mut out = vec![];
        for row in rows {
            let (service, body) = row.map_err(|e| db_err(&self.path, e))?;
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let refused = v["refused"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            });
            out.push((
                service,
                v["model"].as_str().unwrap_or("").to_string(),
                refused.unwrap_or_default(),
            ));
        }
        Ok(out)
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
                       WHERE method <> 'dialect'
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

/// The `method` of the rows `dialect` keeps: no API's method is spelt so.
const DIALECT_METHOD: &str = "dialect";

fn dialect_key(service: &str, model: &str) -> CacheKey {
    CacheKey {
        service: service.to_string(),
        method: DIALECT_METHOD.to_string(),
        request: model.to_string(),
    }
}
