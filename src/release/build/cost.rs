//! What the run paid its model services, for the card: calls, tokens and US dollars per stage,
//! service and model, from the response cache's own totals (`ResponseCache::stats`, as
//! `vidcurate cache stats` reads them) at the prices of the pipeline's `[services.*]` tables,
//! and per kept video and item.
//!
//! The cache records the stage that paid for each answer. A cache written before it did has
//! answers of no stage: their line names every stage whose settings call that service and model
//! (guessed from the manifest), as the card did before.

use crate::store::cache::ResponseCache;
use crate::store::manifest::Manifest;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What one stage paid one service and method (`openai:gpt-4o`, `search.list`).
#[derive(Debug, Clone, PartialEq)]
pub struct CostLine {
    pub service: String,
    pub method: String,
    /// The stage that paid; for answers the cache recorded no stage of, the run's stages whose
    /// settings name this service and model (`guessed`).
    pub stages: Vec<String>,
    /// The answers carry no stage (cached before stages were recorded): `stages` is a guess.
    pub guessed: bool,
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
    let prices = crate::store::run::prices_of(m);
    let users = stages_by_model(m);
    let mut lines = vec![];
    for s in cache.stats()? {
        if s.entries == 0 {
            continue;
        }
        let price = prices.get(&s.service).copied();
        let (usd, _) = s.usd(&price.unwrap_or_default());
        // `openai:gpt-4o` → the model `gpt-4o`; the cache lowercases the method.
        let model = s.method.split_once(':').map_or("", |(_, m)| m);
        let (stages, guessed) = match s.stage {
            Some(stage) => (vec![stage], false),
            None => (
                users
                    .get(&(s.service.clone(), model.to_string()))
                    .or_else(|| users.get(&(s.service.clone(), String::new())))
                    .map(|set| set.iter().cloned().collect())
                    .unwrap_or_default(),
                true,
            ),
        };
        lines.push(CostLine {
            service: s.service,
            method: s.method,
            stages,
            guessed,
            calls: s.entries,
            tokens_in: s.input_tokens,
            tokens_out: s.output_tokens,
            usd,
            priced: price.is_some_and(|p| p.input > 0.0 || p.output > 0.0),
        });
    }
    // In chain order (the source first); stages the chain does not know (a judge's), then
    // guessed lines, last.
    let chain: Vec<&str> = std::iter::once(crate::runtime::chain::SOURCE_STAGE_ID)
        .chain(m.stages.iter().map(|s| s.id.as_str()))
        .collect();
    let rank = |l: &CostLine| match l.stages.first() {
        Some(s) if !l.guessed => chain.iter().position(|c| c == s).unwrap_or(chain.len()),
        _ => chain.len() + 1,
    };
    lines.sort_by_cached_key(|l| {
        (
            rank(l),
            l.stages.clone(),
            l.service.clone(),
            l.method.clone(),
        )
    });
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

/// The card's section: one line per stage, service and model, the total, and the cost per kept
/// video and per kept item (questions and task items), when there are any.
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
        "\n## Cost\n\nWhat the run's calls cost, from its response cache (each answer paid for once; a rerun's cache hits are free) at the prices of the pipeline's `[services.*]` (`usd_per_mtok_input`, `usd_per_mtok_output`; batch answers at the batch price). One line per stage and the service and model it called: the cache records which stage paid for each answer.\n\n| stage | service | model | calls | tokens in | tokens out | USD |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    let (mut calls, mut tin, mut tout, mut usd) = (0, 0, 0, 0.0);
    for l in lines {
        let price = if l.priced {
            format!("{:.4}", l.usd)
        } else {
            "no price set".into()
        };
        let stage = match (l.stages.join(", "), l.guessed) {
            (s, false) => s,
            (s, true) if s.is_empty() => "?".into(),
            (s, true) => format!("{s}?"),
        };
        c += &format!(
            "| {stage} | {} | {} | {} | {} | {} | {price} |\n",
            l.service, l.method, l.calls, l.tokens_in, l.tokens_out
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
    if lines.iter().any(|l| l.guessed) {
        c += "\nA stage marked `?` is a guess: the answers on that line were cached before the cache recorded stages, and it names every stage whose settings call that service and model.\n";
    }
    if lines.iter().any(|l| !l.priced) {
        c += "\nA service without a price counts as free here: set its `usd_per_mtok_*` to price it.\n";
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(stage: &str, service: &str, calls: i64, usd: f64, priced: bool) -> CostLine {
        CostLine {
            service: service.into(),
            method: "openai:gpt-4o".into(),
            stages: vec![stage.into()],
            guessed: false,
            calls,
            tokens_in: calls * 1000,
            tokens_out: calls * 100,
            usd,
            priced,
        }
    }

    #[test]
    fn one_line_per_stage_and_per_kept_video_and_item() {
        let c = section(
            &RunCost::Lines(vec![
                line("caption", "vlm", 20, 0.2, true),
                line("questions", "vlm", 10, 0.1, true),
                line("transcript", "asr", 10, 0.0, false),
            ]),
            10,
            20,
        );
        for row in [
            "| caption | vlm | openai:gpt-4o | 20 | 20000 | 2000 | 0.2000 |",
            "| questions | vlm | openai:gpt-4o | 10 | 10000 | 1000 | 0.1000 |",
            "| transcript | asr | openai:gpt-4o | 10 | 10000 | 1000 | no price set |",
            "| all | | | 40 | 40000 | 4000 | 0.3000 |",
            "Per kept video (10): 4.0 calls, 4400 tokens, $0.030000.",
            "Per kept item (20): 2.0 calls, 2200 tokens, $0.015000.",
        ] {
            assert!(c.contains(row), "{row}: {c}");
        }
        assert!(c.contains("counts as free"), "{c}");
        assert!(!c.contains("is a guess"), "{c}");
        assert!(section(&RunCost::NoCache, 3, 0).contains("no response cache"));
    }

    #[test]
    fn answers_cached_before_stages_were_recorded_name_the_stages_that_may_have_paid() {
        let old = CostLine {
            stages: vec!["caption".into(), "questions".into()],
            guessed: true,
            ..line("", "vlm", 5, 0.05, true)
        };
        let c = section(&RunCost::Lines(vec![old]), 5, 0);
        assert!(
            c.contains("| caption, questions? | vlm | openai:gpt-4o | 5 | 5000 | 500 | 0.0500 |"),
            "{c}"
        );
        assert!(c.contains("is a guess"), "{c}");
    }
}
