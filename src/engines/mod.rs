//! In-process engines: the work that runs on this machine's CPU with no service behind it —
//! FFmpeg decoding and encoding, audio decoding, the PP-OCR models, the MiniLM embedder. They know
//! nothing of runs, stages or services: a stage calls them on the runtime's CPU pool.
pub mod audio;
pub mod ffmpeg;
pub mod minilm;
pub mod ocr;
