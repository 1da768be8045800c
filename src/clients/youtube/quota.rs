//! The quota ledger: units (or search calls) used per API key, Pacific day and bucket, in a
//! SQLite file every run with the same key shares, so concurrent runs count together. Reads
//! and writes the ledger file (`QuotaConfig::ledger`, default under $XDG_STATE_HOME); calls
//! nothing else. The client books each call here before sending it.

use super::{Method, YtError};
use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Budgets and costs, with the published defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaConfig {
    /// search.list counted in its own bucket of calls (YouTube's accounting since 2026-06);
    /// false: it costs `search_cost` units of the general bucket, as before.
    pub search_bucket: bool,
    pub search_calls_per_day: u64,
    pub search_cost: u64,
    pub units_per_day: u64,
    pub videos_cost: u64,
    /// The ledger file (shared by every run using the same key).
    /// Default: $XDG_STATE_HOME/vidcurate/youtube-quota.sqlite (~/.local/state/...).
    pub ledger: Option<PathBuf>,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            search_bucket: true,
            search_calls_per_day: 100,
            search_cost: 100,
            units_per_day: 10_000,
            videos_cost: 1,
            ledger: None,
        }
    }
}

impl QuotaConfig {
    pub(super) fn ledger_path(&self) -> PathBuf {
        if let Some(p) = &self.ledger {
            return p.clone();
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("."));
        state.join("vidcurate").join("youtube-quota.sqlite")
    }

    /// (bucket, cost, budget) of a method.
    pub(super) fn charge(&self, method: Method) -> (&'static str, u64, u64) {
        match method {
            Method::Search if self.search_bucket => ("search.list", 1, self.search_calls_per_day),
            Method::Search => ("units", self.search_cost, self.units_per_day),
            Method::Videos => ("units", self.videos_cost, self.units_per_day),
        }
    }
}

/// The day YouTube's quota counts in: it resets at midnight Pacific time.
pub fn pacific_day(now: DateTime<Utc>) -> NaiveDate {
    now.with_timezone(&chrono_tz::America::Los_Angeles)
        .date_naive()
}

/// Time until the next Pacific midnight, for the stop message.
pub(super) fn until_reset(now: DateTime<Utc>) -> Duration {
    let tz = chrono_tz::America::Los_Angeles;
    let next = pacific_day(now).succ_opt().unwrap_or(pacific_day(now));
    let midnight = next
        .and_hms_opt(0, 0, 0)
        .and_then(|t| t.and_local_timezone(tz).earliest())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(now);
    (midnight - now).to_std().unwrap_or_default()
}

/// Units used per API key (by hash), Pacific day and bucket. SQLite so concurrent runs with the
/// same key count together.
pub struct QuotaLedger {
    path: PathBuf,
    conn: std::sync::Mutex<Connection>,
}

impl QuotaLedger {
    pub fn open(path: &Path) -> Result<Self, YtError> {
        let err = |e: String| YtError::Setup(format!("quota ledger {}: {e}", path.display()));
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| err(e.to_string()))?;
        }
        let conn = Connection::open(path).map_err(|e| err(e.to_string()))?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(|e| err(e.to_string()))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS quota (
                 key_id TEXT NOT NULL, day TEXT NOT NULL, bucket TEXT NOT NULL,
                 used INTEGER NOT NULL, PRIMARY KEY (key_id, day, bucket));",
        )
        .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            conn: std::sync::Mutex::new(conn),
        })
    }

    fn err(&self, e: rusqlite::Error) -> YtError {
        YtError::Setup(format!("quota ledger {}: {e}", self.path.display()))
    }

    pub fn used(&self, key_id: &str, day: NaiveDate, bucket: &str) -> Result<u64, YtError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        used_in(&conn, key_id, day, bucket).map_err(|e| self.err(e))
    }

    /// Takes `cost` from today's bucket: Ok(used now), or Err(used) when it would overspend.
    pub(super) fn reserve(
        &self,
        key_id: &str,
        day: NaiveDate,
        bucket: &str,
        cost: u64,
        budget: u64,
    ) -> Result<Result<u64, u64>, YtError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let used = used_in(&tx, key_id, day, bucket).map_err(|e| self.err(e))?;
        if used + cost > budget {
            return Ok(Err(used));
        }
        tx.execute(
            "INSERT INTO quota (key_id, day, bucket, used) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (key_id, day, bucket) DO UPDATE SET used = ?4",
            params![key_id, day.to_string(), bucket, (used + cost) as i64],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Ok(used + cost))
    }

    /// The API said the quota is gone: count the bucket as spent for the rest of the day.
    pub(super) fn exhaust(
        &self,
        key_id: &str,
        day: NaiveDate,
        bucket: &str,
        budget: u64,
    ) -> Result<(), YtError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.execute(
            "INSERT INTO quota (key_id, day, bucket, used) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (key_id, day, bucket) DO UPDATE SET used = MAX(used, ?4)",
            params![key_id, day.to_string(), bucket, budget as i64],
        )
        .map_err(|e| self.err(e))?;
        Ok(())
    }
}

/// What the ledger holds for (key, day, bucket): 0 before its first booking.
fn used_in(conn: &Connection, key_id: &str, day: NaiveDate, bucket: &str) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT used FROM quota WHERE key_id = ?1 AND day = ?2 AND bucket = ?3",
        params![key_id, day.to_string(), bucket],
        |r| r.get::<_, i64>(0),
    )
    .optional()
    .map(|u| u.unwrap_or(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacific_day_follows_los_angeles() {
        let utc = |t: &str| DateTime::parse_from_rfc3339(t).unwrap().to_utc();
        for (t, day) in [
            // 07:59 UTC on 30 Nov is 23:59 on 29 Nov in Los Angeles (PST, UTC-8).
            ("2026-11-30T07:59:00Z", "2026-11-29"),
            ("2026-11-30T08:00:00Z", "2026-11-30"),
            // Summer time: UTC-7.
            ("2026-07-01T06:59:00Z", "2026-06-30"),
        ] {
            assert_eq!(pacific_day(utc(t)).to_string(), day, "{t}");
        }
        // 06:59 PDT: a minute before the next Pacific day.
        assert_eq!(
            until_reset(utc("2026-07-01T06:59:00Z")),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn ledger_reserves_until_the_budget_and_exhausts() {
        let dir = tempfile::tempdir().unwrap();
        let l = QuotaLedger::open(&dir.path().join("q.sqlite")).unwrap();
        let day = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
        assert_eq!(l.reserve("k", day, "units", 4, 10).unwrap(), Ok(4));
        assert_eq!(l.reserve("k", day, "units", 6, 10).unwrap(), Ok(10));
        assert_eq!(l.reserve("k", day, "units", 1, 10).unwrap(), Err(10));
        // Another key, another day: separate.
        assert_eq!(l.reserve("j", day, "units", 1, 10).unwrap(), Ok(1));
        assert_eq!(
            l.reserve("k", day.succ_opt().unwrap(), "units", 1, 10)
                .unwrap(),
            Ok(1)
        );
        l.exhaust("j", day, "units", 10).unwrap();
        assert_eq!(l.used("j", day, "units").unwrap(), 10);
    }
}
