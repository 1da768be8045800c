//! What an OpenAI-compatible server says of its models at `GET {base_url}models`: the input
//! modalities llama.cpp's server lists (`data[].architecture.input_modalities`), so that
//! `run --dry-run` can warn before a vision stage sends frames to a text-only model. OpenAI,
//! vLLM and Ollama list no modalities there: no answer, no warning. A free GET, one attempt,
//! never an error: a server that does not answer is the run's business, not the dry run's.

use super::{Api, LlmService};
use serde_json::Value;
use std::time::Duration;

impl LlmService {
    /// The input modalities the server lists for `model`, or None where it says nothing
    /// (another API, no answer within `timeout`, a list without modalities).
    pub async fn input_modalities(&self, model: &str, timeout: Duration) -> Option<Vec<String>> {
        if self.api != Api::OpenAi {
            return None;
        }
        let url = format!("{}models", self.ep.base_url);
        let r = self.ep.authorised(self.ep.http.get(url).timeout(timeout));
        let resp = r.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body: Value = resp.json().await.ok()?;
        modalities_of(&body, model)
    }
}

/// `model`'s entry of a models list (by id or alias; the only entry of a server that serves
/// one model whatever a request names, as llama.cpp's does) and its input modalities.
fn modalities_of(body: &Value, model: &str) -> Option<Vec<String>> {
    let data = body.get("data")?.as_array()?;
    let named = |m: &&Value| {
        m.get("id").and_then(Value::as_str) == Some(model)
            || m.get("aliases")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(model)))
    };
    let entry = match data.iter().find(named) {
        Some(e) => e,
        None if data.len() == 1 => &data[0],
        None => return None,
    };
    let list = entry
        .get("architecture")?
        .get("input_modalities")?
        .as_array()?;
    Some(
        list.iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let p = format!(
            "{}/tests/fixtures/llm/llamacpp/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    #[test]
    fn llama_cpp_lists_its_one_models_modalities_whatever_it_is_called() {
        let text = fixture("models_text_only.json");
        assert_eq!(modalities_of(&text, "tiny"), Some(vec!["text".into()]));
        assert_eq!(modalities_of(&text, "tiny.gguf"), Some(vec!["text".into()]));
        let vision = fixture("models_vision.json");
        assert_eq!(
            modalities_of(&vision, "anything"),
            Some(vec!["text".into(), "image".into(), "video".into()])
        );
        // Two models, neither named: no guess.
        let two = serde_json::json!({"data": [text["data"][0], vision["data"][0]]});
        assert_eq!(modalities_of(&two, "other"), None);
        let openai = serde_json::json!({"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "system"}]});
        assert_eq!(modalities_of(&openai, "gpt-4o"), None);
        // llama-cpp-python's server, images or not, lists none either (recorded).
        let p = format!(
            "{}/tests/fixtures/llm/refusals/llama_cpp_python_200_models.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let python: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        assert_eq!(modalities_of(&python, "tiny"), None);
    }
}
