//! The contracts between the runtime and the stages.
//!
//! A `Processor` computes one video's rows and nothing else: the runner decides what is already
//! done, bounds concurrency, applies timeouts and retries, persists rows and rejects, and forwards
//! the record. Cancellation contract: `process` may be dropped at any `.await` (Ctrl-C, timeout);
//! it must not leave partial state visible, which holds because everything it persists goes
//! through `Store::put` (atomic) and is only *recorded* as done by the runner afterwards.

use crate::error::StageError;
use crate::record::{Extras, Slot, VideoRecord};
use crate::store::Store;
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The id of the source's table, which the source loop writes as a stage writes its own.
pub const SOURCE_STAGE_ID: &str = "source";

pub use super::cpu::CpuPool;

/// What a stage may use while it computes.
#[derive(Clone)]
pub struct StageContext {
    pub stage_id: String,
    /// Fingerprint of this stage's compute settings and of every stage before it.
    pub fingerprint: String,
    /// What its answers come from beyond its settings (`PlannedStage::input_salt`).
    pub input_salt: String,
    pub store: Arc<dyn Store>,
    /// The run directory on disk (for files that tools open by path: media, the response cache).
    pub run_dir: std::path::PathBuf,
    /// The run's response cache (opened on first use).
    pub cache: crate::store::cache::CacheHandle,
    pub cpu: CpuPool,
    pub cancel: CancellationToken,
    pub extras: Extras,
    /// Counters the stage keeps while it computes (how often OCR reused an earlier frame's
    /// result, …): they are saved with the stage's counts and shown in the run summary.
    pub tally: Tally,
    /// This process's share of the videos (the runtime filters and names shards by it).
    pub rank: crate::runtime::ranks::Rank,
    /// Local copies of media this process fetched from or stored into an object-store run: the
    /// runner deletes them when the invocation completes (the store keeps the media).
    pub local_media: LocalMedia,
    /// Sizes and BLAKE3 of the objects each video's computation stored (`put_object`), until
    /// the runner hands them to the commit that settles the video.
    pub objects: ObjectLog,
    /// Frames decoded by an earlier stage of this pass, for a later one that reads pixels.
    pub decoded: crate::runtime::decoded::DecodedFrames,
    /// The content digests of the media files a source lists, kept by their stat.
    pub media_digests: crate::store::media_digests::MediaDigests,
    /// The settlements of videos the pass did not send to each stage, for the runner to hold
    /// apart once the pass is complete.
    pub unsent: Unsent,
}

/// One settlement: (video, shard, the shard's commit id).
pub type Settlement = (String, String, String);

/// Per stage, the settlements its stage loop was not sent this pass.
#[derive(Clone, Default)]
pub struct Unsent(Arc<std::sync::Mutex<std::collections::BTreeMap<String, Vec<Settlement>>>>);

impl Unsent {
    pub fn add(&self, stage: &str, settled: Vec<Settlement>) {
        if settled.is_empty() {
            return;
        }
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(stage.to_string()).or_default().extend(settled);
    }

    pub fn take(&self) -> std::collections::BTreeMap<String, Vec<Settlement>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The objects stored per video while it computes (see `StageContext::objects`).
#[derive(Clone, Default)]
pub struct ObjectLog(
    Arc<
        std::sync::Mutex<
            std::collections::HashMap<
                String,
                std::collections::BTreeMap<String, crate::store::commits::ObjectSum>,
            >,
        >,
    >,
);

impl ObjectLog {
    fn add(&self, sum: crate::store::commits::ObjectSum) {
        let video = sum.video.clone().unwrap_or_default();
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(video)
            .or_default()
            .insert(sum.path.clone(), sum);
    }

    /// The objects a video stored (a retried attempt's rewrite of a path counts once), forgotten.
    pub fn take(&self, video_id: &str) -> Vec<crate::store::commits::ObjectSum> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(video_id)
            .map(|m| m.into_values().collect())
            .unwrap_or_default()
    }
}

