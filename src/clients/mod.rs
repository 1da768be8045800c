//! Clients of external programs and services; each one owns its connection details and limits.
pub mod asr;
pub mod cached;
pub mod endpoint;
pub mod llm;
pub mod refusal;
pub mod youtube;
