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
//!
//! Here: the settings, `build`, the `Source` impl and the source row of a videos.list item;
//! `collect` is the collection loop (queries, date windows, batches, provenance).

mod bound;
mod collect;

use crate::clients::youtube::{ClientSettings, QuotaConfig, YouTubeClient, parse_duration};
use crate::config::queries::{Query, QueryFile};
use crate::config::{ConfigError, Seg};
use crate::error::RunError;
use crate::record::{Extras, Slot, SourceInfo};
use crate::runtime::stage::{Source, SourceStream, StageContext};
use crate::stages::BuildCx;
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::StreamExt;
use google_youtube3::api::Video;
use serde::{Deserialize, Serialize};
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
    let now_error = |bound::NowError(message)| ConfigError {
        file: qpath.clone(),
        line: None,
        column: None,
        key: Some("published_before".into()),
        message,
    };
    let today = bound::today().map_err(now_error)?;
    for q in &mut queries {
        bound::resolve_now(q, today).map_err(now_error)?;
    }
    if queries.is_empty() {
        return Err(bcx
            .src
            .error_at(&key("queries"), "the query file expands to no query"));
    }
    for q in &queries {
        for k in ["published_after", "published_before"] {
            if let Some(v) = q.params.get(k)
                && parse_time(v).is_none()
            {
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
pub(super) fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.to_utc());
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

pub(super) fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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

impl YouTubeSource {
    /// Quota units of `searches` search calls and as many videos.list calls (each search page
    /// finds at most 50 videos, one videos.list call's worth).
    fn units(&self, searches: u64) -> (u64, u64) {
        let q = &self.cfg.quota;
        let search = if q.search_bucket {
            0
        } else {
            searches * q.search_cost
        };
        (search, searches * q.videos_cost)
    }

    /// Days of quota `searches` need at the configured daily limits.
    fn quota_days(&self, searches: u64) -> f64 {
        let q = &self.cfg.quota;
        let (s, l) = self.units(searches);
        let unit_days = (s + l) as f64 / q.units_per_day.max(1) as f64;
        if q.search_bucket {
            unit_days.max(searches as f64 / q.search_calls_per_day.max(1) as f64)
        } else {
            unit_days
        }
    }
}

#[async_trait]
impl Source for YouTubeSource {
    fn provides(&self) -> &'static [Slot] {
        &[Slot::Source]
    }

    async fn open(&mut self, cx: &StageContext) -> Result<(), RunError> {
        let cache = cx.cache.get()?;
        let client = YouTubeClient::new(self.settings.clone(), cache)
            .map_err(|e| RunError::Config(e.to_string()))?;
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
        // A spawned task leaves the runtime's stage scope: the searches are the source's.
        let stage = cx.stage_id.clone();
        let collect = (*self).stream(cx, tx);
        tokio::spawn(crate::store::cache::for_stage(stage, collect));
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) })
            .boxed()
    }

    fn collects_once(&self) -> bool {
        true
    }

    fn example(&self) -> Option<crate::record::VideoRecord> {
        let source = SourceInfo {
            url: Some("https://www.youtube.com/watch?v=example".into()),
            ..Default::default()
        };
        Some(crate::record::VideoRecord::new(
            "example".into(),
            source,
            vec![None; self.extras().len()],
        ))
    }

    fn could_list(&self, stored: &SourceInfo) -> bool {
        // A row without provenance was not found by a search: nothing says it leaves.
        stored.provenance.is_empty()
            || stored
                .provenance
                .iter()
                .any(|p| self.queries.iter().any(|q| q.text == p.query))
    }

    fn inputs_digest(&self) -> String {
        let json = serde_json::to_vec(&self.queries).unwrap_or_default();
        blake3::hash(&json).to_hex()[..16].to_string()
    }

    /// Every query's windows to their last page (`bound`): exact when every page is there and
    /// no window is over `split_above`; the bound takes every dated window over it.
    async fn estimate(
        &mut self,
        cx: &StageContext,
    ) -> Result<crate::runtime::stage::SourceEstimate, RunError> {
        let c = &self.cfg;
        let cache = crate::store::cache::ResponseCache::open_existing(
            &crate::store::cache::ResponseCache::path_in(&cx.run_dir),
        )?;
        let searched = |q: &Query, w: bound::Window| {
            let key = collect::first_page_key(q, w);
            cache
                .as_ref()
                .is_some_and(|c| c.stored_status(&key).ok().flatten() == Some(200))
        };
        let settings = (c.max_pages, c.split_above, c.min_window_hours);
        let s = bound::searches(&self.queries, settings, searched);
        let all = bound::searches(&self.queries, settings, |_, _| false);
        let days = |searches: u64| self.quota_days(searches);
        let (search_units, list_units) = self.units(s.at_most);
        let pages = self.queries.iter().map(|q| bound::pages_of(q, c.max_pages));
        let pages = pages.max().unwrap_or(c.max_pages);
        let windows = match s.windows as usize {
            n if n == self.queries.len() && s.searched == 0 => String::new(),
            n if s.searched > 0 => format!(
                " in {n} date windows, {} new or not complete before ({} searched before: in the cache, free)",
                s.windows - s.searched,
                s.searched
            ),
            n => format!(" in {n} date windows"),
        };
        Ok(crate::runtime::stage::SourceEstimate {
            videos: Some(all.at_most * 50),
            more: s.at_most * 50,
            at_most: true,
            calls: vec![
                ("search.list".into(), s.at_most, search_units),
                ("videos.list".into(), s.at_most, list_units),
            ],
            quota_days: Some(days(s.at_most)),
            unsplit: (s.unsplit < s.at_most).then(|| (s.unsplit, days(s.unsplit))),
            note: format!(
                "{} queries{windows} x up to {} pages of 50{}",
                self.queries.len(),
                pages,
                if c.quota.search_bucket {
                    format!(", {} searches a day", c.quota.search_calls_per_day)
                } else {
                    format!(", {} units a day", c.quota.units_per_day)
                }
            ),
        })
    }
}
