//! What more than one command draws or prints: the long distribution tables (`DistRow`), the
//! statistics rows (`StatRow`), and their PNG plots and HTML report (`plot`). `analyze` writes
//! them for the on-screen text analyses, `evaluate` for the annotated signal lengths.

pub mod analyze;
pub mod cache;
pub mod estimate;
pub mod modalities;
pub mod plot;
pub mod profile;
pub mod questions;
pub mod reach;
pub mod reference;

use serde::{Deserialize, Serialize};

/// A figure that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Drawing (plotters' errors carry no type worth keeping), or no font.
    #[error("{0}")]
    Draw(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DistRow {
    pub group: String,
    pub bin: u32,
    pub lo: f64,
    pub hi: f64,
    pub label: String,
    pub count: f64,
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatRow {
    pub analysis: String,
    pub group_a: String,
    pub group_b: String,
    pub test: String,
    pub n_a: u64,
    pub n_b: u64,
    pub statistic: f64,
    pub p_value: f64,
    pub effect_size: f64,
}

impl StatRow {
    /// The row as display cells: analysis, groups, test, n, statistic, p, effect size (for the
    /// terminal summary and the HTML report alike).
    pub fn cells(&self) -> [String; 7] {
        [
            self.analysis.clone(),
            format!("{} vs {}", self.group_a, self.group_b),
            self.test.clone(),
            format!("n={}/{}", self.n_a, self.n_b),
            format!("stat={:.4}", self.statistic),
            if self.p_value == 0.0 {
                // Below what a double holds: say so rather than print an exact-looking zero.
                "p<1e-300".to_string()
            } else {
                format!("p={:.3e}", self.p_value)
            },
            format!("effect={:.3}", self.effect_size),
        ]
    }
}
