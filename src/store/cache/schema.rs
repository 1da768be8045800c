//! The cache's tables, in the cache file and in a published part, and the migration of a cache
//! an older version wrote.

use rusqlite::Connection;

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

pub(super) const SCHEMA: &str = concat!(
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
pub(super) const PART_SCHEMA: &str = responses_table!("CREATE TABLE responses");

pub(super) const COLUMNS: &str = "key, service, method, request, status, body, parsed, input_tokens, output_tokens, latency_ms, created_at, batch, stage";

/// Brings a cache written by an older version up to `SCHEMA`, in one write transaction (so two
/// processes opening the same old file do not both migrate it). Answers stored before a column
/// existed were live (`batch` 0) and of no known stage (`stage` NULL); lookups counted before
/// stages were recorded keep their totals under the empty stage.
pub(super) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
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
pub(super) fn has_column(
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
