//! `probe`: reads the media's container and stream headers in process (ffmpeg-next).
//!
//! Reads: the source slot (a local path). Writes: the `probe` slot, one row per video (duration,
//! display width/height after rotation, fps, codec, frame count, audio). Calls: libavformat, on the
//! CPU pool. Caches: nothing beyond its shards. Rejects: empty, unreadable, truncated-header,
//! audio-only files and still images.

use crate::config::{ConfigError, Seg};
use crate::engines::ffmpeg;
use crate::error::StageError;
use crate::record::{Probe, Slot, VideoRecord};
use crate::runtime::StageTask;
use crate::runtime::stage::{Processor, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// `probe` has no settings yet; the table exists so files stay uniform.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {}

pub struct ProbeStage;

/// This stage in the registry (`stages::STAGE_KINDS`).
pub const KIND: crate::stages::StageKind = crate::stages::StageKind {
    name: "probe",
    about: "duration, display size, fps, codec, frame count, audio (ffmpeg, in process)",
    build: super::build_plain::<ProbeConfig>,
    reselect: None,
    summary: None,
    release: crate::stages::Release::PerVideo,
    keys: &[("compute", crate::config::keys_of::<ProbeConfig>)],
};

impl super::PlainStage for ProbeConfig {
    const IN_FLIGHT: usize = 4;
    fn task(self, _at: &[Seg], _bcx: &BuildCx) -> Result<Box<dyn StageTask>, ConfigError> {
        Ok(super::processor_task(ProbeStage))
    }
}

#[async_trait]
impl Processor for ProbeStage {
    type Row = Probe;

    fn requires(&self) -> &'static [Slot] {
        &[Slot::Media]
    }
    fn provides(&self) -> Slot {
        Slot::Probe
    }

    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<Probe>, StageError> {
        let path = cx.media_file(rec).await?;
        let shown = path.display().to_string();
        let p = cx.cpu.run(move || ffmpeg::probe(&path)).await?;
        if p.video_duration_secs <= 0.0 {
            return Err(StageError::data(
                "no_duration",
                format!("{shown}: duration unknown or zero"),
            ));
        }
        Ok(vec![p])
    }

    fn attach(rec: &mut VideoRecord, mut rows: Vec<Probe>) {
        rec.probe = rows.pop();
    }
}
