//! Clients of external programs and services; each one owns its connection details and limits.
pub mod asr;
pub mod audio;
pub mod endpoint;
pub mod ffmpeg;
pub mod llm;
pub mod minilm;
pub mod youtube;
