//! One way to open a run for reading: its store (local folder or object store, read-only), its
//! manifest, and the pipeline file it was made with. The pipeline text is read as plain TOML and
//! only the parts a command asks for are typed, so a run made by an older version (with keys this
//! one no longer knows) can still be read. Every command that reads a finished run (rethreshold, status, estimate, split,
//! release, annotate, analyze, cache stats) starts here.

use crate::config::{Prices, ServiceConfig};
use crate::error::RunError;
use crate::store::Store;
use crate::store::manifest::{self, Manifest};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

pub struct RunView {
    pub store: Arc<dyn Store>,
    pub manifest: Manifest,
    /// The pipeline file as the manifest recorded it.
    pub pipeline: toml::Table,
}

impl RunView {
    /// Opens `run_dir` (a folder or an object-store URL) read-only. Not a run directory (no
    /// readable manifest) is invalid input, named as such.
    pub async fn open(run_dir: &Path) -> Result<Self, RunError> {
        let location = run_dir.to_string_lossy();
        let store = crate::store::open_run(&location, crate::store::Access::Read).map_err(|e| {
            // A run directory that is not there is a mistake in the command, not a failure.
            if e.kind() == std::io::ErrorKind::NotFound {
                RunError::Config(format!("{}: no such run directory", run_dir.display()))
            } else {
                RunError::io(location.to_string(), e)
            }
        })?;
        let manifest = manifest::load(store.as_ref()).await.ok_or_else(|| {
            RunError::Config(format!(
                "{}: no manifest.json (not a run directory?)",
                run_dir.display()
            ))
        })?;
        let pipeline = toml::from_str(&manifest.pipeline_toml)
            .map_err(|e| RunError::Config(format!("manifest.json: pipeline text: {e}")))?;
        Ok(Self {
            store,
            manifest,
            pipeline,
        })
    }

    /// Each stage's `select` table as the pipeline file had it when the run was made, by id.
    pub fn selects(&self) -> HashMap<String, toml::Table> {
        let stages = self.pipeline.get("stages").and_then(|s| s.as_array());
        stages
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let id = t.get("id")?.as_str()?.to_string();
                let select = t
                    .get("select")
                    .and_then(|s| s.as_table())
                    .cloned()
                    .unwrap_or_default();
                Some((id, select))
            })
            .collect()
    }
}

/// Stage `id`'s `[[stages]]` table in a pipeline file.
pub fn stage_table<'a>(pipeline: &'a toml::Table, id: &str) -> Option<&'a toml::Table> {
    let stages = pipeline.get("stages")?.as_array()?;
    stages
        .iter()
        .filter_map(|t| t.as_table())
        .find(|t| t.get("id").and_then(|i| i.as_str()) == Some(id))
}

/// The prices of the `[services.*]` tables of a run's recorded pipeline; a table this version
/// cannot read is left out (a run made by another version still shows the rest), and a pipeline
/// it cannot parse has none.
pub fn prices_of(m: &Manifest) -> BTreeMap<String, Prices> {
    let pipeline = toml::from_str::<toml::Table>(&m.pipeline_toml).unwrap_or_default();
    let tables = pipeline.get("services").and_then(|s| s.as_table());
    tables
        .into_iter()
        .flatten()
        .filter_map(|(name, t)| {
            let service: ServiceConfig = t.clone().try_into().ok()?;
            Some((name.clone(), service.prices()))
        })
        .collect()
}
