//! What the run paid its model services, for the card: calls, tokens and US dollars per service
//! and model (with the stages that call it), from the response cache's own totals
//! (`ResponseCache::stats`, as `vidcurate cache stats` reads them) at the prices of the
//! pipeline's `[services.*]` tables, and per kept video and item.
//!
//! The cache keys its answers by service and model, not by stage: stages that call the same
//! model on the same service share one line, which names them all.

use crate::store::cache::ResponseCache;
use crate::store::manifest::Manifest;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One service and method (`openai:gpt-4o`, `search.list`) of the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CostLine {
    pub service: String,
    pub method: String,
    /// The run's stages whose settings name this service and model.
    pub stages: Vec<String>,
    /// Answers paid for (each cached answer was one call; hits cost nothing).
    pub calls: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub usd: f64,
    /// Whether the pipeline gives this service a price.
    pub priced: bool,
}

/// The run's cost, or why there is none to read.
#[derive(Debug, Clone, PartialEq)]
pub enum RunCost {
    Lines(Vec<CostLine>),
    /// No cache file: no model or API stage ran.
    NoCache,
    /// A run on an object store: its workers' caches are parts `cache stats` gathers.
    Remote,
}

/// The cost of the run at `run_dir` (a local folder; an object-store run says `Remote`).
pub fn run_cost(run_dir: &Path, m: &Manifest) -> Result<RunCost, crate::error::RunError> {
    if crate::store::objects::is_url(&run_dir.to_string_lossy()) {
        return Ok(RunCost::Remote);
    }
    let Some(cache) = ResponseCache::open_existing(&ResponseCache::path_in(run_dir))? else {
        return Ok(RunCost::NoCache);
    };
    let services = toml::from_str::<toml::Table>(&m.pipeline_toml)
        .map(|t| crate::store::run::services_of(&t))
        .unwrap_or_default();
    let users = stages_by_model(m);
    let mut lines = vec![];
    for s in cache.stats()? {
        if s.entries == 0 {
            continue;
        }
        let price = services.get(&s.service).map(|c| c.prices());
        let p = price.unwrap_or_default();
        let usd = p.cost(
            s.input_tokens - s.batch_input_tokens,
            s.output_tokens - s.batch_output_tokens,
            false,
        ) + p.cost(s.batch_input_tokens, s.batch_output_tokens, true);
        // `openai:gpt-4o` → the model `gpt-4o`; the cache lowercases the method.
        let model = s.method.split_once(':').map_or("", |(_, m)| m);
        let stages = users
            .get(&(s.service.clone(), model.to_string()))
            .or_else(|| users.get(&(s.service.clone(), String::new())))
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default();
        lines.push(CostLine {
            service: s.service,
            method: s.method,
            stages,
            calls: s.entries,
            tokens_in: s.input_tokens,
            tokens_out: s.output_tokens,
            usd,
            priced: price.is_some_and(|p| p.input > 0.0 || p.output > 0.0),
        });
    }
    Ok(RunCost::Lines(lines))
}

/// (service, lowercased model) → the stages whose compute settings name them, at any depth
/// (`{ service, model }`, or a drafter, refiner or judge table). A service named without a
/// model (YouTube) is keyed with an empty model.
fn stages_by_model(m: &Manifest) -> BTreeMap<(String, String), BTreeSet<String>> {
    fn walk(
        v: &serde_json::Value,
        stage: &str,
        out: &mut BTreeMap<(String, String), BTreeSet<String>>,
    ) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(service) = o.get("service").and_then(|s| s.as_str()) {
                    let model = o.get("model").and_then(|s| s.as_str()).unwrap_or("");
                    out.entry((service.to_string(), model.to_lowercase()))
                        .or_default()
                        .insert(stage.to_string());
                }
                o.values().for_each(|x| walk(x, stage, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, stage, out)),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for st in &m.stages {
        walk(&st.compute, &st.id, &mut out);
    }
    if let Some(service) = m.source["settings"]["service"].as_str() {
        out.entry((service.to_string(), String::new()))
            .or_default()
            .insert(crate::runtime::chain::SOURCE_STAGE_ID.to_string());
    }
    out
}

