//! `vidcurate cache stats`: what a run's response cache holds per service and method (then per
//! stage that paid), and what those answers cost at the run's prices. Reads the cache (and, for an object-store run, the
//! parts every worker published); calls nothing; writes nothing in the run.

use crate::error::{Exit, RunError};
use crate::store::cache::{CacheHandle, CacheStats, ResponseCache};
use crate::store::manifest::Manifest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The run's response cache.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Entries, hits, misses, tokens and estimated cost per service and model, then per stage.
    ///
    /// Cost uses `usd_per_mtok_input` / `usd_per_mtok_output` of the run's `[services.*]`. The
    /// second table splits each line by the stage that paid for the answers (and made the
    /// lookups); `-` is what a cache written before stages were recorded holds.
    Stats { run_dir: PathBuf },
}

pub fn run(cmd: Cmd) -> Result<Exit, RunError> {
    match cmd {
        Cmd::Stats { run_dir } => stats(&run_dir),
    }
}

/// Prices from the run's pipeline (its [services.*] tables), when it names them.
fn prices(manifest: Option<&Manifest>) -> BTreeMap<String, crate::config::Prices> {
    let pipeline = manifest.and_then(|m| toml::from_str::<toml::Table>(&m.pipeline_toml).ok());
    let services = pipeline
        .as_ref()
        .map(crate::store::run::services_of)
        .unwrap_or_default();
    services.into_iter().map(|(k, v)| (k, v.prices())).collect()
}

fn stats(run_dir: &Path) -> Result<Exit, RunError> {
    let location = run_dir.to_string_lossy().to_string();
    // A run on an object store: the answers every worker published, gathered in a temp cache.
    let gathered = tempfile::tempdir().map_err(|e| RunError::at("a temporary folder", e))?;
    let (path, manifest, shared) = if crate::store::objects::is_url(&location) {
        let store = crate::store::open_run(&location, crate::store::Access::Read)
            .map_err(|e| RunError::io(location.clone(), e))?;
        let rt = super::tokio_runtime()?;
        let handle = CacheHandle::shared(gathered.path(), store.clone(), 0);
        rt.block_on(handle.import_parts())?;
        let m = rt.block_on(crate::store::manifest::load_at(
            store.as_ref(),
            crate::store::manifest::MANIFEST,
        ));
        (ResponseCache::path_in(gathered.path()), m, true)
    } else {
        let m = crate::store::manifest::read_local(run_dir);
        (ResponseCache::path_in(run_dir), m, false)
    };
    let Some(cache) = ResponseCache::open_existing(&path)? else {
        println!(
            "{location}: no response cache (no API stage has run{})",
            if shared {
                ", or no worker published its answers yet"
            } else {
                ""
            }
        );
        return Ok(Exit::Done);
    };
    let prices = prices(manifest.as_ref());
    // (what the answers cost, what the batch rate saved on them)
    let cost = |s: &CacheStats| {
        let p = prices.get(&s.service).copied().unwrap_or_default();
        let (live_in, live_out) = (
            s.input_tokens - s.batch_input_tokens,
            s.output_tokens - s.batch_output_tokens,
        );
        let (bin, bout) = (s.batch_input_tokens, s.batch_output_tokens);
        (
            p.cost(live_in, live_out, false) + p.cost(bin, bout, true),
            p.cost(bin, bout, false) - p.cost(bin, bout, true),
        )
    };
    let row = |first: &str, s: &CacheStats, usd: f64| {
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
    };
    let header = format!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>10}",
        "method", "entries", "batch", "hits", "misses", "tokens_in", "tokens_out", "est_usd"
    );
    println!("{:<12} {header}", "service");
    let per_stage = cache.stats()?;
    let (mut total, mut saved) = (0.0, 0.0);
    for s in crate::store::cache::by_service(&per_stage) {
        let (usd, less) = cost(&s);
        (total, saved) = (total + usd, saved + less);
        println!("{}", row(&format!("{:<12} ", s.service), &s, usd));
    }
    if per_stage.iter().any(|s| s.stage.is_some()) {
        println!("\n{:<16} {:<12} {header}", "stage", "service");
        for s in &per_stage {
            let stage = s.stage.as_deref().unwrap_or("-");
            let first = format!("{stage:<16} {:<12} ", s.service);
            println!("{}", row(&first, s, cost(s).0));
        }
    }
    if saved > 0.0 {
        println!(
            "batch answers are priced at the batch rate (usd_per_mtok_*_batch, default half): ${saved:.4} less than live"
        );
    }
    println!("estimated cost of the cached answers: ${total:.4} (hits cost nothing)");
    if shared {
        println!(
            "(answers every worker published to {location}/{}; hits and misses are counted in each worker's own --work-dir cache)",
            crate::store::cache::PARTS
        );
    }
    Ok(Exit::Done)
}