/// The local media copies of one invocation (see `StageContext::local_media`).
#[derive(Clone, Default)]
pub struct LocalMedia(Arc<std::sync::Mutex<std::collections::HashSet<std::path::PathBuf>>>);

impl LocalMedia {
    fn add(&self, path: std::path::PathBuf) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path);
    }

    /// Deletes every copy; returns how many files and bytes were removed.
    pub fn remove_all(&self) -> (u64, u64) {
        let paths = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let (mut files, mut bytes) = (0, 0);
        for p in paths {
            let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            if std::fs::remove_file(&p).is_ok() {
                files += 1;
                bytes += size;
            }
        }
        (files, bytes)
    }
}

impl StageContext {
    /// A context for work outside a run (`run --dry-run` listing a source): a read-only store
    /// on the system temp folder, a cache nobody opens.
    pub fn detached(run_dir: &std::path::Path) -> Result<Self, crate::error::RunError> {
        let tmp = std::env::temp_dir();
        let store =
            crate::store::LocalStore::open_read_only(&tmp).map_err(crate::error::io(&tmp))?;
        Ok(Self {
            stage_id: SOURCE_STAGE_ID.into(),
            fingerprint: String::new(),
            input_salt: String::new(),
            store: Arc::new(store),
            run_dir: run_dir.to_path_buf(),
            cache: crate::store::cache::CacheHandle::new(&tmp),
            cpu: CpuPool::new(1),
            cancel: CancellationToken::new(),
            extras: Arc::new(vec![]),
            tally: Default::default(),
            rank: Default::default(),
            local_media: Default::default(),
            objects: Default::default(),
            decoded: Default::default(),
            media_digests: crate::store::media_digests::MediaDigests::read_only(run_dir),
            unsent: Default::default(),
        })
    }

    /// A local file of the record's media for tools that open paths (ffmpeg). On an object-store
    /// run the media live in the store and are fetched once into the local work folder.
    pub async fn media_file(&self, rec: &VideoRecord) -> Result<std::path::PathBuf, StageError> {
        let path = rec.media_path(&self.run_dir)?;
        let rel = rec
            .media
            .as_ref()
            .map(|m| m.path.as_str())
            .unwrap_or_default();
        if std::path::Path::new(rel).is_absolute()
            || self.store.local_path(rel).is_some()
            || path.exists()
        {
            return Ok(path);
        }
        self.store
            .get_file(rel, &path)
            .await
            .map_err(|e| StageError::external("media_fetch", at(&*self.store, rel, e)))?;
        self.local_media.add(path.clone());
        Ok(path)
    }

    /// Stores an object one video's rows refer to (a sampled frame's JPEG) at `rel`, and records
    /// its size and BLAKE3 for the commit that settles the video: `verify` then tells a damaged
    /// or missing frame from a good one.
    pub async fn put_object(
        &self,
        video_id: &str,
        rel: &str,
        data: Vec<u8>,
    ) -> Result<(), StageError> {
        let sum = crate::store::commits::ObjectSum::of(rel, &data, Some(video_id));
        self.store
            .put(rel, data)
            .await
            .map_err(|e| StageError::internal("write_object", at(&*self.store, rel, e)))?;
        self.objects.add(sum);
        Ok(())
    }

    /// Stores media a stage wrote into the local work folder at `rel` (a no-op when the run
    /// directory is that folder): streamed, so a large video is never held in memory.
    pub async fn keep_media(&self, rel: &str) -> Result<(), StageError> {
        if self.store.local_path(rel).is_some() {
            return Ok(());
        }
        let file = self.run_dir.join(rel);
        self.store
            .put_file(rel, &file)
            .await
            .map_err(|e| StageError::external("media_store", at(&*self.store, rel, e)))?;
        self.local_media.add(file);
        Ok(())
    }
}

