#!/usr/bin/env python3
"""Writes the tiny random-weight llama model tests/llama.rs serves with llama.cpp's server: what
is tested is the protocol, not the answers. 2 layers, 64 wide, a byte-level GPT-2-style BPE
vocabulary (256 bytes, 2 merges, ChatML's control tokens) and a ChatML chat template, 470 KB.
Needs only the pure-Python `gguf` package (with numpy); deterministic for a seed.

usage: python make_model.py OUT.gguf [--seed N]
"""
import sys

import numpy as np
import gguf


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    rng = np.random.default_rng(seed)

    n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx = 64, 2, 4, 4, 128, 2048
    head_dim = n_embd // n_head

    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    types = [gguf.TokenType.NORMAL] * 256
    merges = ["Ġ t", "a b"]
    tokens += ["Ġt", "ab"]
    types += [gguf.TokenType.NORMAL] * 2
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    tokens += specials
    types += [gguf.TokenType.CONTROL] * len(specials)
    # pad vocab to a multiple of 8
    while len(tokens) % 8:
        tokens.append(f"<|pad{len(tokens)}|>")
        types.append(gguf.TokenType.UNUSED)
    n_vocab = len(tokens)
    im_start, im_end, eot = (tokens.index(s) for s in specials)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eot)
    w.add_eos_token_id(im_end)
    w.add_pad_token_id(eot)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )

    def t(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # numpy shapes are (rows=out, cols=in); gguf stores reversed dims
    # Random weights, but steered so that sampled text is always valid UTF-8
    # (llama-server's output parser rejects broken UTF-8 / stray control bytes):
    # every token embedding carries a large constant in dim 0, which survives the
    # small-weight blocks and the final RMSNorm; output rows of "bad" tokens
    # (bytes >= 0x80, control chars except \n, <|im_start|>, <|endoftext|>, pads)
    # get a big negative weight on dim 0, so their logits are ~ -70.
    embd = t(n_vocab, n_embd, scale=0.5)
    embd[:, 0] = 8.0
    outw = t(n_vocab, n_embd, scale=0.5)
    outw[:, 0] = 0.0
    good = set(range(0x20, 0x7F)) | {0x0A, 256, 257, im_end}
    for i in range(n_vocab):
        if i not in good:
            outw[i, 0] = -10.0
    outw[im_end, 0] = 0.05  # small push towards ending the turn
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", outw)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", t(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", t(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", t(n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", t(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", t(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", t(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", t(n_embd, n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: vocab={n_vocab} embd={n_embd} layers={n_layer}")


if __name__ == "__main__":
    main()
