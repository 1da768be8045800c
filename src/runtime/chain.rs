//! The chain the runner executes: a source and the ordered stages, each with its fingerprint,
//! limits and task. The planner (`crate::plan`) builds it from a pipeline file; the runtime only
//! reads it, so it depends on no stage.

use crate::config::{OutputConfig, RuntimeConfig, ServiceConfig};
use crate::runtime::StageTask;
use crate::runtime::stage::Source;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Ids that name folders of the run directory the runtime owns.
pub const RESERVED_IDS: &[&str] = &["source", "rejects", "media", "manifest", "retired"];
pub use super::stage::SOURCE_STAGE_ID;
/// Bumped when the source table's meaning changes.
pub const SOURCE_FINGERPRINT: &str = "source-v2";

pub struct PlannedStage {
    pub id: String,
    pub kind: String,
    pub fingerprint: String,
    pub compute: serde_json::Value,
    pub max_in_flight: usize,
    pub timeout: Option<Duration>,
    pub retries: u32,
    /// What the stage's answers come from beyond its settings: the base URLs of the services
    /// its settings name. In each video's input digest (`runtime::rerun`), so pointing a service
    /// at another server computes its rows again, without superseding the table.
    pub input_salt: String,
    pub task: Box<dyn StageTask>,
}

pub struct Plan {
    pub name: String,
    pub file: PathBuf,
    pub text: String,
    pub source_kind: String,
    pub source_settings: serde_json::Value,
    pub source: Box<dyn Source>,
    pub stages: Vec<PlannedStage>,
    pub output: OutputConfig,
    pub runtime: RuntimeConfig,
    pub services: BTreeMap<String, ServiceConfig>,
    /// The model services in batch or offline mode: the runner attaches their queues, sends
    /// their batches between passes and files the answers.
    pub batch_services: Vec<std::sync::Arc<dyn super::batch::BatchService>>,
}

/// The fingerprint a run's source table was written under (the current one when the manifest
/// predates it): what a command reads that table with.
pub fn source_fingerprint(m: &crate::store::manifest::Manifest) -> String {
    m.stages
        .iter()
        .find(|s| s.id == SOURCE_STAGE_ID)
        .map(|s| s.fingerprint.clone())
        .unwrap_or_else(|| SOURCE_FINGERPRINT.to_string())
}
