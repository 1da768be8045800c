//! `evaluate --split`: which of a release's splits a report scores. By default the `test` split
//! when the release has one: a model scored on every split is scored partly on the items meant
//! for tuning it. `--split all` scores every split; a release whose files name no split, or
//! that has no test split, is scored whole by default, and the report says so.
//!
//! Reads the release's file names (`release::split_files`); writes, calls and caches nothing.

use crate::error::RunError;
use crate::release::split_files::{release_splits, split_of};
use serde::Serialize;
use std::path::Path;

/// The split `evaluate` scores, and the release's splits.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The split scored; None: every split.
    pub split: Option<String>,
    /// The release's splits, in its order (empty: its files name none).
    pub splits: Vec<String>,
    /// Whether `--split` chose (else the default did).
    asked: bool,
    /// With `--shared-with OLD`: what both versions hold unchanged; nothing else is scored.
    shared: Option<Shared>,
}

/// The videos (same split and label) and items (`<config>/<item_id>`, same content) that a
/// release and an earlier version hold alike (`release::versions`).
#[derive(Debug, Clone, Default)]
pub struct Shared {
    videos: std::collections::HashSet<String>,
    items: std::collections::HashSet<String>,
}

impl Shared {
    /// What `release` shares with `old`.
    pub fn between(old: &Path, release: &Path) -> Result<Shared, RunError> {
        use crate::release::versions::Snapshot;
        let (a, b) = (Snapshot::read(old)?, Snapshot::read(release)?);
        let videos = (b.videos.iter())
            .filter(|(id, v)| a.videos.get(*id) == Some(*v))
            .map(|(id, _)| id.clone())
            .collect();
        let items = (b.items.iter())
            .filter(|(k, it)| a.items.get(*k) == Some(*it))
            .map(|(k, _)| k.clone())
            .collect();
        Ok(Shared { videos, items })
    }
}

/// What a report scored: its split, how many videos or items of how many, and the predictions
/// of other splits it read and left out.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SplitScored {
    /// The split scored, or "all".
    pub name: String,
    /// The release's splits (empty when its files name none).
    pub splits: Vec<String>,
    /// Whether the default chose the split (`--split` not given).
    pub default: bool,
    /// What is counted: "videos" or "items".
    pub unit: String,
    /// Videos or items of the split scored, and of the whole release.
    pub scored: usize,
    pub total: usize,
    /// Prediction rows for videos or items of other splits: read, not scored.
    pub other_predictions: usize,
}

impl Scope {
    /// The split `asked` (`--split`; "all" for every split), or by default `test` when the
    /// release has one, else every split. An unknown name is an error listing the splits.
    pub fn resolve(release: &Path, asked: Option<&str>) -> Result<Scope, RunError> {
        let splits = release_splits(release)?;
        let split = match asked {
            Some("all") => None,
            Some(s) if splits.iter().any(|x| x == s) => Some(s.to_string()),
            Some(s) => {
                let have = if splits.is_empty() {
                    "its files name no split".to_string()
                } else {
                    format!("its splits: {}", splits.join(", "))
                };
                return Err(RunError::Config(format!(
                    "--split {s}: {} has no such split ({have}; or all for every item)",
                    release.display()
                )));
            }
            None => splits.iter().find(|s| *s == "test").cloned(),
        };
        Ok(Scope {
            split,
            splits,
            asked: asked.is_some(),
            shared: None,
        })
    }

    /// Scores only what the release shares with the earlier version at `old` (`--shared-with`).
    pub fn shared_with(mut self, release: &Path, old: Option<&Path>) -> Result<Scope, RunError> {
        if let Some(old) = old {
            self.shared = Some(Shared::between(old, release)?);
        }
        Ok(self)
    }

    /// Whether the video is scored under `--shared-with` (always without it).
    pub fn shares_video(&self, id: &str) -> bool {
        self.shared.as_ref().is_none_or(|s| s.videos.contains(id))
    }

