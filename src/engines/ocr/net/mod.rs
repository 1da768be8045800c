//! The inference engine under OCR: the same unchanged FP32 ONNX models on OpenVINO (the default
//! where its library loads) or on ONNX Runtime (the fallback, and RapidOCR's own engine). Both
//! libraries come from PyPI wheels (`scripts/fetch_models.sh`) and are loaded at run time.
//!
//! Why two: on x86 CPUs OpenVINO runs PP-OCRv4's detector 1.5-1.7x and its recognizer 2.1-2.9x
//! faster than ONNX Runtime at single precision, with outputs equal to 1e-5
//! (`scripts/bench/ocr_engines.py`); ONNX Runtime stays for machines OpenVINO does not serve.
//! Engine choice changes speed, not results, so it is not part of the `ocr` stage's fingerprint.

mod onnx_meta;
mod onnxrt;
mod ov;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which library runs the models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// OpenVINO when its library loads, else ONNX Runtime (with a warning).
    #[default]
    Auto,
    /// OpenVINO only: an error if its library does not load.
    Openvino,
    /// ONNX Runtime, RapidOCR's own engine.
    Onnxruntime,
}

/// Why a library or a model could not be loaded or run. Messages name the file that failed
/// and say how to fix a missing one.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(
        "ONNX Runtime library not found at {}: run scripts/fetch_models.sh (or set ORT_DYLIB_PATH)",
        lib.display()
    )]
    OrtMissing { lib: PathBuf },
    #[error("loading {}: {error}", lib.display())]
    OrtLoad {
        lib: PathBuf,
        error: ort::LoadDynamicError,
    },
    #[error(
        "OpenVINO library not found at {}: run scripts/fetch_models.sh (or set VIDCURATE_OPENVINO_LIB)",
        lib.display()
    )]
    OvMissing { lib: PathBuf },
    /// The library's own words on why it did not load (openvino-sys gives them as text).
    #[error("loading {}: {reason}", lib.display())]
    OvLoad { lib: PathBuf, reason: String },
    #[error("ONNX Runtime: {0}")]
    Ort(#[from] ort::Error),
    #[error("OpenVINO: {0}")]
    Ov(#[from] ::openvino::InferenceError),
    #[error("OpenVINO: {0}")]
    OvSetup(#[from] ::openvino::SetupError),
    /// A library is loaded once per process, so its first failure is every later one's.
    #[error(transparent)]
    Shared(Arc<NetError>),
    #[error("model {} not found: run scripts/fetch_models.sh", path.display())]
    ModelMissing { path: PathBuf },
    #[error("{}: {error}", path.display())]
    Model { path: PathBuf, error: Box<NetError> },
    #[error("{}: not an ONNX model ({what})", path.display())]
    NotOnnx { path: PathBuf, what: &'static str },
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A loaded library, ready to load models on one thread each.
pub enum Runtime {
    Ort(onnxrt::OrtRuntime),
    Ov(ov::OvRuntime),
}

impl Runtime {
    /// Loads the library `kind` names from `models` (or its environment override).
    pub fn load(models: &Path, kind: EngineKind) -> Result<Self, NetError> {
        match kind {
            EngineKind::Onnxruntime => Ok(Self::Ort(onnxrt::OrtRuntime::load(models)?)),
            EngineKind::Openvino => Ok(Self::Ov(ov::OvRuntime::load(models)?)),
            EngineKind::Auto => match ov::OvRuntime::load(models) {
                Ok(r) => Ok(Self::Ov(r)),
                Err(e) => {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        tracing::warn!(
                            "OCR runs on ONNX Runtime, the slower engine: OpenVINO did not load ({e})"
                        )
                    });
                    Ok(Self::Ort(onnxrt::OrtRuntime::load(models)?))
                }
            },
        }
    }

    /// One single-threaded instance of the model at `path`.
    pub fn net(&mut self, path: &Path) -> Result<Net, NetError> {
        if !path.is_file() {
            return Err(NetError::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        let wrap = |e: NetError| NetError::Model {
            path: path.to_path_buf(),
            error: Box::new(e),
        };
        match self {
            Self::Ort(r) => r.net(path).map(Net::Ort).map_err(wrap),
            Self::Ov(r) => r.net(path).map(Net::Ov).map_err(wrap),
        }
    }
}

/// One model instance; used by one thread at a time.
pub enum Net {
    Ort(onnxrt::OrtNet),
    Ov(ov::OvNet),
}

impl Net {
    /// Runs the model on one NCHW f32 tensor; its first output's shape and values.
    pub fn run(
        &mut self,
        shape: [usize; 4],
        input: &[f32],
    ) -> Result<(Vec<i64>, Vec<f32>), NetError> {
        match self {
            Self::Ort(n) => n.run(shape, input),
            Self::Ov(n) => n.run(shape, input),
        }
    }
}

/// The value of `key` in an ONNX model's metadata (PaddleOCR keeps the recognizer's character
/// list there), read from the file itself so that every engine sees the same.
pub fn onnx_metadata(path: &Path, key: &str) -> Result<Option<String>, NetError> {
    let bytes = std::fs::read(path).map_err(|error| NetError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    onnx_meta::metadata(&bytes, key).map_err(|what| NetError::NotOnnx {
        path: path.to_path_buf(),
        what,
    })
}
