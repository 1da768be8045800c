//! How an OpenAI-compatible server takes structured output, learnt once per (service, model).
//!
//! The rungs, from the most constrained down: `json_schema` strict → `json_schema` →
//! `json_object` with the schema beside it (llama-cpp-python's spelling) → `json_object` with the
//! schema in the prompt → no `response_format`, the schema in the prompt. What a server refuses
//! ("json_schema", "strict", "json_object", "json_object_schema") is read from its refusal
//! (`clients::refusal`): a list of allowed values skips every rung it excludes, so
//! llama-cpp-python's one 500 ("Input should be 'text' or 'json_object'") lands on
//! `json_object` with the schema at once. Every answer is still validated by the stage.
//! A service's `structured` key pins a rung: nothing is learnt then.

use super::{Answered, Api, ChatAnswer, ChatRequest, LlmService};
use crate::clients::refusal::Refusal;
use crate::config::Structured;
use crate::error::StageError;
use crate::store::cache::{CacheKey, ResponseCache};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One way of asking for structured output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    JsonSchemaStrict,
    JsonSchema,
    JsonObjectSchema,
    JsonObject,
    Prompt,
}

const LADDER: [Rung; 5] = [
    Rung::JsonSchemaStrict,
    Rung::JsonSchema,
    Rung::JsonObjectSchema,
    Rung::JsonObject,
    Rung::Prompt,
];

impl Rung {
    /// What the summary and `cache stats` call it.
    pub fn label(self) -> &'static str {
        match self {
            Rung::JsonSchemaStrict => "json_schema (strict)",
            Rung::JsonSchema => "json_schema",
            Rung::JsonObjectSchema => "json_object with the schema",
            Rung::JsonObject => "json_object, the schema in the prompt",
            Rung::Prompt => "the schema in the prompt only",
        }
    }

    /// What this rung needs the server to take.
    fn needs(self) -> &'static [&'static str] {
        match self {
            Rung::JsonSchemaStrict => &["json_schema", "strict"],
            Rung::JsonSchema => &["json_schema"],
            Rung::JsonObjectSchema => &["json_object", "json_object_schema"],
            Rung::JsonObject => &["json_object"],
            Rung::Prompt => &[],
        }
    }

    fn pinned(s: Structured) -> Rung {
        match s {
            Structured::JsonSchema => Rung::JsonSchemaStrict,
            Structured::JsonObject => Rung::JsonObjectSchema,
            Structured::Prompt => Rung::Prompt,
        }
    }
}

/// A request for JSON without a schema: `json_object`, else `json_schema` of any object (what
/// LM Studio takes instead), else nothing.
const ANY_OBJECT: [Rung; 3] = [Rung::JsonObject, Rung::JsonSchema, Rung::Prompt];

/// The rung a request takes: the pinned one, or the first whose needs nothing refuses.
pub fn rung_for(refused: &BTreeSet<String>, pin: Option<Structured>, schema: bool) -> Rung {
    if let Some(p) = pin {
        return Rung::pinned(p);
    }
    let ladder: &[Rung] = if schema { &LADDER } else { &ANY_OBJECT };
    ladder
        .iter()
        .copied()
        .find(|r| r.needs().iter().all(|n| !refused.contains(*n)))
        .unwrap_or(Rung::Prompt)
}

/// How a (service, model) that refuses `refused` is asked for a schema (for `cache stats`).
pub fn learnt_label(refused: &[String]) -> &'static str {
    rung_for(&refused.iter().cloned().collect(), None, true).label()
}

/// The line `cache stats` and the run's summary print for a learnt dialect.
pub fn learnt_line(service: &str, model: &str, refused: &[String]) -> String {
    format!(
        "structured output: service {service}, model {model}: {} (the server refused {})",
        learnt_label(refused),
        refused.join(", ")
    )
}

