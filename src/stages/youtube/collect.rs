//! The collection loop: every query's date windows (cut in two above `split_above` results),
//! paged search.list calls, each full batch of 50 new ids through videos.list and down the
//! chain, and at the end the provenance table. Reads the expanded queries and the client's
//! answers (cached or fresh); writes the stream's items and `collection/provenance.parquet`;
//! calls `YouTubeClient::search` and `videos`.

use super::bound::{Window, initial_windows, pages_of};
use super::{YouTubeSource, fmt_time, video_info};
use crate::clients::youtube::{YouTubeClient, YtError};
use crate::config::queries::Query;
use crate::error::{RunError, StageError};
use crate::record::{Provenance, VideoRecord};
use crate::runtime::stage::{SourceItem, SourceReject, StageContext};
use google_youtube3::api::Video;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

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

/// The cache key of a window's first page of query `q`: whether it was searched before.
pub(super) fn first_page_key(q: &Query, w: Window) -> crate::store::cache::CacheKey {
    let (params, _) = window_params(&YouTubeSource::base_params(q), q, w);
    crate::clients::youtube::search_key(&params)
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
            let pages = pages_of(q, self.cfg.max_pages);
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
    pub(super) async fn stream(self, cx: StageContext, out: Out) {
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
        .map_err(|e| cx.store.io_error(PROVENANCE_TABLE, e))
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