/// The JPEG of a sampled frame, from the run's store (every stage that reads frames uses this,
/// so a missing frame is the same internal error everywhere: the frames table names a file the
/// run directory lacks).
pub async fn frame_jpeg(
    store: &dyn Store,
    f: &crate::record::FrameRef,
) -> Result<Vec<u8>, StageError> {
    store
        .get(&f.path)
        .await
        .map_err(|e| StageError::internal("frame_missing", at(store, &f.path, e)))
}

/// How a failed call of the run's store on the object at `rel` reads.
fn at(store: &dyn Store, rel: &str, e: std::io::Error) -> String {
    format!("{}/{rel}: {e}", store.location())
}

/// Named counters of one stage in one invocation.
#[derive(Clone, Default)]
pub struct Tally(Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>);

impl Tally {
    pub fn add(&self, name: &str, n: u64) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(name.to_string()).or_default() += n;
    }

    pub fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A stage that adds one slot to each video.
#[async_trait]
pub trait Processor: Send + Sync + 'static {
    /// One persisted row; a video yields zero or more. Stored as-is in the stage's Parquet shards
    /// and read back on resume, so the fields are the table's columns.
    type Row: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;

    /// Slots that must be filled before this stage runs.
    fn requires(&self) -> &'static [Slot];
    /// The slot this stage fills.
    fn provides(&self) -> Slot;

    /// The slots `process` reads (by default those it requires): what its input digest covers,
    /// so a stored row is computed again exactly when one of them changed (`runtime::rerun`).
    /// A stage that reads a slot it does not require (the title, a transcript when there is
    /// one) names it here.
    fn reads(&self) -> Vec<Slot> {
        self.requires().to_vec()
    }

    /// Whether `process` reads the source's extra columns (a label): its rows are then computed
    /// again when they change, not only written again with the new values.
    fn reads_extras(&self) -> bool {
        false
    }

    /// Why this stage rejects `rec` before computing anything, whatever its inputs hold (a
    /// YouTube URL while downloads from YouTube are off); `process` returns this error first,
    /// and `run --dry-run` prices nothing after this stage for such a video. None by default.
    fn refuses(&self, _rec: &VideoRecord) -> Option<StageError> {
        None
    }

    /// Computes the rows of one video. Errors are classified by `StageError::kind`.
    async fn process(
        &self,
        rec: &VideoRecord,
        cx: &StageContext,
    ) -> Result<Vec<Self::Row>, StageError>;

    /// Puts the rows (fresh or read back from a previous run) into the record's slot.
    fn attach(rec: &mut VideoRecord, rows: Vec<Self::Row>);

    /// Whether the video goes on down the chain, from its rows and the stage's `select`
    /// thresholds. Thresholds are not part of the fingerprint: changing them re-decides from the
    /// stored rows, with no recomputation (and `vidcurate rethreshold` does it without a run).
    /// `extras` names the record's extra columns (a reference label, say).
    fn keep(&self, _rec: &VideoRecord, _extras: &[String], _rows: &[Self::Row]) -> bool {
        true
    }

    /// What one video costs this stage, for `run --dry-run` (nothing by default).
    fn estimate(&self) -> StageEstimate {
        StageEstimate::default()
    }

    /// Whether `process` reads frames as decoded through `StageContext::decoded` (see
    /// `crate::runtime::decoded`).
    fn reads_decoded_frames(&self) -> bool {
        false
    }
}

/// One model call a stage makes per video, as `run --dry-run` prices it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallEstimate {
    pub service: String,
    pub model: String,
    /// Characters of prompt (4 to a token, the service client's own estimate).
    pub prompt_chars: u64,
    pub images: u32,
    /// Output tokens at most (the estimate takes the allowance: an upper bound).
    pub max_tokens: u32,
    /// Asked under a JSON Schema: a server may refuse how, once (`clients::llm`'s dialect).
    pub structured: bool,
}

/// What a stage does per video, for `run --dry-run`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageEstimate {
    pub calls: Vec<CallEstimate>,
    /// Frames written per video (at most) and bytes per frame (about).
    pub frames: Option<(u32, u64)>,
}

