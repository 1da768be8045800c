//! One integration-test binary (ripgrep's layout): the CLI on generated media and on the real
//! fixtures in ../shared/fixtures.

mod fake_http;
mod util;

mod analyze;
mod bad_input;
mod config;
mod frames;
mod judge;
mod ocr;
mod ocr_truth;
mod resume;
mod shots;
mod youtube;
