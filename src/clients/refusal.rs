//! A server refusing a request for its shape, read from the body whatever the status: a field it
//! does not take, or a value it does not allow. Such a request is never retried (the same bytes
//! get the same answer); a refusal of the structured-output field moves the service's dialect
//! down (`clients::llm::dialect`).
//!
//! The bodies this reads are the real ones in tests/fixtures/llm/refusals (sources in its
//! README): FastAPI/pydantic validation errors (llama-cpp-python answers them with a 500),
//! OpenAI's `invalid_request_error` with its `param`, LM Studio's `{"error": "... must be ..."}`,
//! other gateways' `InvalidParameter` and `wrong_api_format`.

use serde_json::Value;

/// What a server said it will not take.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The field, dotted (`response_format.type`), when the body names one.
    pub field: Option<String>,
    /// The values the server says it takes there, when it lists them (`text`, `json_object`).
    pub allowed: Vec<String>,
    /// The server's words.
    pub why: String,
}

impl Refusal {
    /// Whether it refuses how structured output was asked for.
    pub fn of_structured_output(&self) -> bool {
        self.field
            .as_deref()
            .is_some_and(|f| f.starts_with("response_format") || f == "guided_json")
            || self.why.contains("response_format")
    }
}

/// Words of a refusal for the request's shape (not for its content or the server's state).
const SHAPE_WORDS: &[&str] = &[
    "validation error",
    "must be",
    "Input should be",
    "not supported",
    "unsupported",
    "Unsupported parameter",
    "unknown field",
    "Unrecognized request argument",
    "Extra inputs are not permitted",
    "invalid value",
    "Invalid parameter",
    // serde's refusal of a body (axum, actix: DeepSeek's 422, text-generation-inference's).
    "Failed to deserialize",
    "unknown variant",
    "missing field",
];

/// An error body as `read` takes it: its JSON, or its text when it is not JSON (a web
/// framework's 422 is often plain text).
pub fn body(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(bytes);
        Value::String(text.trim().chars().take(500).collect())
    })
}

/// The refusal in an error body, if the body says the request's shape is refused. A key, a
/// quota, a rate limit or the context length are not shape: their callers read them.
pub fn read(status: u16, body: &Value) -> Option<Refusal> {
    if matches!(status, 401 | 403 | 408 | 429) || status < 400 {
        return None;
    }
    // A proxy's page in front of a server that is down is text too, and not about the request.
    if body.is_string() && status >= 500 {
        return None;
    }
    if let Some(r) = fastapi(body) {
        return Some(r);
    }
    let e = &body["error"];
    let message = e["message"]
        .as_str()
        .or(e.as_str())
        .or(body["message"].as_str())
        .or(body.as_str())
        .unwrap_or("");
    let code = e["code"]
        .as_str()
        .or(e["type"].as_str())
        .or(body["code"].as_str())
        .unwrap_or("");
    let param = e["param"].as_str().or(body["param"].as_str());
    // DeepSeek's "This response_format type is unavailable now" says no more than that.
    let worded = SHAPE_WORDS.iter().any(|w| message.contains(w))
        || (message.contains("response_format") && (400..500).contains(&status));
    let coded = matches!(
        code,
        "InvalidParameter" | "wrong_api_format" | "invalid_parameter"
    );
    if message.contains("context") || !(worded || coded) {
        return None;
    }
    let field = param
        .filter(|p| p.contains('_') || p.contains('.'))
        .filter(|p| *p != "validation_error")
        .map(str::to_string)
        .or_else(|| named_field(message));
    Some(Refusal {
        field,
        allowed: allowed_values(message),
        why: message.to_string(),
    })
}

/// FastAPI's 422 body (`{"detail": [{"loc": [...], "msg": ...}]}`), or its errors as a message
/// (`1 validation error for ...` / `... 'loc': ('body', 'response_format', 'type') ...`).
fn fastapi(body: &Value) -> Option<Refusal> {
    let first = body["detail"].as_array()?.first()?;
    let loc: Vec<String> = first["loc"]
        .as_array()?
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .filter(|x| x != "body")
        .collect();
    let msg = first["msg"].as_str().unwrap_or("");
    Some(Refusal {
        field: (!loc.is_empty()).then(|| loc.join(".")),
        allowed: allowed_values(msg),
        why: msg.to_string(),
    })
}

