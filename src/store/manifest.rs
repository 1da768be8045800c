//! `manifest.json`: the pipeline as run, the tool version, each stage's fingerprint and compute
//! settings, and one entry per invocation (times, status, counts per stage).

use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const MANIFEST: &str = "manifest.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub tool: String,
    pub tool_version: String,
    pub pipeline_name: String,
    pub pipeline_file: String,
    /// The pipeline file's text as it was run.
    pub pipeline_toml: String,
    pub source: serde_json::Value,
    pub stages: Vec<ManifestStage>,
    pub invocations: Vec<Invocation>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ManifestStage {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub fingerprint: String,
    /// The compute settings with defaults filled in (what the fingerprint hashes).
    pub compute: serde_json::Value,
    pub table: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invocation {
    pub tool_version: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: InvocationStatus,
    pub error: Option<String>,
    pub counts: BTreeMap<String, StageCounts>,
}

/// How an invocation ended (`running` while it runs, or when it was killed).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    Running,
    Complete,
    Interrupted,
    Failed,
}

pub async fn load(store: &dyn Store) -> Option<Manifest> {
    load_at(store, MANIFEST).await
}

pub async fn load_at(store: &dyn Store, path: &str) -> Option<Manifest> {
    let data = store.get(path).await.ok()?;
    serde_json::from_slice(&data).ok()
}

/// The manifest of a local run directory, read without a runtime (CLI reports).
pub fn read_local(run_dir: &std::path::Path) -> Option<Manifest> {
    let data = std::fs::read(run_dir.join(MANIFEST)).ok()?;
    serde_json::from_slice(&data).ok()
}

pub async fn save_at(store: &dyn Store, path: &str, m: &Manifest) -> std::io::Result<()> {
    let mut data = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
    data.push(b'\n');
    store.put(path, data).await
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What one stage did in one invocation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StageCounts {
    /// Records that reached the stage.
    pub received: u64,
    /// Computed in this invocation.
    pub computed: u64,
    /// Taken from shards of an earlier invocation.
    pub reused: u64,
    /// Rejected in this invocation.
    pub rejected: u64,
    /// Rejected by an earlier invocation (not retried).
    pub rejected_before: u64,
    /// Scored but below the stage's `select` thresholds (not passed on).
    #[serde(default)]
    pub filtered: u64,
    /// Passed on to the next stage.
    pub forwarded: u64,
    /// Set aside for a batch of model requests (done by a later pass of the same run).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred: u64,
    /// The stage's own counters (`StageContext::tally`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tally: std::collections::BTreeMap<String, u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