/// What `refusal` of a request sent at `rung` teaches: the names to add to what the server
/// refuses. Empty when it teaches nothing (the request was not refused for its
/// `response_format`, or the rung has nothing left to refuse).
pub fn learn(rung: Rung, refusal: &Refusal) -> Vec<String> {
    if !refusal.of_structured_output() || rung == Rung::Prompt {
        return vec![];
    }
    let field = refusal.field.as_deref().unwrap_or("");
    if field.contains("strict") {
        return vec!["strict".into()];
    }
    if rung == Rung::JsonObjectSchema && field.ends_with("schema") {
        return vec!["json_object_schema".into()];
    }
    if !refusal.allowed.is_empty() {
        let out: Vec<String> = ["json_schema", "json_object"]
            .iter()
            .filter(|t| !refusal.allowed.iter().any(|a| a == *t))
            .map(|t| t.to_string())
            .collect();
        if !out.is_empty() {
            return out;
        }
    }
    // Nothing more precise: what this rung sent is refused.
    vec![rung.needs()[0].to_string()]
}

/// The request body and prompt at `rung`: `response_format` as the rung spells it, and the
/// schema appended to the prompt where the server does not take it.
pub fn apply(body: &mut Value, rung: Rung, name: &str, schema: Option<&Value>) {
    let object = json!({"type": "object"});
    let schema_or_object = schema.unwrap_or(&object);
    match rung {
        Rung::JsonSchemaStrict | Rung::JsonSchema => {
            let mut js = json!({"name": name, "schema": schema_or_object});
            if rung == Rung::JsonSchemaStrict {
                js["strict"] = json!(true);
            }
            body["response_format"] = json!({"type": "json_schema", "json_schema": js});
        }
        Rung::JsonObjectSchema if schema.is_some() => {
            body["response_format"] = json!({"type": "json_object", "schema": schema_or_object});
        }
        Rung::JsonObjectSchema | Rung::JsonObject => {
            body["response_format"] = json!({"type": "json_object"});
        }
        Rung::Prompt => {}
    }
    if let Some(s) = schema.filter(|_| matches!(rung, Rung::JsonObject | Rung::Prompt)) {
        let text = format!(
            "\n\nAnswer with one JSON object, and nothing else, that follows this JSON Schema:\n{s}"
        );
        if let Some(c) = body["messages"][0]["content"].as_str() {
            body["messages"][0]["content"] = json!(format!("{c}{text}"));
        } else if let Some(parts) = body["messages"][0]["content"].as_array_mut() {
            parts[0]["text"] = json!(format!("{}{text}", parts[0]["text"].as_str().unwrap_or("")));
        }
    }
}

/// A call's error, and the server's refusal of the request's shape when that is what it was.
pub(super) struct CallFailed(pub StageError, pub Option<Refusal>);

impl From<StageError> for CallFailed {
    fn from(e: StageError) -> Self {
        CallFailed(e, None)
    }
}

/// What a (service, model) refuses of structured output, once read from the run's cache; while
/// no structured answer has come (`confirmed` false) its requests go one at a time, so a
/// refusal costs one request, not one per request in flight.
#[derive(Default)]
pub(super) struct Learnt {
    loaded: bool,
    confirmed: bool,
    refused: std::collections::BTreeSet<String>,
}

impl LlmService {
    /// Whether structured requests to `model` may cost one request refused for their shape:
    /// an OpenAI-compatible server with no pinned `structured` whose dialect `cache` has not
    /// learnt yet (what a dry run adds to its bound).
    pub fn dialect_unknown(&self, model: &str, cache: &ResponseCache) -> bool {
        self.api == Api::OpenAi
            && self.structured.is_none()
            && cache.dialect(&self.name, model).ok().flatten().is_none()
    }

