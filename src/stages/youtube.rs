//! `youtube` source: a query file → YouTube Data API search → one row per distinct video.
//!
//! Reads: the query file (`queries/*.toml`). Calls: search.list for every query and date window
//! (paged, maxResults 50; a window whose first page estimates more results than `split_above` is
//! cut in two, down to `min_window_hours`), and videos.list in batches of 50 ids for snippet,
//! contentDetails, statistics and status. Caches: every API answer, in the run's response cache
//! (a rerun makes no call it made before), and counts quota in the per-key ledger. Writes: the
//! `source` table: metadata (title and description HTML-unescaped and raw, channel, upload time,
//! duration in seconds, counts as integers, tags, languages, status) and `provenance`, the
//! (query, parameters, page, rank) hits known when the video was passed on; the query file's
//! `domain` is carried as an extra column. When every query is answered, `collection/provenance.parquet`
//! lists every hit of every video (a video found again after it was passed on is only complete
//! there). Ids that videos.list does not return (private, deleted) are rejected as `unavailable`.
//!
//! Collection streams: each batch of 50 new ids goes to videos.list as soon as the searches have
//! found it, and its videos go down the chain at once, so judging runs while searching goes on.
//! The batches are the same as when everything was collected first (ids in the order they were
//! first found, cut every 50), so a rerun finds every call in the cache. A spent quota stops the
//! collection (exit 4) after the videos already passed on are finished; the next run picks up
//! from the cache. In a ranked run only rank 0 collects (`Source::collects_once`); the other ranks
//! read its committed table.

