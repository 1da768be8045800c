//! One module per subcommand: its arguments (clap), the one library call it makes, and how it
//! prints the result. What a command computes lives in the layer it belongs to (`report`,
//! `release`, `annotation`, `evaluation`, `store`...), never here, and no command imports
//! another (tests/layers.rs). Each `run` returns how it ended (`Exit`) or a typed error;
//! `main.rs` only dispatches and maps both to exit codes, in one table.
pub mod analyze;
pub mod annotate;
pub mod batch;
pub mod cache;
pub mod diff;
pub mod evaluate;
pub mod gc;
pub mod harness;
pub mod items;
pub mod ocr;
pub mod overlap;
pub mod queries;
pub mod questions;
pub mod reference;
pub mod rehydrate;
pub mod release;
pub mod rethreshold;
pub mod run;
pub mod split;
pub mod status;
pub mod takedown;
pub mod tasks;
pub mod validate;
pub mod verify;
