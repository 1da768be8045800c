//! OpenVINO (`openvino`, runtime-linking): `libopenvino_c` and the CPU plugin and ONNX reader
//! beside it, from the `openvino` wheel; one model compiled per OCR worker, single-threaded, at
//! f32 (on CPUs with AMX OpenVINO would otherwise pick bf16, whose outputs differ by up to 0.15).

use super::NetError;
use openvino::{
    CompiledModel, Core, DeviceType, ElementType, InferRequest, RwPropertyKey, Shape, Tensor,
};
use std::path::{Path, PathBuf};

/// The `openvino` wheel's library version suffix; `scripts/fetch_models.sh` fetches this one.
pub const LIB: &str = "openvino/libopenvino_c.so.2641";

pub struct OvRuntime {
    core: Core,
}

impl OvRuntime {
    /// Loads the shared library once per process (`VIDCURATE_OPENVINO_LIB` overrides the
    /// models folder) and sets every model it compiles to one thread, no pinning, f32.
    pub fn load(models: &Path) -> Result<Self, NetError> {
        let lib = std::env::var_os("VIDCURATE_OPENVINO_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| models.join(LIB));
        if !lib.is_file() {
            return Err(NetError::OvMissing { lib });
        }
        openvino_sys::library::load_from(&lib)
            .map_err(|reason| NetError::OvLoad { lib, reason })?;
        let mut core = Core::new()?;
        core.set_properties(
            &DeviceType::CPU,
            [
                (RwPropertyKey::InferenceNumThreads, "1"),
                (RwPropertyKey::NumStreams, "1"),
                (RwPropertyKey::HintPerformanceMode, "LATENCY"),
                // Two workers each pinned to "their" core could land on the same one.
                (RwPropertyKey::HintEnableCpuPinning, "NO"),
                (RwPropertyKey::HintInferencePrecision, "f32"),
            ],
        )?;
        Ok(Self { core })
    }

    pub fn net(&mut self, path: &Path) -> Result<OvNet, NetError> {
        let model = self
            .core
            .read_model_from_file(&path.to_string_lossy(), "")?;
        let mut compiled = self.core.compile_model(&model, DeviceType::CPU)?;
        let request = compiled.create_infer_request()?;
        Ok(OvNet {
            _compiled: compiled,
            request,
        })
    }
}

pub struct OvNet {
    /// Kept alive with its request.
    _compiled: CompiledModel,
    request: InferRequest,
}

impl OvNet {
    pub fn run(
        &mut self,
        shape: [usize; 4],
        input: &[f32],
    ) -> Result<(Vec<i64>, Vec<f32>), NetError> {
        let dims = shape.map(|d| d as i64);
        let mut tensor = Tensor::new(ElementType::F32, &Shape::new(&dims)?)?;
        tensor.get_data_mut::<f32>()?.copy_from_slice(input);
        self.request.set_input_tensor(&tensor)?;
        self.request.infer()?;
        let out = self.request.get_output_tensor_by_index(0)?;
        let shape = out.get_shape()?.get_dimensions().to_vec();
        Ok((shape, out.get_data::<f32>()?.to_vec()))
    }
}
