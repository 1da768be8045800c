//! Structured output for the model stages: the JSON Schema a stage's answers must follow.
//!
//! Reads: a schema file (JSON) named by a stage's `schema` key, relative to the pipeline file, or
//! a schema a stage builds in code. Calls nothing; writes nothing; caches nothing. The client
//! sends the schema (`clients::llm::ResponseSchema`: OpenAI's and vLLM's `json_schema` response
//! format, Gemini's `responseJsonSchema`); `OutputSchema::check` then validates every answer,
//! cached or fresh, with the `jsonschema` crate before the stage reads a field of it. A provider
//! that ignores or loosens the schema (a server without constrained decoding, Gemini's subset)
//! therefore still yields only valid rows, and a failing answer goes back once with what broke
//! through `model_inputs::ask_validated`'s repair.

use crate::clients::llm::ResponseSchema;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A schema file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: not JSON: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: not a usable JSON Schema: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{}: the top level must be an object schema (\"type\": \"object\" with \"properties\"): the providers' structured output takes nothing else",
        path.display()
    )]
    NotObject { path: PathBuf },
}

/// What is wrong with an answer; the message goes back to the model in the repair request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaProblem {
    #[error("the answer is not a JSON object ({0})")]
    NotJson(String),
    #[error("the answer does not follow the schema: {0}")]
    Breaks(String),
}

/// A compiled schema and what the client sends of it.
pub struct OutputSchema {
    pub request: Arc<ResponseSchema>,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("name", &self.request.name)
            .finish()
    }
}

/// At most this many schema violations are named in one message (the first ones, in document
/// order): enough for a repair, short enough for a rejects table.
const MAX_NAMED: usize = 5;

impl OutputSchema {
    /// Compiles `schema`; `path` names it in errors (the file, or the stage that built it).
    pub fn new(name: &str, schema: Value, path: &Path) -> Result<Self, SchemaError> {
        let object = schema.get("type").and_then(Value::as_str) == Some("object")
            && schema.get("properties").is_some_and(Value::is_object);
        if !object {
            return Err(SchemaError::NotObject { path: path.into() });
        }
        let validator = jsonschema::validator_for(&schema).map_err(|e| SchemaError::Invalid {
            path: path.into(),
            message: e.to_string(),
        })?;
        Ok(Self {
            request: Arc::new(ResponseSchema::new(&schema_name(name), schema)),
            validator,
        })
    }

    /// Reads and compiles a schema file; its name (what OpenAI calls `json_schema.name`) is
    /// the file's stem.
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Io {
            path: path.into(),
            source,
        })?;
        let schema: Value = serde_json::from_str(&text).map_err(|e| SchemaError::Json {
            path: path.into(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        Self::new(&stem, schema, path)
    }

    /// The answer's JSON object when it follows the schema. A model without constrained
    /// decoding may wrap the object in a code fence or a sentence: the outermost `{…}` is read.
    pub fn check(&self, text: &str) -> Result<Value, SchemaProblem> {
        let value: Value = match serde_json::from_str(text.trim()) {
            Ok(v) => v,
            Err(first) => super::model_inputs::span(text, '{', '}')
                .and_then(|s| serde_json::from_str(s).ok())
                .ok_or_else(|| SchemaProblem::NotJson(first.to_string()))?,
        };
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .map(|e| {
                let at = e.instance_path().as_str().to_string();
                let at = if at.is_empty() { "(top level)" } else { &at };
                format!("at {at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            return Ok(value);
        }
        let mut named = errors[..errors.len().min(MAX_NAMED)].join("; ");
        if errors.len() > MAX_NAMED {
            named += &format!("; and {} more", errors.len() - MAX_NAMED);
        }
        Err(SchemaProblem::Breaks(named))
    }
}

/// `[a-zA-Z0-9_-]{1,64}`, as OpenAI requires of `json_schema.name`.
fn schema_name(stem: &str) -> String {
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "answer".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> OutputSchema {
        let s = json!({
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "steps": {"type": "array", "items": {"type": "string"}},
                "score": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["answer", "steps"],
            "additionalProperties": false,
        });
        OutputSchema::new("test schema!", s, Path::new("t.json")).unwrap()
    }

    #[test]
    fn a_valid_answer_is_read_and_fences_are_tolerated() {
        let s = schema();
        assert_eq!(s.request.name, "test_schema_");
        let v = s.check(r#"{"answer":"same","steps":["a","b"]}"#).unwrap();
        assert_eq!(v["steps"][1], "b");
        let fenced = "```json\n{\"answer\": \"x\", \"steps\": [], \"score\": 3}\n```";
        assert_eq!(s.check(fenced).unwrap()["score"], 3);
    }

    #[test]
    fn each_violation_is_named_with_its_place() {
        let s = schema();
        let e = s
            .check(r#"{"answer": 4, "steps": ["a", 2], "score": 11, "extra": true}"#)
            .unwrap_err()
            .to_string();
        for part in ["at /answer", "at /steps/1", "at /score", "extra"] {
            assert!(e.contains(part), "{part} missing in {e}");
        }
        let missing = s.check(r#"{"answer": "x"}"#).unwrap_err().to_string();
        assert!(
            missing.contains("(top level)") && missing.contains("steps"),
            "{missing}"
        );
        assert!(matches!(
            s.check("I cannot answer that."),
            Err(SchemaProblem::NotJson(_))
        ));
    }

    #[test]
    fn schema_files_that_cannot_be_used_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\n  \"type\": \"object\",\n  \"properties\": {,\n}").unwrap();
        let e = OutputSchema::load(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.json:3:"), "{e}");
        let arr = dir.path().join("arr.json");
        std::fs::write(&arr, r#"{"type": "array", "items": {"type": "string"}}"#).unwrap();
        assert!(matches!(
            OutputSchema::load(&arr),
            Err(SchemaError::NotObject { .. })
        ));
        let invalid = dir.path().join("invalid.json");
        std::fs::write(
            &invalid,
            r#"{"type": "object", "properties": {"a": {"type": "strnig"}}}"#,
        )
        .unwrap();
        let e = OutputSchema::load(&invalid).unwrap_err().to_string();
        assert!(e.contains("invalid.json: not a usable JSON Schema"), "{e}");
        assert!(OutputSchema::load(&dir.path().join("none.json")).is_err());
    }

    /// The recorded answers of real structured-output calls (tests/fixtures/llm) follow the
    /// schemas they were asked under.
    #[test]
    fn recorded_structured_answers_follow_their_schemas() {
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm");
        let read = |p: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(fx.join(p)).unwrap()).unwrap()
        };
        let req = read("openai/chat_completion_json_schema_request.json");
        let js = &req["response_format"]["json_schema"];
        let s = OutputSchema::new(
            js["name"].as_str().unwrap(),
            js["schema"].clone(),
            Path::new("openai"),
        )
        .unwrap();
        let answer = read("openai/chat_completion_json_schema.json");
        let text = answer["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(s.check(text).unwrap()["steps"].is_array());

        let req = read("gemini/generate_content_json_schema_request.json");
        let schema = req["generationConfig"]["responseJsonSchema"].clone();
        let s = OutputSchema::new("gemini", schema, Path::new("gemini")).unwrap();
        for f in [
            "gemini/generate_content_json_schema.json",
            "gemini/generate_content_json_schema_multiline.json",
        ] {
            let answer = read(f);
            let text = answer["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap();
            s.check(text).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }
}