    /// `call` at the rung the server takes structured output on: a refusal of how it was asked
    /// moves the (service, model) down (learnt once, kept in the run's cache) and asks again;
    /// any other refusal is the error. At most one step per rung, so this ends.
    pub(super) async fn structured_call(
        &self,
        req: &ChatRequest,
        key: &CacheKey,
        stage: &str,
        cache: &Arc<ResponseCache>,
    ) -> Result<Answered<ChatAnswer>, StageError> {
        if self.api != Api::OpenAi || !(req.json || req.schema.is_some()) {
            return self
                .call(req, key, stage, Rung::Prompt)
                .await
                .map_err(|f| f.0);
        }
        let cell = self.learnt_for(&req.model);
        loop {
            let mut g = cell.lock().await;
            if !g.loaded {
                let (c, name, model) = (cache.clone(), self.name.clone(), req.model.clone());
                let stored = tokio::task::spawn_blocking(move || c.dialect(&name, &model))
                    .await
                    .map_err(|e| StageError::internal("response_cache", e.to_string()))??;
                g.refused.extend(stored.unwrap_or_default());
                g.loaded = true;
            }
            let rung = rung_for(&g.refused, self.structured, req.schema.is_some());
            // Confirmed: requests go side by side; else this one goes alone.
            let gate = if g.confirmed {
                drop(g);
                None
            } else {
                Some(g)
            };
            let failed = match self.call(req, key, stage, rung).await {
                Ok(a) => {
                    if let Some(mut g) = gate {
                        g.confirmed = true;
                    }
                    return Ok(a);
                }
                Err(f) => f,
            };
            let mut g = match gate {
                Some(g) => g,
                None => cell.lock().await,
            };
            let taught = match (&failed.1, self.structured) {
                (Some(r), None) => learn(rung, r),
                _ => vec![],
            };
            let before = rung_for(&g.refused, self.structured, req.schema.is_some());
            g.refused.extend(taught);
            let after = rung_for(&g.refused, self.structured, req.schema.is_some());
            if after == before && before == rung {
                return Err(failed.0);
            }
            let refused: Vec<String> = g.refused.iter().cloned().collect();
            tracing::warn!(
                service = %self.name, model = %req.model, refused = ?refused, now = after.label(),
                "The server refused how structured output was asked; asking it as it takes it from now on (learnt once, kept in the run's cache)."
            );
            let (c, name, model) = (cache.clone(), self.name.clone(), req.model.clone());
            tokio::task::spawn_blocking(move || c.set_dialect(&name, &model, &refused))
                .await
                .map_err(|e| StageError::internal("response_cache", e.to_string()))??;
        }
    }

    /// The per-model learnt dialect of this service.
    fn learnt_for(&self, model: &str) -> Arc<tokio::sync::Mutex<Learnt>> {
        let mut m = self.learnt.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(model.to_string()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(field: &str, allowed: &[&str]) -> Refusal {
        Refusal {
            field: Some(field.into()),
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            why: String::new(),
        }
    }

    #[test]
    fn each_server_lands_on_the_rung_it_takes_in_one_refusal() {
        let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
        // llama-cpp-python: json_schema refused, text and json_object allowed.
        let r = set(learn(
            Rung::JsonSchemaStrict,
            &refusal("response_format.type", &["text", "json_object"]),
        ));
        assert_eq!(rung_for(&r, None, true), Rung::JsonObjectSchema);
        // LM Studio: a JSON-only request's json_object refused: json_schema with any object.
        let r = set(learn(
            Rung::JsonObject,
            &refusal("response_format.type", &["json_schema", "text"]),
        ));
        assert_eq!(rung_for(&r, None, false), Rung::JsonSchema);
        assert_eq!(rung_for(&r, None, true), Rung::JsonSchemaStrict);
        // OpenAI, a model without Structured Outputs: no list, the sent type is refused.
        let r = set(learn(
            Rung::JsonSchemaStrict,
            &refusal("response_format", &[]),
        ));
        assert_eq!(rung_for(&r, None, true), Rung::JsonObjectSchema);
        // A server refusing `strict` only.
        let r = set(learn(
            Rung::JsonSchemaStrict,
            &refusal("response_format.json_schema.strict", &[]),
        ));
        assert_eq!(rung_for(&r, None, true), Rung::JsonSchema);
        // Another field refused: nothing learnt.
        assert!(learn(Rung::JsonSchema, &refusal("messages", &[])).is_empty());
        assert_eq!(
            rung_for(&BTreeSet::new(), Some(Structured::Prompt), true),
            Rung::Prompt
        );
    }

    #[test]
    fn the_schema_goes_into_the_prompt_where_the_server_takes_no_schema() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let mut body = json!({"messages": [{"role": "user", "content": "Say a."}]});
        apply(&mut body, Rung::JsonObjectSchema, "n", Some(&schema));
        assert_eq!(body["response_format"]["schema"], schema);
        assert_eq!(body["messages"][0]["content"], "Say a.");
        apply(&mut body, Rung::JsonObject, "n", Some(&schema));
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert!(
            body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("\"properties\"")
        );
    }
}
