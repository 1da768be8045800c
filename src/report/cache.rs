//! What `vidcurate cache stats` prints: what a run's response cache holds per service and method (then per
//! stage that paid), and what those answers cost at the run's prices. Reads the cache (and, for an object-store run, the
//! parts every worker published); calls nothing; writes nothing in the run.

use crate::error::RunError;
use crate::store::cache::{CacheHandle, CacheStats, ResponseCache};
use crate::store::manifest::Manifest;
use std::collections::BTreeMap;
use std::path::Path;

/// A run's response cache: the local one, or for a run on an object store the answers every
/// worker published, gathered into `gathered`.
struct Opened {
    cache: Option<ResponseCache>,
    manifest: Option<Manifest>,
    shared: bool,
    location: String,
}

fn open(run_dir: &Path, gathered: &Path) -> Result<Opened, RunError> {
    let location = run_dir.to_string_lossy().to_string();
    let (path, manifest, shared) = if crate::store::objects::is_url(&location) {
        let store = crate::store::open_run(&location, crate::store::Access::Read)
            .map_err(|e| RunError::io(location.clone(), e))?;
        let rt = crate::runtime::tokio_runtime()?;
        let handle = CacheHandle::shared(gathered, store.clone(), 0);
        rt.block_on(handle.import_parts())?;
        let m = rt.block_on(crate::store::manifest::load_at(
            store.as_ref(),
            crate::store::manifest::MANIFEST,
        ));
        (ResponseCache::path_in(gathered), m, true)
    } else {
        let m = crate::store::manifest::read_local(run_dir);
        (ResponseCache::path_in(run_dir), m, false)
    };
    Ok(Opened {
        cache: ResponseCache::open_existing(&path)?,
        manifest,
        shared,
        location,
    })
}

/// `vidcurate cache stats RUN_DIR`: the tables per service and per stage, with their cost.
pub fn stats(run_dir: &Path) -> Result<String, RunError> {
    let gathered = tempfile::tempdir().map_err(|e| RunError::at("a temporary folder", e))?;
    let o = open(run_dir, gathered.path())?;
    let (location, shared) = (&o.location, o.shared);
    let Some(cache) = o.cache else {
        return Ok(format!(
            "{location}: no response cache (no API stage has run{})\n",
            if shared {
                ", or no worker published its answers yet"
            } else {
                ""
            }
        ));
    };
    let prices = o
        .manifest
        .as_ref()
        .map(crate::store::run::prices_of)
        .unwrap_or_default();
    let cost = |s: &CacheStats| cost(&prices, s);
    let header = format!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>10}",
        "method", "entries", "batch", "hits", "misses", "tokens_in", "tokens_out", "est_usd"
    );
    let mut out = format!("{:<12} {header}\n", "service");
    let per_stage = cache.stats()?;
    let (mut total, mut saved) = (0.0, 0.0);
    for s in crate::store::cache::by_service(&per_stage) {
        let (usd, less) = cost(&s);
        (total, saved) = (total + usd, saved + less);
        out += &format!("{}\n", row(&format!("{:<12} ", s.service), &s, usd));
    }
    if per_stage.iter().any(|s| s.stage.is_some()) {
        out += &format!("\n{:<16} {:<12} {header}\n", "stage", "service");
        for s in &per_stage {
            let stage = s.stage.as_deref().unwrap_or("-");
            let first = format!("{stage:<16} {:<12} ", s.service);
            out += &format!("{}\n", row(&first, s, cost(s).0));
        }
    }
    if saved > 0.0 {
        out += &format!(
            "batch answers are priced at the batch rate (usd_per_mtok_*_batch, default half): ${saved:.4} less than live\n"
        );
    }
    out += &format!("estimated cost of the cached answers: ${total:.4} (hits cost nothing)\n");
    // What each server was learnt to take (clients::llm's dialect): a refused request no more.
    for (service, model, refused) in cache.dialects()? {
        out += &crate::clients::llm::learnt_line(&service, &model, &refused);
        out.push('\n');
    }
    if shared {
        out += &format!(
            "(answers every worker published to {location}/{}; hits and misses are counted in each worker's own --work-dir cache)\n",
            crate::store::cache::PARTS
        );
    }
    Ok(out)
}

/// What a line's answers cost, and what the batch rate saved on them.
fn cost(prices: &BTreeMap<String, crate::config::Prices>, s: &CacheStats) -> (f64, f64) {
    s.usd(&prices.get(&s.service).copied().unwrap_or_default())
}

fn row(first: &str, s: &CacheStats, usd: f64) -> String {
    format!(
        "{first}{:<28} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>10.4}",
        s.method,
        s.entries,
        s.batch_entries,
        s.hits,
        s.misses,
        s.input_tokens,
        s.output_tokens,
        usd
    )
}
