//! Pipeline files: the raw TOML shape (what a user writes) and error reporting that names the
//! file, line and key. `plan.rs` turns this into a validated `Plan`.
//!
//! Stage settings are typed per stage `type`, so they are deserialized in a second step; serde's
//! tagged enums would buffer the table and lose the line. Instead we track the key path with
//! `serde_path_to_error` and look the path up in a span-keeping parse of the same text.

mod keys;
pub mod queries;
pub mod taxonomy;
mod unknown;
pub use keys::{KeysFn, keys_of};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A pipeline file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Name of the pipeline; names the default run directory `data/runs/<name>/`.
    pub name: String,
    /// Free text for people.
    #[serde(default)]
    pub description: String,
    /// Where videos come from: a table with `type` (e.g. `local`) and that source's settings.
    pub source: toml::Table,
    /// The ordered stages, each a table with `id`, `type` and its settings.
    #[serde(default)]
    pub stages: Vec<toml::Table>,
    /// External endpoints used by model and API stages.
    #[serde(default)]
    pub services: BTreeMap<String, ServiceConfig>,
    /// Where and how results are written.
    #[serde(default)]
    pub output: OutputConfig,
    /// Runtime limits shared by all stages.
    #[serde(default)]
    pub runtime: RuntimeConfig,
}

/// An external endpoint (YouTube, an LLM server...). Secrets never live here: `api_key_env` names
/// the environment variable that holds the key.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Root URL of the API; tests point it at 127.0.0.1.
    pub base_url: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Request budget shared by every stage using this service.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Token budget shared by every stage using this service.
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Per-request timeout.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Retries of a failed request (429, 5xx, timeouts) before the video is rejected.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// The longest wait between two attempts, whatever the server asks for (`Retry-After`,
    /// "try again in", `retryDelay`). Default 60 s.
    #[serde(default)]
    pub max_wait_secs: Option<f64>,
    /// Model services: `openai` (chat/completions, also vLLM, Ollama, llama.cpp) or `gemini`
    /// (generateContent). Inferred from base_url when absent.
    #[serde(default)]
    pub api: Option<ServiceApi>,
    /// Prices in US dollars per million input / output tokens, for `vidcurate cache stats`.
    #[serde(default)]
    pub usd_per_mtok_input: Option<f64>,
    #[serde(default)]
    pub usd_per_mtok_output: Option<f64>,
    /// Prices of answers that came through the batch interface [default: half the live ones].
    #[serde(default)]
    pub usd_per_mtok_input_batch: Option<f64>,
    #[serde(default)]
    pub usd_per_mtok_output_batch: Option<f64>,
    /// `live` (default): one request per call. `batch`: requests the cache cannot answer are
    /// collected and sent through the provider's batch interface (OpenAI `/v1/batches`, at half
    /// price, answers within `completion_window`); the run waits for them and goes on.
    /// `offline`: collected but never sent, for `vidcurate batch export` (e.g. to
    /// `vllm run-batch`) and `vidcurate batch import`.
    #[serde(default)]
    pub mode: ServiceMode,
    /// How structured output is asked of an OpenAI-compatible server, when you know better than
    /// what it is learnt to be: `json_schema` (strict), `json_object` (with the schema beside
    /// it, as llama-cpp-python takes it) or `prompt` (the schema in the prompt only). Unset, it
    /// starts at `json_schema` strict and moves down once per refusal the server answers.
    #[serde(default)]
    pub structured: Option<Structured>,
    /// Batch mode: what becomes of a request the batch answered with an error
    /// (`batch_expired`, `request_timeout`, ...): `live` (default) asks it again live, `reject`
    /// rejects the video with the error.
    #[serde(default)]
    pub batch_errors: BatchFallback,
    /// Batch mode: where a repair request (an answer that failed validation) goes: `batch`
    /// (default, the next batch) or `live`.
    #[serde(default)]
    pub batch_repairs: RepairRoute,
    /// Batch mode: seconds between two status checks of a submitted batch [default 30].
    #[serde(default)]
    pub batch_poll_secs: Option<f64>,
    /// Batch mode: the most requests in one batch [default 50000, OpenAI's limit].
    #[serde(default)]
    pub batch_max_requests: Option<usize>,
    /// Batch mode: the largest input file in MiB [default 190; OpenAI allows 200 MB].
    #[serde(default)]
    pub batch_max_mib: Option<f64>,
    /// Batch mode, Gemini: a batch up to this many MiB goes inline, a larger one as an uploaded
    /// JSONL file [default 19; Gemini takes 20 MB inline].
    #[serde(default)]
    pub batch_inline_mib: Option<f64>,
    /// Batch mode: the completion window asked for [default "24h"].
    #[serde(default)]
    pub completion_window: Option<String>,
}

