//! The source of ranks other than 0 when the pipeline's source collects once (YouTube): waits
//! for rank 0 to finish collecting, then yields this rank's share of the committed `source` table.
//!
//! Reads: `source/_collected.json` (rank 0 writes it when its collection has ended and every row
//! is committed) and the `source` table. Calls nothing, so the quota is spent once per run, not
//! once per rank.

use super::chain::{SOURCE_FINGERPRINT, SOURCE_STAGE_ID};
use super::shards::read_table;
use super::stage::{Source, SourceItem, StageContext};
use crate::error::RunError;
use crate::record::{Extras, SourceInfo, VideoRecord};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use std::time::Duration;

/// Written by the collecting rank once its source table is complete.
pub const COLLECTED: &str = "source/_collected.json";

pub struct CollectedSource {
    extras: Extras,
    provides: &'static [crate::record::Slot],
    items: Vec<VideoRecord>,
    /// How often to look for the marker.
    poll: Duration,
}

impl CollectedSource {
    /// Stands in for `original` (whose extras and slots it keeps) on a rank that does not collect.
    pub fn instead_of(original: &dyn Source) -> Self {
        Self {
            extras: original.extras(),
            provides: original.provides(),
            items: vec![],
            poll: Duration::from_secs(5),
        }
    }
}

#[async_trait]
impl Source for CollectedSource {
    fn provides(&self) -> &'static [crate::record::Slot] {
        self.provides
    }

    async fn open(&mut self, cx: &StageContext) -> Result<(), RunError> {
        let io = |e| RunError::io(format!("{}/{COLLECTED}", cx.store.location()), e);
        let started = std::time::Instant::now();
        let mut said = None::<std::time::Instant>;
        while !cx.store.exists(COLLECTED).await.map_err(io)? {
            if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                tracing::info!(
                    waited_secs = started.elapsed().as_secs(),
                    "Waiting for rank 0 to finish collecting (this source collects once per run)."
                );
                said = Some(std::time::Instant::now());
            }
            tokio::select! {
                _ = cx.cancel.cancelled() => {
                    return Err(RunError::Stopped("interrupted while waiting for rank 0's collection".into()));
                }
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
        let view = read_table(&cx.store, SOURCE_STAGE_ID, SOURCE_FINGERPRINT, true).await?;
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
            self.items.push(VideoRecord::new(id.clone(), info, extra));
        }
        tracing::info!(
            videos = self.items.len(),
            "Read this rank's share of rank 0's collection."
        );
        Ok(())
    }

    fn extras(&self) -> Extras {
        self.extras.clone()
    }

    fn total(&self) -> Option<u64> {
        Some(self.items.len() as u64)
    }

    fn run(self: Box<Self>, _cx: StageContext) -> BoxStream<'static, SourceItem> {
        futures::stream::iter(self.items.into_iter().map(Ok)).boxed()
    }
}
