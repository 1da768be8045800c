//! Error classes shared by stages and the runtime.
//!
//! The class decides what the runner does, so a stage never has to: `Config` fails before any work,
//! `External` is retried with backoff and then rejected, `Data` rejects the one video and the run goes
//! on, `Internal` aborts the run (a bug or a broken run directory, where carrying on would lose data),
//! `Deferred` sets the video aside for this pass: its answer comes from a batch the runner sends
//! when the pass ends, and the next pass finds it in the cache.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Config,
    External,
    Data,
    Internal,
    Deferred,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Config => "config",
            ErrorKind::External => "external",
            ErrorKind::Data => "data",
            ErrorKind::Internal => "internal",
            ErrorKind::Deferred => "deferred",
        })
    }
}

/// A stage's failure for one video. `reason` is a short stable snake_case code (it becomes the
/// `reason` column of the rejects table, so users can group by it); `detail` is for people.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind} error: {reason}: {detail}")]
pub struct StageError {
    pub kind: ErrorKind,
    pub reason: String,
    pub detail: String,
    /// For an external error: how long the service asked us to wait before trying again
    /// (already checked and capped by the client); the runner waits at least this long.
    pub retry_after: Option<std::time::Duration>,
}

impl StageError {
    pub fn new(kind: ErrorKind, reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
            detail: detail.into(),
            retry_after: None,
        }
    }
    pub fn with_retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.retry_after = wait;
        self
    }
    pub fn data(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Data, reason, detail)
    }
    pub fn external(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::External, reason, detail)
    }
    pub fn internal(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, reason, detail)
    }
}

/// Errors of the run as a whole (the CLI turns these into messages and exit codes).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(String),
    /// The message holds the I/O error's text, so it is no `source` (a chain printer would
    /// say it twice).
    #[error("run directory {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}")]
    Internal(String),
    /// Stopped cleanly before the end (a spent quota, an unreachable API): rerun to continue.
    #[error("{0}")]
    Stopped(String),
    /// Something outside the run directory failed (a file named on the command line, the
    /// runtime's start): `what` names it, the source says why.
    #[error("{what}")]
    At {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RunError {
    /// `source`, with what failed named first (`path: No such file or directory`).
    pub fn at(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        RunError::At {
            what: what.into(),
            source: source.into(),
        }
    }
}

impl From<StageError> for RunError {
    /// A stage-level failure outside a run (a command reading a run's queue or cache): its
    /// detail is the message.
    fn from(e: StageError) -> Self {
        RunError::Internal(e.detail)
    }
}

/// A command-line value that does not parse (clap shows the message under the flag's name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BadArgument(pub String);

/// How a command that did not fail ended: the part of the exit-code table that is not an
/// error (`main.rs` maps these and `RunError`'s classes to exit codes in one place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done, nothing rejected.
    Done,
    /// Done, but some inputs were rejected or skipped (rejected videos, unreadable lines).
    Rejected,
    /// Some inputs were invalid (`validate` of a bad pipeline file): reported, not raised.
    Invalid,
    /// Some ranks of a run are not complete (`status`).
    Unfinished,
    /// Interrupted (Ctrl-C): rerun to resume.
    Interrupted,
    /// Done, and found what a check looks for (`overlap`: shared videos or items), so a script
    /// can gate on it.
    Found,
}

impl RunError {
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        RunError::Io {
            path: path.into(),
            error: source,
        }
    }
}

/// The error of an I/O operation on `path`, naming it.
pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |e| RunError::io(path.display().to_string(), e)
}

/// The message of a caught panic (`catch_unwind`'s payload), for the error that replaces it.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
