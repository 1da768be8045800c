//! What a written release folder is held to after `vidcurate release` made it: `integrity`
//! checks its files against the SHA-256 checksums `croissant.json` lists, and refreshes them
//! after a command that edits a release on purpose (a takedown); `harness` writes the release
//! as the evaluation harnesses' tasks and datasets.

pub mod availability;
pub mod harness;
pub mod integrity;
