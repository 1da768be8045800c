//! Paths shared by every part that loads a model (OCR, the MiniLM judge): one place, so the
//! setup script, the CLI and the stages agree.

use std::path::{Path, PathBuf};

/// Where the models are: `$VIDCURATE_MODELS`, else `data/models` under the current directory,
/// else under the repository the executable was built in.
pub fn models_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("VIDCURATE_MODELS") {
        return PathBuf::from(p);
    }
    let local = PathBuf::from("data/models");
    if local.join("ppocrv4").is_dir() {
        return local;
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/models");
    if built.is_dir() {
        return built;
    }
    local
}