/// A service's prices in US dollars per million tokens, live and batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub input_batch: f64,
    pub output_batch: f64,
}

impl Prices {
    pub fn cost(&self, input_tokens: i64, output_tokens: i64, batch: bool) -> f64 {
        let (i, o) = if batch {
            (self.input_batch, self.output_batch)
        } else {
            (self.input, self.output)
        };
        (input_tokens as f64 * i + output_tokens as f64 * o) / 1e6
    }
}

impl ServiceConfig {
    /// Batch prices default to half the live ones (OpenAI's and Gemini's batch discount).
    pub fn prices(&self) -> Prices {
        let (input, output) = (
            self.usd_per_mtok_input.unwrap_or(0.0),
            self.usd_per_mtok_output.unwrap_or(0.0),
        );
        Prices {
            input,
            output,
            input_batch: self.usd_per_mtok_input_batch.unwrap_or(input / 2.0),
            output_batch: self.usd_per_mtok_output_batch.unwrap_or(output / 2.0),
        }
    }
}

/// A pinned way of asking for structured output (see `ServiceConfig::structured`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Structured {
    JsonSchema,
    JsonObject,
    Prompt,
}

/// How a model service is called (see `ServiceConfig::mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceMode {
    #[default]
    Live,
    Batch,
    Offline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchFallback {
    #[default]
    Live,
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairRoute {
    #[default]
    Batch,
    Live,
}

/// The protocol a model service speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum ServiceApi {
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "gemini")]
    Gemini,
}

/// Output settings.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Run directory; relative paths are relative to the current directory. The CLI's `--out`
    /// overrides it. Default: `data/runs/<name>`.
    pub dir: Option<PathBuf>,
    /// A shard is written when this many rows are buffered.
    pub max_rows_per_shard: usize,
    /// ... or when this many seconds passed since the last shard, so a crash loses little work.
    pub flush_secs: u64,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            dir: None,
            max_rows_per_shard: 20_000,
            flush_secs: 30,
        }
    }
}

/// Runtime settings.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Capacity of each bounded channel between two stages (backpressure beyond it).
    pub channel_capacity: usize,
    /// Threads for CPU-heavy work (decoding, OCR). Default: the number of cores.
    pub cpu_threads: Option<usize>,
    /// The stall detector logs what every stage is waiting on when no stage has finished a video
    /// for this many seconds (or for four times the slowest stage's recent per-video time, if
    /// that is longer) while work is pending. 0 turns it off.
    pub stall_secs: u64,
    /// Decoded frames held for a later stage that reads pixels (OCR), in MiB: the frames stage
    /// waits for room before it decodes the next video. 0: none held, and that stage decodes
    /// every video's frames again (same pixels, more CPU).
    pub decoded_frames_mib: usize,
}

impl RuntimeConfig {
    /// `cpu_threads`, else the number of cores.
    pub fn threads(&self) -> usize {
        self.cpu_threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        })
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            channel_capacity: 16,
            cpu_threads: None,
            stall_secs: 180,
            decoded_frames_mib: 1024,
        }
    }
}

/// Settings every stage has, besides its own `compute` and `select` tables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageCommon {
    /// snake_case id; names the stage's folder of shards.
    pub id: String,
    /// Which stage (see `vidcurate list-stages`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Videos processed at once by this stage.
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    /// Time limit for one video in this stage.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Retries of an external (transient) failure before the video is rejected.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Settings that change results: they make the stage's fingerprint.
    #[serde(default)]
    pub compute: toml::Table,
    /// Thresholds applied to results: never part of the fingerprint.
    #[serde(default)]
    pub select: toml::Table,
    /// Model stages: `live`, `batch` or `offline` for this stage's calls, whatever its
    /// services' own `mode` (not part of the fingerprint: the answers are the same).
    #[serde(default)]
    pub mode: Option<ServiceMode>,
}

fn default_retries() -> u32 {
    2
}

/// A configuration error with its place in the file.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        if let Some(k) = &self.key {
            write!(f, ": key `{k}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for crate::error::RunError {
    fn from(e: ConfigError) -> Self {
        crate::error::RunError::Config(e.to_string())
    }
}

impl ConfigError {
    /// An error about a whole file (no line or key): it cannot be read or listed.
    pub fn file(path: &Path, message: impl Into<String>) -> Self {
        Self {
            file: path.to_path_buf(),
            line: None,
            column: None,
            key: None,
            message: message.into(),
        }
    }
}

/// The text of a configuration file (pipeline, query, taxonomy or task file), or the error
/// that names it.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError::file(path, format!("cannot read: {e}")))
}

