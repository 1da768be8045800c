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
//! - `review/`: what people decided (video annotations, item reviews, the decision rule and
//!   the reviewers' agreement), read by the commands that annotate, release and score.
//! - `score.rs`: a task's predictions scored format by format (the metrics without a judge),
//!   means with standard errors clustered by video, Macro-F1.
//! - `text.rs`: how options and questions are compared (normalised text, trigram similarity).

pub mod derive;
pub mod formats;
pub mod metrics;
pub mod overlap;
pub mod review;
pub mod rounds;
pub mod score;
pub mod task;
pub mod text;

/// A permutation of 0..n seeded by `seed` (Fisher–Yates on splitmix64 from the seed's BLAKE3):
/// stable across runs and platforms, unlike a library RNG whose stream may change between
/// versions. The one shuffle of the project: options of items (drafted and derived) and the
/// frame-order perturbations of a release.
pub fn seeded_permutation(n: usize, seed: &str) -> Vec<usize> {
    let h = blake3::hash(seed.as_bytes());
    let mut state = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default());
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod task_tests;
