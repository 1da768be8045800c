//! The run's manifest: written before any work (the pipeline as run, each stage's fingerprint
//! and compute settings, a `running` invocation) and again when the invocation ends, so a
//! killed run leaves a `running` entry behind. Reads the earlier manifest of this rank; writes
//! `manifest.json` (and `ranks/rNNNN/manifest.json` for a ranked worker).

use crate::error::RunError;
use crate::runtime::StageCounts;
use crate::runtime::chain::{Plan, SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use crate::runtime::ranks::Rank;
use crate::store::Store;
use crate::store::manifest::{self, Invocation, InvocationStatus, Manifest, ManifestStage};
use std::collections::BTreeMap;

/// Writes the manifest for this invocation before any work: the pipeline as run, each stage's
/// fingerprint and compute settings, and a `running` entry (what a killed run leaves behind).
pub(super) async fn start_manifest(
    store: &dyn Store,
    plan: &Plan,
    extras: &[String],
    rank: &Rank,
) -> Result<Manifest, RunError> {
    let started_at = manifest::now();
    let previous = manifest::load_at(store, &rank.manifest_path()).await;
    let mut m = Manifest {
        tool: "vidcurate".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        pipeline_name: plan.name.clone(),
        pipeline_file: plan.file.display().to_string(),
        pipeline_toml: plan.text.clone(),
        source: serde_json::json!({ "type": plan.source_kind, "settings": plan.source_settings, "extra_columns": extras }),
        stages: std::iter::once(ManifestStage {
            id: SOURCE_STAGE_ID.into(),
            kind: plan.source_kind.clone(),
            fingerprint: SOURCE_FINGERPRINT.into(),
            compute: serde_json::Value::Null,
            table: format!("{SOURCE_STAGE_ID}/"),
        })
        .chain(plan.stages.iter().map(|s| ManifestStage {
            id: s.id.clone(),
            kind: s.kind.clone(),
            fingerprint: s.fingerprint.clone(),
            compute: s.compute.clone(),
            table: format!("{}/", s.id),
        }))
        .collect(),
        invocations: previous.map(|p| p.invocations).unwrap_or_default(),
    };
    m.invocations.push(Invocation {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        finished_at: None,
        status: InvocationStatus::Running,
        error: None,
        counts: BTreeMap::new(),
    });
    save_manifest(store, &m, rank).await?;
    Ok(m)
}

/// Records how the invocation ended, with its counts.
pub(super) async fn finish_manifest(
    store: &dyn Store,
    m: &mut Manifest,
    counts: &BTreeMap<String, StageCounts>,
    status: InvocationStatus,
    failure: Option<&RunError>,
    rank: &Rank,
) -> Result<(), RunError> {
    let inv = m.invocations.last_mut().expect("start_manifest pushed it");
    inv.finished_at = Some(manifest::now());
    inv.counts = counts.clone();
    inv.status = status;
    inv.error = failure.map(|e| e.to_string());
    save_manifest(store, m, rank).await
}

/// A rank keeps its invocations in `ranks/rNNNN/manifest.json`; `manifest.json` then carries the
/// pipeline and fingerprints (the same for every rank: the pin guarantees it) for the readers.
async fn save_manifest(store: &dyn Store, m: &Manifest, rank: &Rank) -> Result<(), RunError> {
    let path = rank.manifest_path();
    manifest::save_at(store, &path, m)
        .await
        .map_err(|e| RunError::io(path.clone(), e))?;
    if path != manifest::MANIFEST {
        manifest::save_at(store, manifest::MANIFEST, m)
            .await
            .map_err(|e| RunError::io(manifest::MANIFEST, e))?;
    }
    Ok(())
}
