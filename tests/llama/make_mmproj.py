#!/usr/bin/env python3
"""Writes a tiny random-weight multimodal projector (mmproj) for the model make_model.py writes,
so that llama.cpp's server (tools/mtmd) accepts images: what is tested is the protocol, not the
answers. A LLaVA-style CLIP vision encoder ("clip" architecture, projector type "mlp"): 32 px
images cut in 8 px patches (16 image tokens per image, plus a class token inside the encoder),
2 pre-norm transformer layers 32 wide (LLaVA takes the features of the second to last, so
clip.cpp runs one), and a 2-layer MLP projecting to the text model's 64-wide embeddings.
float32, 157 KB. Needs only the pure-Python `gguf` package (with numpy); deterministic for a
seed.

usage: python make_mmproj.py OUT-mmproj.gguf [--seed N]
"""
import sys

import numpy as np
import gguf

TEXT_N_EMBD = 64  # make_model.py's n_embd: clip.cpp refuses a projector of another width


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tiny-mmproj.gguf"
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    rng = np.random.default_rng(seed)

    image_size, patch_size = 32, 8
    n_embd, n_layer, n_head, n_ff = 32, 2, 4, 128
    n_proj_hidden = TEXT_N_EMBD
    n_pos = (image_size // patch_size) ** 2 + 1  # patches + class token

    w = gguf.GGUFWriter(out, "clip")
    w.add_name("tiny-random-clip-mmproj")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_audio_encoder", False)
    w.add_bool("clip.has_llava_projector", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", TEXT_N_EMBD)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])

    def t(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    def zeros(n):
        return np.zeros(n, dtype=np.float32)

    # numpy shapes are (rows=out, cols=in); gguf stores reversed dims
    w.add_tensor("v.patch_embd.weight", t(n_embd, 3, patch_size, patch_size, scale=0.1))
    w.add_tensor("v.patch_embd.bias", zeros(n_embd))
    w.add_tensor("v.class_embd", t(n_embd, scale=0.1))
    w.add_tensor("v.position_embd.weight", t(n_pos, n_embd, scale=0.1))
    w.add_tensor("v.pre_ln.weight", ones(n_embd))
    w.add_tensor("v.pre_ln.bias", zeros(n_embd))
    for i in range(n_layer):
        p = f"v.blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + name + ".weight", t(n_embd, n_embd))
            w.add_tensor(p + name + ".bias", zeros(n_embd))
        w.add_tensor(p + "ln1.weight", ones(n_embd))
        w.add_tensor(p + "ln1.bias", zeros(n_embd))
        w.add_tensor(p + "ffn_up.weight", t(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.bias", zeros(n_ff))
        w.add_tensor(p + "ffn_down.weight", t(n_embd, n_ff))
        w.add_tensor(p + "ffn_down.bias", zeros(n_embd))
        w.add_tensor(p + "ln2.weight", ones(n_embd))
        w.add_tensor(p + "ln2.bias", zeros(n_embd))
    # LLaVA MLP projector: mm.0 (vision width -> hidden), GELU, mm.2 (hidden -> text width).
    # Like make_model.py's token embeddings, the image embeddings carry a large constant in
    # dim 0 (the bias), so the text model's steering towards valid UTF-8 output still holds.
    w.add_tensor("mm.0.weight", t(n_proj_hidden, n_embd, scale=0.2))
    w.add_tensor("mm.0.bias", zeros(n_proj_hidden))
    w.add_tensor("mm.2.weight", t(TEXT_N_EMBD, n_proj_hidden, scale=0.2))
    b2 = t(TEXT_N_EMBD, scale=0.5)
    b2[0] = 8.0
    w.add_tensor("mm.2.bias", b2)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: image={image_size}px patch={patch_size} vit={n_layer}x{n_embd} -> {TEXT_N_EMBD}")


if __name__ == "__main__":
    main()
