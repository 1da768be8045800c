//! vidcurate: build video benchmark dataset splits with a staged, resumable pipeline.
//!
//! A pipeline file (`config`) becomes a `Plan` of stages (`stages`), which the `runtime` runs as a
//! chain of tasks joined by bounded channels, persisting every stage's rows as Parquet shards in a
//! run directory. See README.md for the run directory layout.

pub mod analyze;
pub mod annotate;
pub mod clients;
pub mod config;
pub mod error;
pub mod estimate;
pub mod evaluate;
pub mod gc;
pub mod ocr;
pub mod paths;
pub mod plan;
pub mod queries;
pub mod record;
pub mod release;
pub mod rethreshold;
pub mod runtime;
pub mod secrets;
pub mod split;
pub mod stages;
pub mod status;
pub mod tls;
