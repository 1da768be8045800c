//! One integration-test binary (ripgrep's layout): the CLI on generated media and on the real
//! recorded fixtures in tests/fixtures (sources and licences in its README).

mod fake_http;
mod util;

mod analyze;
mod annotate;
mod annotate_tasks;
mod ask;
mod availability;
mod bad_input;
mod batch;
mod budget;
mod caption;
mod cluster;
mod config;
mod croissant;
mod dataset;
mod dryrun;
mod evaluate_batch;
mod evaluate_people;
mod evaluate_tasks;
mod frames;
mod harness;
mod harness_tasks;
mod items;
mod judge;
mod language;
mod layers;
mod ocr;
mod ocr_decoded;
mod ocr_reuse;
mod ocr_truth;
mod overlap;
mod questions;
mod release;
mod resume;
mod s3faults;
mod shots;
mod slurm;
mod soak;
mod split;
mod tasks;
mod transcript;
mod verify;
mod youtube;
