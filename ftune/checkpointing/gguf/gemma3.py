"""GGUF import of Gemma 3 text models (`general.architecture` "gemma3"), e.g. Gemma 3 270M.

    convert_gguf("gemma-3-270m-q4_k_m.gguf", "checkpoints/gemma-3-270m")   # dispatches here

Differences from the llama files `ftune.checkpointing.gguf.reader` reads, all from llama.cpp's converter:
tensors keep HF's q/k row order (Gemma's RoPE rotates halves in llama.cpp too), every norm weight is
stored as `1 + weight` (llama.cpp's RMSNorm multiplies by the stored value; Gemma's by 1 + weight),
and what llama.cpp fixes in code instead of metadata is rebuilt here the same way: the local RoPE
base (10000), five local layers per global one, and query_pre_attn_scalar (head_dim, except for
the 27B shape, which uses hidden_size / num_heads = 168).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from ftune.checkpointing.gguf.tensors import dequantized_state_dict, gguf_float
from ftune.checkpointing.gguf.tokenizer import generation_config as _generation_config
from ftune.checkpointing.gguf.tokenizer import require, special_token_ids

ARCHITECTURE = "gemma3"
LOCAL_ROPE_BASE = 10_000.0  # llama.cpp: rope_freq_base_train_swa for gemma3
SLIDING_WINDOW_PATTERN = 6  # llama.cpp: set_swa_pattern(6) for gemma3

# Section 3.1 of the Gemma Terms of Use: every distributed copy carries this notice.
NOTICE = "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms\n"

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
END_OF_TURN = "<end_of_turn>"
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.weight")
# Gemma's turn layout (system prompt folded into the first user turn), for files that carry no tokenizer.chat_template (base models).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set system = messages[0]['content'] + '\\n\\n' if messages and messages[0]['role'] == 'system' else '' %}"
    "{% for message in messages if message['role'] != 'system' %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (system if loop.first else '') + message['content'] | trim "
    "+ '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def generation_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """generation_config.json whose stop tokens include `<end_of_turn>`, as Gemma 3's releases list
    them (eos_token_id [1, 106]): a chat turn ends with it, and the file marks only `<eos>`."""
    config = _generation_config(meta)
    tokens = meta.get("tokenizer.ggml.tokens") or []
    if END_OF_TURN in tokens:
        stops = (
            config["eos_token_id"] if isinstance(config["eos_token_id"], list) else [config["eos_token_id"]]
        )
        config["eos_token_id"] = list(
            dict.fromkeys([*(s for s in stops if s is not None), tokens.index(END_OF_TURN)])
        )
    return config


def hf_key(name: str, *, source: Any) -> str:
    """HF Gemma3ForCausalLM key of a GGUF tensor name, e.g. 'blk.0.post_ffw_norm.weight'."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    match = _LAYER_TENSOR.fullmatch(name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise ValueError(
            f"{source}: tensor {name!r} is not part of a Gemma 3 text model. Expected "
            f"{sorted(_GLOBAL_NAMES)} and blk.<N>.<{'|'.join(_LAYER_NAMES)}>.weight."
        )
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"


def hf_config(
    meta: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], *, source: Any
) -> dict[str, Any]:
    """The HF `config.json` (model_type gemma3_text) of a Gemma 3 GGUF, from its metadata and shapes."""

    def get(key: str, default: Any = None) -> Any:
        full = f"{ARCHITECTURE}.{key}"
        return require(meta, full, source) if default is None else meta.get(full, default)

    hidden, num_heads = int(get("embedding_length")), int(get("attention.head_count"))
    head_dim = int(get("attention.key_length"))
    num_layers = int(get("block_count"))
    pattern = int(get("attention.sliding_window_pattern", SLIDING_WINDOW_PATTERN))
    if "token_embd.weight" not in shapes:
        raise ValueError(f"{source}: the file has no tensor 'token_embd.weight' (the token embedding).")
    scaling = meta.get(f"{ARCHITECTURE}.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ValueError(
            f"{source}: GGUF metadata '{ARCHITECTURE}.rope.scaling.type' is {scaling!r}; Gemma 3 uses "
            "'none' (270M, 1B) or 'linear' (4B and larger)."
        )
    special = special_token_ids(meta)
    config: dict[str, Any] = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "vocab_size": shapes["token_embd.weight"][-1],
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": int(get("attention.head_count_kv", num_heads)),
        "head_dim": head_dim,
        "max_position_embeddings": int(get("context_length")),
        "rms_norm_eps": gguf_float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": gguf_float(get("rope.freq_base")),
        "rope_local_base_freq": gguf_float(get("rope.freq_base_swa", LOCAL_ROPE_BASE)),
        "rope_scaling": None
        if scaling == "none"
        else {"rope_type": "linear", "factor": gguf_float(get("rope.scaling.factor"))},
        "sliding_window": int(get("attention.sliding_window")),
        "sliding_window_pattern": pattern,
        "layer_types": [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)
        ],
        "query_pre_attn_scalar": hidden // num_heads if hidden == 5376 else head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "attention_bias": False,
        "tie_word_embeddings": "output.weight" not in shapes,
        "bos_token_id": special.get("bos"),
        "eos_token_id": special.get("eos"),
    }
    if "pad" in special:
        config["pad_token_id"] = special["pad"]
    return config


def read_state_dict(
    tensors: Mapping[str, Any], config: Mapping[str, Any], *, dtype: torch.dtype, source: Any
) -> dict[str, torch.Tensor]:
    """Dequantize every tensor into an HF-keyed state dict; norm weights back from `1 + w` to `w`."""

    def adjust(name: str, value: torch.Tensor) -> torch.Tensor:
        # float32, as transformers' GGUF loader does
        return value - 1.0 if name.endswith("norm.weight") else value

    return dequantized_state_dict(
        tensors,
        config,
        key_of=lambda name: hf_key(name, source=source),
        adjust=adjust,
        layer_names=_LAYER_NAMES.values(),
        global_names=_GLOBAL_NAMES,
        family="Gemma 3",
        dtype=dtype,
        source=source,
    )