    /// Whether item `item_id` of `config` (questions, or a task's name) is scored under
    /// `--shared-with` (always without it).
    pub fn shares_item(&self, config: &str, item_id: &str) -> bool {
        (self.shared.as_ref()).is_none_or(|s| s.items.contains(&format!("{config}/{item_id}")))
    }

    /// Whether the file `f` of a config holds the split scored (under "all", every file).
    pub fn keeps(&self, f: &Path) -> bool {
        match &self.split {
            None => true,
            Some(s) => split_of(f) == Some(s.as_str()),
        }
    }

    /// The report's account of what it scored.
    pub fn scored(&self, unit: &str, scored: usize, total: usize, other: usize) -> SplitScored {
        SplitScored {
            name: self.split.clone().unwrap_or_else(|| "all".into()),
            splits: self.splits.clone(),
            default: !self.asked,
            unit: unit.to_string(),
            scored,
            total,
            other_predictions: other,
        }
    }
}

impl SplitScored {
    /// The report's first line: `split: test (12 of 33 items; --split all for every split)`.
    pub fn line(&self) -> String {
        let other = match self.other_predictions {
            0 => String::new(),
            1 => "; 1 prediction of another split not scored".to_string(),
            n => format!("; {n} predictions of other splits not scored"),
        };
        let (n, total, unit) = (self.scored, self.total, &self.unit);
        if self.name != "all" {
            return format!(
                "split: {} ({n} of {total} {unit}{other}; --split all for every split)\n",
                self.name
            );
        }
        let why = if self.splits.is_empty() {
            "the release's files name no split".to_string()
        } else if self.default {
            format!(
                "the release has no test split, its splits: {}",
                self.splits.join(", ")
            )
        } else {
            format!("every split: {}", self.splits.join(", "))
        };
        format!("split: all ({total} {unit}; {why}{other})\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(files: &[&str]) -> tempfile::TempDir {
        crate::store::test_support::folder_with(files.iter().map(|f| (format!("data/{f}"), "")))
    }

    #[test]
    fn the_test_split_by_default_all_on_request_and_an_unknown_name_lists_the_splits() {
        let d = release(&[
            "train-00000-of-00001.parquet",
            "test-00000-of-00001.parquet",
        ]);
        let s = Scope::resolve(d.path(), None).unwrap();
        assert_eq!(s.split.as_deref(), Some("test"));
        assert!(s.keeps(Path::new("questions/test-00000-of-00001.parquet")));
        assert!(!s.keeps(Path::new("questions/train-00000-of-00001.parquet")));
        assert_eq!(
            s.scored("items", 12, 33, 21).line(),
            "split: test (12 of 33 items; 21 predictions of other splits not scored; --split all for every split)\n"
        );
        let all = Scope::resolve(d.path(), Some("all")).unwrap();
        assert_eq!(all.split, None);
        assert!(all.keeps(Path::new("loose.parquet")));
        assert_eq!(
            all.scored("items", 33, 33, 0).line(),
            "split: all (33 items; every split: test, train)\n"
        );
        let e = Scope::resolve(d.path(), Some("dev"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--split dev:") && e.contains("(its splits: test, train; or all"),
            "{e}"
        );
    }

    #[test]
    fn without_a_test_split_or_any_split_everything_is_scored_and_said() {
        let d = release(&["train-00000-of-00001.parquet"]);
        let s = Scope::resolve(d.path(), None).unwrap();
        assert_eq!(
            s.scored("videos", 15, 15, 0).line(),
            "split: all (15 videos; the release has no test split, its splits: train)\n"
        );
        let d = release(&["rows.parquet"]);
        let s = Scope::resolve(d.path(), None).unwrap();
        assert_eq!(
            s.scored("videos", 4, 4, 0).line(),
            "split: all (4 videos; the release's files name no split)\n"
        );
        assert!(Scope::resolve(d.path(), Some("test")).is_err());
    }
}
