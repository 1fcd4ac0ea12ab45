"""Tiny LLaMA model files for tests: a random fusegrad Transformer written as GGUF (by the gguf package, with a
byte-level tokenizer in its metadata) and as a Hugging Face safetensors folder."""

from __future__ import annotations

import json
import pathlib

import gguf
import numpy as np

from fusegrad import Tensor
from fusegrad.llm.model import Transformer, TransformerConfig
from fusegrad.llm.tokenizer import byte_alphabet
from fusegrad.nn.state import get_state_dict, safe_save

# 256 byte tokens, a few merges, then the special tokens
BYTES = list(byte_alphabet().values())
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
TOKENS = BYTES + [a + b for a, b in MERGES] + ["<s>", "</s>"]
BOS, EOS = len(TOKENS) - 2, len(TOKENS) - 1
CONFIG = TransformerConfig(num_blocks=2, dim=32, hidden_dim=64, n_heads=4, n_kv_heads=2, norm_eps=1e-5,
                           vocab_size=len(TOKENS), head_dim=8, rope_theta=10000.0, max_context=32)  # fmt: skip


def random_model(seed: int = 0) -> Transformer:
    rng = np.random.default_rng(seed)
    model = Transformer(CONFIG)
    for v in get_state_dict(model).values():
        v.assign(Tensor(rng.standard_normal(v.shape).astype(np.float32) * 0.5)).realize()
    return model


def _interleave_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Half-split RoPE rows -> GGUF's interleaved rows (what llama.cpp's converter does to q and k)."""
    rows, dim = w.shape
    return w.reshape(heads, 2, rows // heads // 2, dim).swapaxes(1, 2).reshape(rows, dim)


def write_gguf(model: Transformer, path: pathlib.Path, quant: gguf.GGMLQuantizationType | None = None) -> None:
    """The model as a LLaMA GGUF file; 2-d weights quantised to `quant` when given (norms stay float32)."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_blocks)
    writer.add_embedding_length(cfg.dim)
    writer.add_feed_forward_length(cfg.hidden_dim)
    writer.add_head_count(cfg.n_heads)
    writer.add_head_count_kv(cfg.n_kv_heads)
    writer.add_layer_norm_rms_eps(cfg.norm_eps)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_context_length(64)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(TOKENS)
    writer.add_token_types([1] * (len(TOKENS) - 2) + [3, 3])
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    for name, value in get_state_dict(model).items():
        w = value.numpy()
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            w = _interleave_rows(w, cfg.n_heads if "attn_q" in name else cfg.n_kv_heads)
        if quant is not None and w.ndim == 2:
            writer.add_tensor(name, gguf.quants.quantize(w, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_hf_folder(model: Transformer, folder: pathlib.Path) -> None:
    """The model as a Hugging Face LLaMA checkpoint: model.safetensors with HF names, and config.json."""
    cfg = model.config
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm"}  # fmt: skip
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}  # fmt: skip
    tensors = {}
    for name, value in get_state_dict(model).items():
        if name in top:
            tensors[top[name]] = value
        else:
            _, layer, part, kind = name.split(".")
            tensors[f"model.layers.{layer}.{names[part]}.{kind}"] = value
    folder.mkdir(parents=True, exist_ok=True)
    safe_save(tensors, str(folder / "model.safetensors"))
    hf = {"hidden_size": cfg.dim, "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.num_blocks,
          "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "rms_norm_eps": cfg.norm_eps,
          "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta, "max_position_embeddings": 64}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(hf))
    vocab = {t: i for i, t in enumerate(TOKENS[:-2])}
    added = [{"id": BOS, "content": "<s>", "special": True}, {"id": EOS, "content": "</s>", "special": True}]
    model_json = {"type": "BPE", "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]}
    pre = {"type": "Split", "pattern": {"Regex": "\\\\p{N}{1,3}"}}
    (folder / "tokenizer.json").write_text(
        json.dumps({"model": model_json, "added_tokens": added, "pre_tokenizer": pre})
    )