use crate::clients::youtube::{
    ClientSettings, QuotaConfig, YouTubeClient, YtError, parse_duration,
};
use crate::config::queries::{Query, QueryFile};
use crate::config::{ConfigError, Seg};
use crate::error::{RunError, StageError};
use crate::record::{Extras, Provenance, Slot, SourceInfo, VideoRecord};
use crate::runtime::stage::{Source, SourceItem, SourceReject, SourceStream, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::StreamExt;
use google_youtube3::api::Video;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Settings of `[source] type = "youtube"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YouTubeConfig {
    #[serde(rename = "type")]
    pub kind: String,
    /// The query file (relative to the pipeline file).
    pub queries: PathBuf,
    /// The `[services.<name>]` entry with base_url and api_key_env.
    #[serde(default = "default_service")]
    pub service: String,
    /// Pages of 50 per query and window (YouTube stops near 500 results whatever the depth).
    #[serde(default = "default_pages")]
    pub max_pages: u32,
    /// A dated window whose first page estimates more results than this is cut in two.
    #[serde(default = "default_split")]
    pub split_above: u32,
    /// ... but never below this length.
    #[serde(default = "default_min_window")]
    pub min_window_hours: u32,
    /// Only the first N expanded queries (a cheap trial run).
    #[serde(default)]
    pub max_queries: Option<usize>,
    #[serde(default)]
    pub quota: QuotaConfig,
}

fn default_service() -> String {
    "youtube".into()
}
fn default_pages() -> u32 {
    10
}
fn default_split() -> u32 {
    500
}
fn default_min_window() -> u32 {
    24
}

/// The public endpoint, used when the pipeline has no `[services.youtube]`.
pub const DEFAULT_BASE_URL: &str = "https://youtube.googleapis.com/";
pub const DEFAULT_KEY_ENV: &str = "YOUTUBE_API_KEY";

pub struct YouTubeSource {
    cfg: YouTubeConfig,
    settings: ClientSettings,
    queries: Vec<Query>,
    domain: String,
    client: Option<Arc<YouTubeClient>>,
}

pub fn build(
    table: &toml::Table,
    at: &[Seg],
    bcx: &BuildCx,
) -> Result<(Box<dyn Source>, serde_json::Value), ConfigError> {
    let mut cfg: YouTubeConfig = bcx.src.typed(table, at)?;
    let key = |k: &str| crate::config::key_at(at, k);
    let qpath = bcx.resolve(&cfg.queries);
    let (qf, _) = QueryFile::load(&qpath)?;
    let mut queries = qf.expand();
    if let Some(n) = cfg.max_queries {
        queries.truncate(n);
    }
    if queries.is_empty() {
        return Err(bcx
            .src
            .error_at(&key("queries"), "the query file expands to no query"));
    }
    for q in &queries {
        for k in ["published_after", "published_before"] {
            if let Some(v) = q.params.get(k) {
                if parse_time(v).is_none() {
                    return Err(ConfigError {
                        file: qpath.clone(),
                        line: None,
                        column: None,
                        key: Some(k.into()),
                        message: format!(
                            "query {:?}: {k} = {v:?} is neither YYYY-MM-DD nor an RFC 3339 time",
                            q.text
                        ),
                    });
                }
            }
        }
    }
    if let Some(l) = &cfg.quota.ledger {
        cfg.quota.ledger = Some(bcx.resolve(l));
    }
    let svc = bcx.services.get(&cfg.service);
    if svc.is_none() && cfg.service != default_service() {
        return Err(bcx.src.error_at(
            &key("service"),
            format!("no [services.{}] in the pipeline file", cfg.service),
        ));
    }
    let settings = ClientSettings {
        base_url: svc
            .map(|s| s.base_url.clone())
            .unwrap_or_else(|| DEFAULT_BASE_URL.into()),
        api_key_env: svc
            .and_then(|s| s.api_key_env.clone())
            .unwrap_or_else(|| DEFAULT_KEY_ENV.into()),
        timeout: Duration::from_secs(svc.and_then(|s| s.timeout_secs).unwrap_or(30)),
        max_retries: svc.and_then(|s| s.max_retries).unwrap_or(5),
        quota: cfg.quota.clone(),
    };
    let json = serde_json::to_value(&cfg).unwrap_or_default();
    Ok((
        Box::new(YouTubeSource {
            cfg,
            settings,
            queries,
            domain: qf.domain,
            client: None,
        }),
        json,
    ))
}

/// YYYY-MM-DD (midnight UTC) or an RFC 3339 time.
fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.to_utc());
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Query-file parameter names → YouTube's; ours (window_days, max_pages) are not sent.
fn api_name(k: &str) -> Option<&'static str> {
    Some(match k {
        "region_code" => "regionCode",
        "relevance_language" => "relevanceLanguage",
        "video_duration" => "videoDuration",
        "video_definition" => "videoDefinition",
        "video_caption" => "videoCaption",
        "video_license" => "videoLicense",
        "order" => "order",
        "safe_search" => "safeSearch",
        "location" => "location",
        "location_radius" => "locationRadius",
        _ => return None,
    })
}

type Window = Option<(DateTime<Utc>, DateTime<Utc>)>;

/// The query's date range cut into `window_days` pieces (or one piece, or no range at all).
fn initial_windows(q: &Query) -> Vec<Window> {
    let after = q.params.get("published_after").and_then(|v| parse_time(v));
    let before = q.params.get("published_before").and_then(|v| parse_time(v));
    let days = q
        .params
        .get("window_days")
        .and_then(|d| d.parse::<i64>().ok())
        .filter(|d| *d > 0);
    match (after, before) {
        (Some(a), Some(b)) if a < b => match days {
            Some(d) => {
                let mut out = vec![];
                let mut t = a;
                while t < b {
                    let e = (t + chrono::Duration::days(d)).min(b);
                    out.push(Some((t, e)));
                    t = e;
                }
                out
            }
            None => vec![Some((a, b))],
        },
        // One open end: sent as is, never split.
        _ => vec![None],
    }
}

/// Where the hits go: per video, in the order videos were first found; the ids waiting for
/// their videos.list batch.
#[derive(Default)]
struct Found {
    order: Vec<String>,
    provenance: HashMap<String, Vec<Provenance>>,
    pending: Vec<String>,
    batches: usize,
    passed_on: usize,
}

/// One query being searched: where it is in the query file, its parameters, the windows left,
/// and what it found so far (for its log line).
struct QueryRun<'a> {
    qi: usize,
    n: usize,
    q: &'a Query,
    base: BTreeMap<String, String>,
    /// Pages per window.
    pages: u32,
    windows: VecDeque<Window>,
    results: usize,
    pages_read: u32,
}

/// A window's search parameters, and the query's parameters as the provenance shows them (the
/// window's bounds in, our own paging settings out).
fn window_params(
    base: &BTreeMap<String, String>,
    q: &Query,
    w: Window,
) -> (BTreeMap<String, String>, String) {
    let mut params = base.clone();
    let mut shown = q.params.clone();
    shown.remove("window_days");
    shown.remove("max_pages");
    if let Some((a, b)) = w {
        params.insert("publishedAfter".into(), fmt_time(a));
        params.insert("publishedBefore".into(), fmt_time(b));
        shown.insert("published_after".into(), fmt_time(a));
        shown.insert("published_before".into(), fmt_time(b));
    }
    (params, serde_json::to_string(&shown).unwrap_or_default())
}

impl Found {
    /// One search hit: its provenance, and the video in finding order (waiting for its
    /// videos.list batch) when it is new.
    fn note(&mut self, id: String, q: &Query, shown: &str, page: u32, rank: u32) {
        let prov = self.provenance.entry(id.clone()).or_default();
        if prov.is_empty() {
            self.order.push(id.clone());
            self.pending.push(id.clone());
        }
        prov.push(Provenance {
            query: q.text.clone(),
            group: q.group.clone(),
            params: shown.to_string(),
            page,
            rank,
        });
    }
}

/// The end of the source stream; `false` once nobody listens (the run is stopping).
type Out = tokio::sync::mpsc::Sender<Result<SourceItem, RunError>>;

fn interrupted() -> RunError {
    RunError::Stopped(
        "interrupted during collection; rerun to resume (answers so far are cached)".into(),
    )
}

impl YouTubeSource {
    fn base_params(q: &Query) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("q".to_string(), q.text.clone());
        p.insert("type".to_string(), "video".to_string());
        p.insert("maxResults".to_string(), "50".to_string());
        for (k, v) in &q.params {
            if let Some(n) = api_name(k) {
                p.insert(n.to_string(), v.clone());
            }
        }
        p
    }

    /// Searches every query and window, passing each full batch of new ids on as it fills.
    /// `Ok(false)`: the receiver went away (the run is stopping).
    async fn collect(
        &self,
        client: &YouTubeClient,
        cx: &StageContext,
        out: &Out,
        found: &mut Found,
    ) -> Result<bool, RunError> {
        let n = self.queries.len();
        for (qi, q) in self.queries.iter().enumerate() {
            let pages = q
                .params
                .get("max_pages")
                .and_then(|p| p.parse().ok())
                .unwrap_or(self.cfg.max_pages)
                .max(1);
            let mut qr = QueryRun {
                qi,
                n,
                q,
                base: Self::base_params(q),
                pages,
                windows: initial_windows(q).into(),
                results: 0,
                pages_read: 0,
            };
            while let Some(w) = qr.windows.pop_front() {
                if !self
                    .search_window(client, cx, out, found, &mut qr, w)
                    .await?
                {
                    return Ok(false);
                }
            }
            tracing::info!(query = %q.text, results = qr.results, pages = qr.pages_read, videos = found.order.len(), passed_on = found.passed_on, "Query {}/{n} done.", qi + 1);
        }
        let rest = found.pending.len();
        if rest > 0 && !self.pass_on(client, cx, out, found, rest).await? {
            return Ok(false);
        }
        Ok(true)
    }

    /// Pages through one window of a query, passing on each full batch of new ids; a first page
    /// over the result cap splits the window instead. `Ok(false)`: the receiver went away.
    async fn search_window(
        &self,
        client: &YouTubeClient,
        cx: &StageContext,
        out: &Out,
        found: &mut Found,
        qr: &mut QueryRun<'_>,
        w: Window,
    ) -> Result<bool, RunError> {
        let (params, shown) = window_params(&qr.base, qr.q, w);
        let (mut token, mut rank) = (None::<String>, 0u32);
        for page in 1..=qr.pages {
            if cx.cancel.is_cancelled() {
                return Err(interrupted());
            }
            let mut p = params.clone();
            if let Some(t) = &token {
                p.insert("pageToken".into(), t.clone());
            }
            let resp = client
                .search(&p)
                .await
                .map_err(|e| stop(e, qr.qi, qr.n, &qr.q.text))?;
            qr.pages_read += 1;
            for item in resp.items.unwrap_or_default() {
                let Some(id) = item.id.and_then(|i| i.video_id) else {
                    continue;
                };
                rank += 1;
                qr.results += 1;
                found.note(id, qr.q, &shown, page, rank);
            }
            // A full batch goes now (its ids are the ones the old collect-first order
            // batched together too, so the cache keys do not change).
            while found.pending.len() >= 50 {
                if !self.pass_on(client, cx, out, found, 50).await? {
                    return Ok(false);
                }
            }
            let estimate = resp
                .page_info
                .and_then(|p| p.total_results)
                .unwrap_or(0)
                .max(0) as u32;
            if page == 1 && self.split_window(qr, w, estimate) {
                break;
            }
            match resp.next_page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        Ok(true)
    }

    /// A window whose first page estimates more than `split_above` results is cut in two
    /// halves, searched next, unless that makes them shorter than `min_window_hours`. Whether
    /// it was cut.
    fn split_window(&self, qr: &mut QueryRun<'_>, w: Window, estimate: u32) -> bool {
        let Some((a, b)) = w else {
            return false;
        };
        let hours = (b - a).num_hours();
        if estimate > self.cfg.split_above && hours >= 2 * self.cfg.min_window_hours as i64 {
            let mid = a + (b - a) / 2;
            tracing::info!(query = %qr.q.text, from = %fmt_time(a), to = %fmt_time(b), estimate, "Window over the result cap: splitting it.");
            qr.windows.push_front(Some((mid, b)));
            qr.windows.push_front(Some((a, mid)));
            return true;
        }
        false
    }

    /// videos.list for the first `take` pending ids; their records (or `unavailable` rejects)
    /// go down the chain. `Ok(false)`: nobody listens any more.
    async fn pass_on(
        &self,
        client: &YouTubeClient,
        cx: &StageContext,
        out: &Out,
        found: &mut Found,
        take: usize,
    ) -> Result<bool, RunError> {
        if cx.cancel.is_cancelled() {
            return Err(interrupted());
        }
        let ids: Vec<String> = found.pending.drain(..take).collect();
        found.batches += 1;
        let bi = found.batches;
        let resp = client.videos(&ids).await.map_err(|e| match e {
            YtError::QuotaSpent(m) => RunError::Stopped(format!(
                "YouTube quota: {m}. Stopped at videos.list batch {bi} ({} videos passed on); rerun after the reset to continue (nothing is repeated)",
                found.passed_on
            )),
            YtError::Unavailable { .. } => RunError::Stopped(format!(
                "{e}. Stopped at videos.list batch {bi}; rerun to continue"
            )),
            other => RunError::Config(other.to_string()),
        })?;
        let mut details: HashMap<String, Video> = HashMap::new();
        for v in resp.items.unwrap_or_default() {
            if let Some(id) = v.id.clone() {
                details.insert(id, v);
            }
        }
        let extra = vec![Some(self.domain.clone())];
        for id in ids {
            let prov = found.provenance.get(&id).cloned().unwrap_or_default();
            let item = match details.remove(&id) {
                Some(v) => {
                    let mut info = video_info(&v);
                    info.provenance = prov;
                    Ok(VideoRecord::new(id, info, extra.clone()))
                }
                None => Err(SourceReject {
                    video_id: id.clone(),
                    extra: extra.clone(),
                    error: StageError::data(
                        "unavailable",
                        format!("videos.list did not return {id} (private, deleted or blocked)"),
                    ),
                }),
            };
            found.passed_on += 1;
            if out.send(Ok(item)).await.is_err() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Collects, streaming into `out`; a stop is the stream's last item.
    async fn stream(self, cx: StageContext, out: Out) {
        let Some(client) = self.client.clone() else {
            let _ = out
                .send(Err(RunError::Internal(
                    "youtube source run before open".into(),
                )))
                .await;
            return;
        };
        let mut found = Found::default();
        match self.collect(&client, &cx, &out, &mut found).await {
            Ok(true) => {
                if let Err(e) = write_provenance(&cx, &found).await {
                    let _ = out.send(Err(e)).await;
                    return;
                }
                let left = client
                    .remaining()
                    .map(|r| {
                        r.iter()
                            .map(|(b, used, budget)| format!("{b} {used}/{budget}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                tracing::info!(
                    videos = found.order.len(),
                    videos_list_batches = found.batches,
                    api_calls = client.calls.load(std::sync::atomic::Ordering::Relaxed),
                    quota_used_today = %left,
                    "Collection done."
                );
            }
            Ok(false) => {}
            Err(e) => {
                let _ = out.send(Err(e)).await;
            }
        }
    }
}

/// Where every hit of a complete collection is written.
pub const PROVENANCE_TABLE: &str = "collection/provenance.parquet";

/// One row per (video, hit), videos in the order they were first found.
#[derive(Serialize, Deserialize)]
struct HitRow {
    video_id: String,
    query: String,
    group: String,
    params: String,
    page: u32,
    rank: u32,
}

async fn write_provenance(cx: &StageContext, found: &Found) -> Result<(), RunError> {
    use serde_arrow::to_record_batch;
    let rows: Vec<HitRow> = found
        .order
        .iter()
        .flat_map(|id| {
            found.provenance[id].iter().map(move |p| HitRow {
                video_id: id.clone(),
                query: p.query.clone(),
                group: p.group.clone(),
                params: p.params.clone(),
                page: p.page,
                rank: p.rank,
            })
        })
        .collect();
    let fields = crate::store::shards::fields_of::<HitRow>()?;
    let batch = to_record_batch(&fields, &rows)
        .map_err(|e| RunError::Internal(format!("provenance table: {e}")))?;
    let bytes = crate::store::shards::encode_table(&batch)?;
    cx.store
        .put(PROVENANCE_TABLE, bytes)
        .await
        .map_err(|e| RunError::io(format!("{}/{PROVENANCE_TABLE}", cx.store.location()), e))
}

/// A call that gave no answer stops the collection; the message says how far it got.
fn stop(e: YtError, qi: usize, n: usize, q: &str) -> RunError {
    let at = format!("at query {}/{n} ({q:?})", qi + 1);
    match e {
        YtError::QuotaSpent(m) => RunError::Stopped(format!(
            "YouTube quota: {m}. Collection stopped {at}; every answer so far is cached, so rerunning after the reset continues from there without repeating a call"
        )),
        YtError::KeyInvalid { .. } | YtError::Setup(_) | YtError::Refused { .. } => {
            RunError::Config(format!("{e} ({at})"))
        }
        YtError::Unavailable { .. } => RunError::Stopped(format!(
            "{e}. Collection stopped {at}; rerun to continue (answers so far are cached)"
        )),
    }
}

fn unescape(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|t| html_escape::decode_html_entities(t).into_owned())
}

/// The source row of one videos.list item; parts that are missing stay null.
pub fn video_info(v: &Video) -> SourceInfo {
    let sn = v.snippet.as_ref();
    let cd = v.content_details.as_ref();
    let st = v.statistics.as_ref();
    let status = v.status.as_ref();
    let title_raw = sn.and_then(|s| s.title.clone());
    let description_raw = sn.and_then(|s| s.description.clone());
    let duration_iso = cd.and_then(|c| c.duration.clone());
    SourceInfo {
        url: v
            .id
            .as_ref()
            .map(|id| format!("https://www.youtube.com/watch?v={id}")),
        title: unescape(&title_raw),
        title_raw,
        description: unescape(&description_raw),
        description_raw,
        channel_id: sn.and_then(|s| s.channel_id.clone()),
        channel_title: sn.and_then(|s| s.channel_title.clone()),
        published_at: sn.and_then(|s| s.published_at).map(fmt_time),
        duration_secs: duration_iso.as_deref().and_then(parse_duration),
        duration_iso,
        view_count: st.and_then(|s| s.view_count).map(|n| n as i64),
        like_count: st.and_then(|s| s.like_count).map(|n| n as i64),
        comment_count: st.and_then(|s| s.comment_count).map(|n| n as i64),
        tags: sn.and_then(|s| s.tags.clone()),
        category_id: sn.and_then(|s| s.category_id.clone()),
        default_language: sn.and_then(|s| s.default_language.clone()),
        default_audio_language: sn.and_then(|s| s.default_audio_language.clone()),
        live_broadcast_content: sn.and_then(|s| s.live_broadcast_content.clone()),
        definition: cd.and_then(|c| c.definition.clone()),
        caption: cd.and_then(|c| c.caption.as_deref().map(|c| c == "true")),
        privacy_status: status.and_then(|s| s.privacy_status.clone()),
        license: status.and_then(|s| s.license.clone()),
        embeddable: status.and_then(|s| s.embeddable),
        made_for_kids: status.and_then(|s| s.made_for_kids),
        ..Default::default()
    }
}

#[async_trait]
impl Source for YouTubeSource {
    fn provides(&self) -> &'static [Slot] {
        &[Slot::Source]
    }

    async fn open(&mut self, cx: &StageContext) -> Result<(), RunError> {
        let cache = cx.cache.get().map_err(|e| RunError::Internal(e.detail))?;
        let client = YouTubeClient::new(self.settings.clone(), cache).map_err(|e| match e {
            YtError::Setup(m) => RunError::Config(m),
            other => RunError::Config(other.to_string()),
        })?;
        tracing::info!(
            queries = self.queries.len(),
            key = client.key_id(),
            "Collecting from the YouTube Data API."
        );
        self.client = Some(Arc::new(client));
        Ok(())
    }

    fn extras(&self) -> Extras {
        Arc::new(vec!["domain".to_string()])
    }

    /// Unknown until the searches are done: videos go on as they are found.
    fn total(&self) -> Option<u64> {
        None
    }

    fn run(self: Box<Self>, cx: StageContext) -> SourceStream {
        // A few batches ahead of the chain at most: collection waits for slow stages rather
        // than hold every video in memory.
        let (tx, rx) = tokio::sync::mpsc::channel(100);
        tokio::spawn((*self).stream(cx, tx));
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) })
            .boxed()
    }

    fn collects_once(&self) -> bool {
        true
    }

    /// Every query to `max_pages` pages of 50: upper bounds (a query that runs out of results
    /// stops early; a dated window over `split_above` results adds searches for its halves).
    async fn estimate(
        &mut self,
        _cx: &StageContext,
    ) -> Result<crate::runtime::stage::SourceEstimate, RunError> {
        let q = &self.cfg.quota;
        let searches = self.queries.len() as u64 * self.cfg.max_pages as u64;
        let videos = searches * 50;
        let lists = videos.div_ceil(50);
        let (search_units, list_units) = (
            if q.search_bucket {
                0
            } else {
                searches * q.search_cost
            },
            lists * q.videos_cost,
        );
        let unit_days = (search_units + list_units) as f64 / q.units_per_day.max(1) as f64;
        let days = if q.search_bucket {
            unit_days.max(searches as f64 / q.search_calls_per_day.max(1) as f64)
        } else {
            unit_days
        };
        Ok(crate::runtime::stage::SourceEstimate {
            videos: Some(videos),
            at_most: true,
            calls: vec![
                ("search.list".into(), searches, search_units),
                ("videos.list".into(), lists, list_units),
            ],
            quota_days: Some(days),
            note: format!(
                "{} queries x up to {} pages of 50{}",
                self.queries.len(),
                self.cfg.max_pages,
                if q.search_bucket {
                    format!(", {} searches a day", q.search_calls_per_day)
                } else {
                    format!(", {} units a day", q.units_per_day)
                }
            ),
        })
    }
}
