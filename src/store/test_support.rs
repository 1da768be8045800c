//! Fixtures the unit tests of several folders share: temporary folders holding given files, a
//! local run directory, and a bare video record.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;

use crate::record::{SourceInfo, VideoRecord};
use crate::store::Store;

/// A temporary folder holding `files` (a path inside it, then the bytes), parent folders made.
pub(crate) fn folder_with<P: AsRef<Path>, B: AsRef<[u8]>>(
    files: impl IntoIterator<Item = (P, B)>,
) -> TempDir {
    let d = tempfile::tempdir().unwrap();
    for (rel, bytes) in files {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    d
}

/// A temporary folder holding one file `name` with `text`, and that file's path; the file lasts
/// as long as the folder is kept.
pub(crate) fn file_with(name: &str, text: impl AsRef<[u8]>) -> (TempDir, PathBuf) {
    let d = folder_with([(name, text)]);
    let p = d.path().join(name);
    (d, p)
}

/// A run directory in a new temporary folder, opened by its one writer.
pub(crate) fn run_dir() -> (TempDir, Arc<dyn Store>) {
    let d = tempfile::tempdir().unwrap();
    let store =
        crate::store::open_run(&d.path().display().to_string(), crate::store::Access::Own).unwrap();
    (d, store)
}

/// Video `id` with a default source and no extra columns.
pub(crate) fn record(id: &str) -> VideoRecord {
    VideoRecord::new(id.into(), SourceInfo::default(), vec![])
}
