"""Tiny llama GGUF files written with gguf's own writer, so every number is known: a seeded tiny
transformers model, its tensors under llama.cpp's names and q/k row order, its tokenizer (a byte-level
BPE with ChatML specials) and metadata. Used by tests/checkpointing/test_gguf.py and the docs' workspace.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

Q = gguf.GGMLQuantizationType


def _llama_cpp_order(num_heads: int, head_dim: int) -> list[int]:
    # Row 2j + s of a head in the file is HF row s * head_dim/2 + j of that head.
    half = head_dim // 2
    return [h * head_dim + s * half + j for h in range(num_heads) for j in range(half) for s in range(2)]


def _byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes (the alphabet of a byte-level BPE vocabulary)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in keep:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ c", "a t", "Ġc at"]
# Last: a control token spelled outside the byte alphabet (as DeepSeek's are) and a user-defined one.
TOKENS = (
    SPECIALS + _byte_alphabet() + ["Ġt", "he", "Ġthe", "Ġc", "at", "Ġcat", "<｜end▁of▁turn｜>", "<think>"]
)
TOKEN_TYPES = [3] * len(SPECIALS) + [1] * (len(TOKENS) - len(SPECIALS) - 2) + [3, 4]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
SIZES = {"hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "layers": 2, "ctx": 256}


def _tiny_hf_model(tied: bool, rope_theta: float = 10_000.0, rope_scaling: dict | None = None):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        rope_scaling=rope_scaling,
        vocab_size=len(TOKENS),
        hidden_size=SIZES["hidden"],
        intermediate_size=SIZES["ffn"],
        num_hidden_layers=SIZES["layers"],
        num_attention_heads=SIZES["heads"],
        num_key_value_heads=SIZES["kv_heads"],
        max_position_embeddings=SIZES["ctx"],
        rms_norm_eps=1e-5,
        rope_theta=rope_theta,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so a dropped or swapped norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


_GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_tensors(model) -> dict[str, torch.Tensor]:
    """The model's weights under llama.cpp's names and q/k row order."""
    head_dim = SIZES["hidden"] // SIZES["heads"]
    out = {}
    for key, value in model.state_dict().items():
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if key.startswith("model.layers."):
            _, _, layer, *rest = key.split(".")
            kind = _GGUF_NAMES[".".join(rest[:-1])]
            heads = {"attn_q": SIZES["heads"], "attn_k": SIZES["kv_heads"]}.get(kind)
            if heads:
                value = value[_llama_cpp_order(heads, head_dim)]
            out[f"blk.{layer}.{kind}.weight"] = value
        else:
            names = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
            }
            out[names.get(key, "output.weight")] = value
    return out


def write_tiny_gguf(
    path: Path,
    *,
    model=None,
    qtype: Q = Q.F32,
    arch: str = "llama",
    rope_theta: float = 10_000.0,
    drop: tuple[str, ...] = (),
    meta: dict | None = None,
    extra: dict[str, np.ndarray] | None = None,
) -> Path:
    """A llama GGUF as llama.cpp's converter lays it out: metadata, byte-level vocab, permuted q/k."""
    model = model if model is not None else _tiny_hf_model(tied=False)
    writer = gguf.GGUFWriter(path, arch)
    values = {
        "block_count": SIZES["layers"],
        "context_length": SIZES["ctx"],
        "embedding_length": SIZES["hidden"],
        "feed_forward_length": SIZES["ffn"],
        "attention.head_count": SIZES["heads"],
        "attention.head_count_kv": SIZES["kv_heads"],
        "rope.dimension_count": SIZES["hidden"] // SIZES["heads"],
    }
    for key, value in values.items():
        if key not in drop:
            writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.rope.freq_base", rope_theta)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_types(TOKEN_TYPES)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    for key, value in (meta or {}).items():
        writer.add_string(key, value) if isinstance(value, str) else writer.add_uint32(key, value)
    for name, value in _gguf_tensors(model).items():
        array = value.detach().float().numpy()
        if array.ndim == 1 or qtype == Q.F32:
            writer.add_tensor(name, array)
        elif qtype == Q.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    for name, array in (extra or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
