//! The benchmark layer: what a benchmark task is and what its answers look like, below the
//! stages that draft items and the commands that review, release and score them, so that each
//! of those reads one definition.
//!
//! - `task.rs`: task files (`pipelines/tasks/<benchmark>/*.toml`): name, category, target
//!   feature, answer format, question, options or labels, metrics, where the reference comes
//!   from (drafted, derived from a stage's columns, or left for people) and the prompt files.
//! - `formats.rs`: the answer formats (single and multiple choice, count, time ranges, reference
//!   lists, open text, tagged reasoning): parsing, validation and the problems a repair names;
//!   the metrics and which formats each can score.
//! - `rounds.rs`: the draft → refine → judge loop (Figure 4) decided from stored rounds, so a
//!   new threshold re-selects with no call.
//! - `derive.rs`: items whose reference vidcurate measured (CCP's colour, CPP's cell, KEG's
//!   ranges from the OCR stage; SAC's shot count, a draft for people).

pub mod derive;
pub mod formats;
pub mod rounds;
pub mod task;

#[cfg(test)]
mod task_tests;