/// The card's section: one line per service and model, the total, and the cost per kept video
/// and per kept item (questions and task items), when there are any.
pub fn section(cost: &RunCost, videos: usize, items: usize) -> String {
    let lines = match cost {
        RunCost::NoCache => {
            return "\n## Cost\n\nNo model or API call: the run has no response cache.\n".into();
        }
        RunCost::Remote => {
            return "\n## Cost\n\nThe run is on an object store, where each worker keeps its own cache: `vidcurate cache stats RUN` gathers them and prices the calls.\n".into();
        }
        RunCost::Lines(l) => l,
    };
    let mut c = String::from(
        "\n## Cost\n\nWhat the run's calls cost, from its response cache (each answer paid for once; a rerun's cache hits are free) at the prices of the pipeline's `[services.*]` (`usd_per_mtok_input`, `usd_per_mtok_output`; batch answers at the batch price). The cache keeps answers per service and model, so stages calling the same model share a line.\n\n| service | model | stages | calls | tokens in | tokens out | USD |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    let (mut calls, mut tin, mut tout, mut usd) = (0, 0, 0, 0.0);
    for l in lines {
        let price = if l.priced {
            format!("{:.4}", l.usd)
        } else {
            "no price set".into()
        };
        c += &format!(
            "| {} | {} | {} | {} | {} | {} | {price} |\n",
            l.service,
            l.method,
            l.stages.join(", "),
            l.calls,
            l.tokens_in,
            l.tokens_out
        );
        (calls, tin, tout, usd) = (
            calls + l.calls,
            tin + l.tokens_in,
            tout + l.tokens_out,
            usd + l.usd,
        );
    }
    c += &format!("| all | | | {calls} | {tin} | {tout} | {usd:.4} |\n\n");
    let per = |n: usize, what: &str| {
        format!(
            "Per kept {what} ({n}): {:.1} calls, {:.0} tokens, ${}.\n",
            calls as f64 / n as f64,
            (tin + tout) as f64 / n as f64,
            if usd > 0.0 {
                format!("{:.6}", usd / n as f64)
            } else {
                "0".into()
            }
        )
    };
    if videos > 0 {
        c += &per(videos, "video");
    }
    if items > 0 {
        c += &per(items, "item");
    }
    if lines.iter().any(|l| !l.priced) {
        c += "\nA service without a price counts as free here: set its `usd_per_mtok_*` to price it.\n";
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(service: &str, calls: i64, usd: f64, priced: bool) -> CostLine {
        CostLine {
            service: service.into(),
            method: "openai:gpt-4o".into(),
            stages: vec!["caption".into(), "questions".into()],
            calls,
            tokens_in: calls * 1000,
            tokens_out: calls * 100,
            usd,
            priced,
        }
    }

    #[test]
    fn per_kept_video_and_item() {
        let c = section(
            &RunCost::Lines(vec![
                line("vlm", 30, 0.3, true),
                line("asr", 10, 0.0, false),
            ]),
            10,
            20,
        );
        assert!(
            c.contains("| vlm | openai:gpt-4o | caption, questions | 30 | 30000 | 3000 | 0.3000 |"),
            "{c}"
        );
        assert!(
            c.contains(
                "| asr | openai:gpt-4o | caption, questions | 10 | 10000 | 1000 | no price set |"
            ),
            "{c}"
        );
        assert!(
            c.contains("| all | | | 40 | 40000 | 4000 | 0.3000 |"),
            "{c}"
        );
        assert!(
            c.contains("Per kept video (10): 4.0 calls, 4400 tokens, $0.030000."),
            "{c}"
        );
        assert!(
            c.contains("Per kept item (20): 2.0 calls, 2200 tokens, $0.015000."),
            "{c}"
        );
        assert!(c.contains("counts as free"), "{c}");
        assert!(section(&RunCost::NoCache, 3, 0).contains("no response cache"));
    }
}
