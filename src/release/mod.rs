//! What a written release folder is held to after `vidcurate release` made it: `integrity`
//! checks its files against the SHA-256 checksums `croissant.json` lists, and refreshes them
//! after a command that edits a release on purpose (a takedown).

pub mod availability;
pub mod integrity;
