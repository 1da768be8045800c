//! vidcurate: build video benchmark dataset splits with a staged, resumable pipeline.
//!
//! A pipeline file (`config`) becomes a `Plan` of stages (`stages`), which the `runtime` runs as a
//! chain of tasks joined by bounded channels, persisting every stage's rows as Parquet shards in a
//! run directory. The run directory's layout: docs/src/reference/run-directory.md.

pub mod annotation;
pub mod benchmark;
pub mod clients;
pub mod commands;
pub mod config;
pub mod engines;
pub mod error;
pub mod evaluation;
pub mod paths;
pub mod plan;
pub mod profile;
pub mod record;
pub mod release;
pub mod report;
pub mod runtime;
pub mod secrets;
pub mod stages;
pub mod store;
pub mod tls;
