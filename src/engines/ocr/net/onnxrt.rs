//! ONNX Runtime (`ort`, load-dynamic): the library from the `onnxruntime` wheel, loaded once per
//! process; one single-threaded session per model and OCR worker.

use super::NetError;
use ort::session::Session;
use ort::value::TensorRef;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

type Env = ort::environment::Environment;
static ORT: OnceLock<Result<Env, Arc<NetError>>> = OnceLock::new();

pub struct OrtRuntime {
    env: Env,
}

impl OrtRuntime {
    /// Loads the shared library once (`ORT_DYLIB_PATH` overrides the models folder).
    pub fn load(models: &Path) -> Result<Self, NetError> {
        let env = ORT
            .get_or_init(|| {
                let lib = std::env::var_os("ORT_DYLIB_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| models.join("onnxruntime/libonnxruntime.so.1.31.1"));
                if !lib.is_file() {
                    return Err(Arc::new(NetError::OrtMissing { lib }));
                }
                let builder = ort::init_from(&lib)
                    .map_err(|error| Arc::new(NetError::OrtLoad { lib, error }))?;
                builder
                    .with_name("vidcurate")
                    .build()
                    .map_err(|e| Arc::new(NetError::Ort(e)))
            })
            .clone()
            .map_err(NetError::Shared)?;
        Ok(Self { env })
    }

    pub fn net(&mut self, path: &Path) -> Result<OrtNet, NetError> {
        let b = Session::builder(&self.env)?
            .with_optimization_level(ort::session::builder::GraphOptimizationLevel::Level3)
            .map_err(ort::Error::from)?
            .with_intra_threads(1)
            .map_err(ort::Error::from)?;
        let mut b = b.with_inter_threads(1).map_err(ort::Error::from)?;
        Ok(OrtNet(b.commit_from_file(path)?))
    }
}

pub struct OrtNet(Session);

impl OrtNet {
    pub fn run(
        &mut self,
        shape: [usize; 4],
        input: &[f32],
    ) -> Result<(Vec<i64>, Vec<f32>), NetError> {
        let tensor = TensorRef::from_array_view((shape, input))?;
        let outputs = self.0.run(ort::inputs![tensor])?;
        let (shape, data) = outputs[0].try_extract_tensor::<f32>()?;
        Ok((shape.iter().copied().collect(), data.to_vec()))
    }
}
