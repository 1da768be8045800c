//! The source of ranks other than 0 when the pipeline's source collects once (YouTube): follows
//! the `source` table rank 0 commits while it collects, and yields this rank's share of it as it
//! appears, so every rank works while rank 0 is still searching.
//!
//! Reads: the committed `source` shards (each once) and `source/_collected.json`, which rank 0
//! writes when its collection has ended and every row is committed; the marker names the run's
//! pipeline fingerprint, so a marker left by an earlier collection with other settings does not
//! end this one. Calls nothing, so the quota is spent once per run, not once per rank.

use super::chain::{SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use super::stage::{Source, SourceItem, SourceStream, StageContext};
use crate::error::RunError;
use crate::record::{Extras, SourceInfo, VideoRecord};
use crate::store::shards::read_new_slots;
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::HashSet;
use std::time::Duration;

/// Written by the collecting rank once its source table is complete.
pub const COLLECTED: &str = "source/_collected.json";

/// The marker's contents for a collection under `pipeline_fingerprint` (the run's pin).
pub fn marker(pipeline_fingerprint: &str) -> Vec<u8> {
    serde_json::json!({
        "collected_at": crate::store::manifest::now(),
        "pipeline_fingerprint": pipeline_fingerprint,
    })
    .to_string()
    .into_bytes()
}

pub struct CollectedSource {
    extras: Extras,
    provides: &'static [crate::record::Slot],
    /// The pin's pipeline fingerprint: only a marker naming it ends the collection.
    collection: String,
    /// How often to look for new shards and the marker.
    poll: Duration,
}

impl CollectedSource {
    /// Stands in for `original` (whose extras and slots it keeps) on a rank that does not collect.
    pub fn instead_of(original: &dyn Source, pipeline_fingerprint: &str) -> Self {
        Self {
            extras: original.extras(),
            provides: original.provides(),
            collection: pipeline_fingerprint.to_string(),
            poll: Duration::from_secs(2),
        }
    }

    /// Whether rank 0 has marked this collection complete.
    async fn complete(&self, cx: &StageContext) -> Result<bool, RunError> {
        match cx.store.get(COLLECTED).await {
            Ok(b) => Ok(serde_json::from_slice::<serde_json::Value>(&b)
                .ok()
                .is_some_and(|m| m["pipeline_fingerprint"] == self.collection.as_str())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(cx.store.io_error(COLLECTED, e)),
        }
    }

    /// Passes on this rank's videos of each new shard until the marker says the table is whole.
    async fn follow(
        self,
        cx: StageContext,
        out: &tokio::sync::mpsc::Sender<Result<SourceItem, RunError>>,
    ) -> Result<(), RunError> {
        let (mut seen, mut passed) = (HashSet::new(), 0usize);
        let started = std::time::Instant::now();
        let mut said = None::<std::time::Instant>;
        loop {
            // The marker first: a listing made after it is seen holds every row.
            let complete = self.complete(&cx).await?;
            let view =
                read_new_slots(&cx.store, SOURCE_STAGE_ID, SOURCE_FINGERPRINT, &mut seen).await?;
            let rows = view.rows::<SourceInfo>()?;
            let columns = self
                .extras
                .iter()
                .map(|name| view.column(name).unwrap_or_default())
                .collect::<Vec<_>>();
            let mut ids: Vec<&String> = rows.keys().filter(|v| cx.rank.owns(v)).collect();
            ids.sort();
            for id in ids {
                let Some(info) = rows[id].first().cloned() else {
                    continue;
                };
                let extra = columns.iter().map(|c| c.get(id).cloned()).collect();
                passed += 1;
                if out
                    .send(Ok(Ok(VideoRecord::new(id.clone(), info, extra))))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            if complete {
                tracing::info!(
                    videos = passed,
                    "Rank 0's collection is complete; this rank has its share."
                );
                return Ok(());
            }
            if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                tracing::info!(
                    waited_secs = started.elapsed().as_secs(),
                    passed_on = passed,
                    "Following rank 0's collection (this source collects once per run)."
                );
                said = Some(std::time::Instant::now());
            }
            tokio::select! {
                _ = cx.cancel.cancelled() => {
                    return Err(RunError::Stopped("interrupted while following rank 0's collection".into()));
                }
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
    }
}

#[async_trait]
impl Source for CollectedSource {
    fn provides(&self) -> &'static [crate::record::Slot] {
        self.provides
    }

    async fn open(&mut self, _cx: &StageContext) -> Result<(), RunError> {
        Ok(())
    }

    fn extras(&self) -> Extras {
        self.extras.clone()
    }

    /// Unknown: rank 0 may still be collecting.
    fn total(&self) -> Option<u64> {
        None
    }

    fn already_committed(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: StageContext) -> SourceStream {
        let (tx, rx) = tokio::sync::mpsc::channel(100);
        tokio::spawn(async move {
            if let Err(e) = (*self).follow(cx, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) })
            .boxed()
    }
}