/// A field a message names: `response_format.type`, or pydantic's `('body', 'response_format',
/// 'type')` tuple, or the first `response_format` it mentions.
fn named_field(message: &str) -> Option<String> {
    if let Some(at) = message.find("'loc': (") {
        let tuple = &message[at + 8..];
        let tuple = &tuple[..tuple.find(')')?];
        let parts: Vec<&str> = tuple
            .split(',')
            .map(|p| p.trim().trim_matches('\''))
            .filter(|p| !p.is_empty() && *p != "body")
            .collect();
        return (!parts.is_empty()).then(|| parts.join("."));
    }
    let at = message.find("response_format")?;
    let word: String = message[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    Some(word.trim_end_matches('.').to_string())
}

/// The values a message says are allowed: the quoted words after "should be", "must be" or
/// "supported values are".
fn allowed_values(message: &str) -> Vec<String> {
    let Some(at) = ["should be", "must be", "supported values are"]
        .iter()
        .filter_map(|w| message.find(w).map(|i| i + w.len()))
        .min()
    else {
        return vec![];
    };
    let rest = &message[at..];
    // Up to the end of the sentence, so a later quoted word (the refused input) is not taken.
    let end = rest.find(['.', '"', ',', '}']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let mut out = vec![];
    for q in ['\'', '`'] {
        out.extend(rest.split(q).skip(1).step_by(2).map(str::to_string));
    }
    out.retain(|v| !v.is_empty() && !v.contains(' '));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let p = format!(
            "{}/tests/fixtures/llm/refusals/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    #[test]
    fn the_recorded_refusals_name_their_field_and_allowed_values() {
        let r = read(500, &fixture("llama_cpp_python_500_validation.json")).unwrap();
        assert_eq!(r.field.as_deref(), Some("response_format.type"));
        assert_eq!(r.allowed, ["text", "json_object"]);
        let r = read(400, &fixture("lmstudio_400_json_object.json")).unwrap();
        assert!(r.of_structured_output(), "{r:?}");
        assert_eq!(r.allowed, ["json_schema", "text"]);
        let r = read(400, &fixture("openai_400_json_schema_model.json")).unwrap();
        assert_eq!(r.field.as_deref(), Some("response_format"));
        assert!(r.allowed.is_empty());
        let r = read(400, &fixture("gateway_400_invalid_parameter.json")).unwrap();
        assert_eq!(r.field.as_deref(), Some("response_format.type"));
        assert_eq!(r.allowed, ["json_object", "text"]);
        let r = read(400, &fixture("cerebras_400_wrong_api_format.json")).unwrap();
        assert_eq!(r.allowed, ["text"]);
        let r = read(
            400,
            &fixture("deepseek_400_response_format_unavailable.json"),
        )
        .unwrap();
        assert!(r.of_structured_output(), "{r:?}");
        let text = std::fs::read(format!(
            "{}/tests/fixtures/llm/refusals/deepseek_422_json_schema_unavailable.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let r = read(422, &body(&text)).unwrap();
        assert!(r.of_structured_output(), "{r:?}");
        assert!(r.why.contains("`json_schema` is unavailable"), "{r:?}");
        // A proxy's text page in front of a server that is down is not a refusal.
        assert_eq!(
            read(502, &body(b"<html>502 Bad Gateway: not supported</html>")),
            None
        );
    }

    #[test]
    fn what_is_not_shape_is_not_a_refusal() {
        let dir = format!("{}/tests/fixtures/llm", env!("CARGO_MANIFEST_DIR"));
        let read_at = |status: u16, name: &str| {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{name}")).unwrap())
                    .unwrap();
            read(status, &v)
        };
        assert_eq!(read_at(500, "openai/error_500_server_error.json"), None);
        assert_eq!(read_at(429, "openai/error_429_rate_limit.json"), None);
        assert_eq!(read_at(503, "llamacpp/error_503_loading.json"), None);
        assert_eq!(
            read_at(400, "llamacpp/error_400_exceed_context_size.json"),
            None
        );
        assert_eq!(read_at(400, "gemini/error_400_api_key_invalid.json"), None);
    }

    #[test]
    fn pydantic_errors_inside_a_message_name_the_field() {
        let body = serde_json::json!({"error": {"message": "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}", "type": "internal_server_error"}});
        let r = read(500, &body).unwrap();
        assert_eq!(r.field.as_deref(), Some("response_format.type"));
        assert_eq!(r.allowed, ["text", "json_object"]);
    }
}