/// What a source will fetch, for `run --dry-run`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceEstimate {
    /// Videos it yields (None: unknown).
    pub videos: Option<u64>,
    /// Whether `videos` is an upper bound (a search) rather than a count (a listing).
    pub at_most: bool,
    /// (method, calls at most, quota units at most).
    pub calls: Vec<(String, u64, u64)>,
    /// Days of quota the calls need at the configured daily limits.
    pub quota_days: Option<f64>,
    /// Where `calls` is a worst case that splits windows: the search calls and days when none
    /// is split (exact when every page is there).
    pub unsplit: Option<(u64, f64)>,
    /// How the numbers were reached.
    pub note: String,
    /// A source taken as its stored rows: the videos its searches not made before may add (at
    /// most).
    pub more: u64,
}

/// Something the source could not turn into a video.
#[derive(Debug, Clone)]
pub struct SourceReject {
    pub video_id: String,
    pub extra: Vec<Option<String>>,
    pub error: StageError,
}

pub type SourceItem = Result<VideoRecord, SourceReject>;

/// What `Source::run` yields. An `Err` ends the source: what it yielded before still goes down
/// the chain and is persisted, then the run stops with that error (a quota spent halfway through
/// a collection that streams).
pub type SourceStream = BoxStream<'static, Result<SourceItem, crate::error::RunError>>;

/// Where videos come from. `open` does the listing (and knows the total when it can); `run`
/// streams the records, and the runner persists them as the `source` table.
#[async_trait]
pub trait Source: Send + 'static {
    /// Slots every record this source yields has filled (always `Source`; `Media` when it lists
    /// local files).
    fn provides(&self) -> &'static [Slot];
    /// Lists what is to be processed; errors here are configuration errors (missing folder...).
    async fn open(&mut self, cx: &StageContext) -> Result<(), crate::error::RunError>;
    /// Names of the extra columns carried through every table (known after `open`).
    fn extras(&self) -> Extras;
    /// Number of items `run` will yield, when known.
    fn total(&self) -> Option<u64>;
    /// Yields the videos. Must stop promptly when `cx.cancel` fires.
    fn run(self: Box<Self>, cx: StageContext) -> SourceStream;
    /// Whether a stored `source` row is one today's inputs could list again, for a source that
    /// collects once (false: a video only queries the query file no longer expands to found):
    /// the dry run names those as leaving the run, as the run itself would drop them.
    fn could_list(&self, _stored: &crate::record::SourceInfo) -> bool {
        true
    }
    /// Whether a ranked run collects once, on rank 0, for every rank (a source that spends an
    /// API quota); the other ranks then read its committed table. Cheap sources (local files)
    /// are listed by every rank.
    fn collects_once(&self) -> bool {
        false
    }
    /// A digest of what the source lists from beyond the pipeline file (the queries a query
    /// file expands to), for a source that collects once: the collection a ranked run's other
    /// ranks wait for is of this pipeline and these inputs, so after a query-file edit they
    /// wait for rank 0's new collection instead of reading the old one as complete.
    fn inputs_digest(&self) -> String {
        String::new()
    }
    /// A record like those `run` yields, for `run --dry-run` to price the videos a search has
    /// not found yet (whether a stage refuses them); None: a record with nothing but an id.
    fn example(&self) -> Option<VideoRecord> {
        None
    }
    /// Whether the records come from a `source` table another worker commits (a rank following
    /// rank 0's collection): they are passed on, not written again.
    fn already_committed(&self) -> bool {
        false
    }
    /// What `run` would fetch, without calling anything (default: `open`, then `total`: right
    /// for listings of local files).
    async fn estimate(
        &mut self,
        cx: &StageContext,
    ) -> Result<SourceEstimate, crate::error::RunError> {
        self.open(cx).await?;
        Ok(SourceEstimate {
            videos: self.total(),
            note: "listed".into(),
            ..Default::default()
        })
    }
}