/// A name that becomes a column value or a key: lower-case letters, digits and _.
pub fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// One step of a key path inside the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// `at` extended by one key: where a setting lives, for error messages.
pub fn key_at(at: &[Seg], key: &str) -> Vec<Seg> {
    let mut p = at.to_vec();
    p.push(Seg::Key(key.into()));
    p
}

pub fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The pipeline file's text with a span-keeping parse, to turn key paths into lines.
pub struct SourceText {
    pub file: PathBuf,
    pub text: String,
    doc: Option<toml_edit::Document<String>>,
}

impl SourceText {
    pub fn new(file: &Path, text: String) -> Self {
        let doc = toml_edit::Document::parse(text.clone()).ok();
        Self {
            file: file.to_path_buf(),
            text,
            doc,
        }
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map(|i| offset - i).unwrap_or(offset + 1);
        (line, col)
    }

    /// Byte offset of the deepest part of `path` that exists in the file.
    fn offset_of(&self, path: &[Seg]) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        walk(Node::Table(doc.as_table()), path, None)
    }

    /// An error at `path` (the deepest existing part of it gives the line).
    pub fn error_at(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        let (line, column) = self.offset_of(path).map(|o| self.line_col(o)).unzip();
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            key: (!path.is_empty()).then(|| path_string(path)),
            message: message.into(),
        }
    }

    /// Parses the whole file as `T`; syntax errors name the line.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str::<T>(&self.text).map_err(|e| {
            let (line, column) = e.span().map(|span| self.line_col(span.start)).unzip();
            ConfigError {
                file: self.file.clone(),
                line,
                column,
                key: None,
                message: unknown::closest_first(e.message().trim()),
            }
        })
    }

    /// Parses the whole file as `T`; errors name the line, and the key of a bad value.
    pub fn parse_typed<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        self.typed(&self.parse::<toml::Table>()?, &[])
    }

    /// Deserializes a sub-table at `at` into a typed settings struct, reporting the exact key.
    pub fn typed<T: DeserializeOwned>(
        &self,
        table: &toml::Table,
        at: &[Seg],
    ) -> Result<T, ConfigError> {
        let value = toml::Value::Table(table.clone());
        serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
            let mut path: Vec<Seg> = at.to_vec();
            for seg in e.path().iter() {
                match seg {
                    serde_path_to_error::Segment::Seq { index } => path.push(Seg::Index(*index)),
                    serde_path_to_error::Segment::Map { key } => path.push(Seg::Key(key.clone())),
                    serde_path_to_error::Segment::Enum { variant } => {
                        path.push(Seg::Key(variant.clone()))
                    }
                    serde_path_to_error::Segment::Unknown => {}
                }
            }
            let msg = unknown::closest_first(&e.inner().to_string());
            // serde names an unknown key only in its message; point at that key's line.
            if let Some(name) = msg
                .strip_prefix("unknown field `")
                .and_then(|r| r.split('`').next())
                && path.last() != Some(&Seg::Key(name.to_string()))
            {
                path.push(Seg::Key(name.to_string()));
            }
            self.error_at(&path, msg)
        })
    }
}

#[derive(Clone, Copy)]
enum Node<'a> {
    Item(&'a toml_edit::Item),
    Table(&'a toml_edit::Table),
    Value(&'a toml_edit::Value),
}

/// Follows `path` through the span-keeping document; returns the last span found.
fn walk(node: Node<'_>, path: &[Seg], best: Option<usize>) -> Option<usize> {
    let Some((seg, rest)) = path.split_first() else {
        return best;
    };
    match seg {
        Seg::Key(k) => {
            let table: Option<&dyn toml_edit::TableLike> = match node {
                Node::Item(i) => i.as_table_like(),
                Node::Table(t) => Some(t),
                Node::Value(v) => v.as_inline_table().map(|t| t as &dyn toml_edit::TableLike),
            };
            let Some((key, next)) = table.and_then(|t| t.get_key_value(k)) else {
                return best;
            };
            walk(Node::Item(next), rest, key.span().map(|s| s.start).or(best))
        }
        Seg::Index(i) => match node {
            Node::Item(item) => {
                if let Some(t) = item.as_array_of_tables().and_then(|a| a.get(*i)) {
                    walk(Node::Table(t), rest, t.span().map(|s| s.start).or(best))
                } else if let Some(v) = item.as_array().and_then(|a| a.get(*i)) {
                    walk(Node::Value(v), rest, v.span().map(|s| s.start).or(best))
                } else {
                    best
                }
            }
            Node::Value(v) => match v.as_array().and_then(|a| a.get(*i)) {
                Some(v) => walk(Node::Value(v), rest, v.span().map(|s| s.start).or(best)),
                None => best,
            },
            Node::Table(_) => best,
        },
    }
}
