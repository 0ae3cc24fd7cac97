"""GGUF export, model metadata: the `<arch>.*` hyper-parameters llama.cpp reads, from an HF config.json.

    arch = ARCHITECTURES["qwen2_5"]                             # "qwen2"
    extra = write_hparams(writer, "llama3_1", config, source=folder)   # {"rope_freqs.weight": ...}

The keys and values are those llama.cpp's `convert_hf_to_gguf.py` writes for each architecture
(Mistral and Mixtral are llama files there too). The sizes come from `ftune.models.builder_kwargs`,
the one reading of config.json that ftune's model builders use, so a file describes the model ftune
trained. What llama.cpp cannot represent is refused with the reason, never written approximately: a
Gemma 3 or Gemma 2 whose layers do not follow llama.cpp's fixed local/global pattern or whose query
scale llama.cpp does not derive, a Gemma 3 local RoPE base other than 10000, a Gemma 2 without
soft-caps, a Qwen3-MoE routed otherwise than llama.cpp's qwen3moe graph routes.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import gguf
import torch

from ftune.checkpointing.gguf.gemma3 import LOCAL_ROPE_BASE, SLIDING_WINDOW_PATTERN
from ftune.checkpointing.gguf.reader import llama3_rope_factors
from ftune.models import builder_kwargs

logger = logging.getLogger(__name__)

# ftune family -> llama.cpp architecture (`general.architecture`).
ARCHITECTURES: dict[str, str] = {
    "llama2": "llama",
    "llama3": "llama",
    "llama3_1": "llama",
    "llama3_2": "llama",
    "smollm2": "llama",
    "code_llama2": "llama",
    "mistral": "llama",
    "mixtral": "llama",  # llama.cpp runs Mixtral as a llama model with stacked experts
    "qwen2": "qwen2",
    "qwen2_5": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "phi3": "phi3",
    "phi4": "phi3",  # Phi-4 is a Phi3ForCausalLM
}
# Families whose window llama.cpp does not apply (it attends to the whole context).
_WINDOW_IGNORED = ("mistral", "mixtral", "phi3", "phi4")


def architecture(family: str) -> str:
    """llama.cpp's architecture for an ftune family, or a ValueError listing the exportable ones."""
    if family not in ARCHITECTURES:
        raise ValueError(
            f"model family {family!r} has no llama.cpp architecture ftune can write. Exportable families: "
            f"{', '.join(ARCHITECTURES)}."
        )
    return ARCHITECTURES[family]


def write_hparams(
    writer: gguf.GGUFWriter, family: str, config: dict[str, Any], *, source: str | os.PathLike
) -> dict[str, torch.Tensor]:
    """Write the architecture's hyper-parameters; return the extra tensors they need (rope_freqs).

    Args:
        writer: the open writer (its `arch` is `architecture(family)`).
        family: the ftune family.
        config: the text model's config.json.
        source: the folder, for messages.

    Raises:
        ValueError: an option llama.cpp cannot run as ftune does, with what to change.
    """
    kw = builder_kwargs(config, family)
    heads, hidden = kw["num_heads"], kw["embed_dim"]
    head_dim = kw.get("head_dim") or hidden // heads
    writer.add_context_length(int(kw["max_seq_len"]))
    writer.add_embedding_length(int(hidden))
    writer.add_block_count(int(kw["num_layers"]))
    writer.add_feed_forward_length(int(kw["intermediate_dim"]))
    writer.add_head_count(int(heads))
    writer.add_head_count_kv(int(kw["num_kv_heads"]))
    writer.add_rope_freq_base(float(kw.get("rope_base", 10_000.0)))
    writer.add_layer_norm_rms_eps(float(kw.get("norm_eps", 1e-6 if "gemma" in family else 1e-5)))
    if family == "gemma3":
        _gemma3(writer, kw, head_dim, source)
        return {}
    if family == "gemma2":
        _gemma2(writer, kw, head_dim, source)
        return {}
    if family in ("qwen3", "qwen3_moe", "gemma") or head_dim != hidden // heads:
        writer.add_key_length(int(head_dim))
        writer.add_value_length(int(head_dim))
    if family in _WINDOW_IGNORED and (window := kw.get("sliding_window")) and window < kw["max_seq_len"]:
        logger.warning(
            "%s: sliding_window=%d; llama.cpp runs %s with full causal attention, which matches ftune only "
            "for contexts of at most %d tokens",
            source, window, family, window,
        )  # fmt: skip
    if "num_experts" in kw:
        write_experts(writer, family, kw, source)
    if architecture(family) == "phi3":
        # llama.cpp's converter writes the window, but llama.cpp's phi3 graph does not apply it.
        writer.add_rope_dimension_count(int(head_dim))
        writer.add_rope_scaling_orig_ctx_len(int(kw["max_seq_len"]))
        writer.add_sliding_window(int(kw.get("sliding_window") or 0))
        return {}
    if architecture(family) != "llama":
        return {}
    writer.add_vocab_size(int(kw["vocab_size"]))
    writer.add_rope_dimension_count(int(head_dim))
    if "scale_factor" not in kw:
        return {}
    # Llama 3.1/3.2 scaling: llama.cpp reads per-frequency divisors from a tensor, not metadata.
    factors = llama3_rope_factors(
        float(kw.get("rope_base", 10_000.0)),
        int(head_dim),
        float(kw["scale_factor"]),
        low_freq_factor=kw["low_freq_factor"],
        high_freq_factor=kw["high_freq_factor"],
        original_max_position_embeddings=kw["original_max_seq_len"],
    )
    return {"rope_freqs.weight": factors}


def write_experts(writer: gguf.GGUFWriter, family: str, kw: dict[str, Any], source: Any) -> None:
    """The expert counts of a mixture-of-experts model, or a ValueError where llama.cpp routes otherwise.

    llama.cpp's qwen3moe graph renormalises the top-k router weights and makes every layer sparse;
    Mixtral always renormalises.
    """
    problems = []
    if family == "qwen3_moe":
        if not kw["norm_topk_prob"]:
            problems.append("norm_topk_prob is false (llama.cpp always renormalises the top-k weights)")
        if kw["mlp_only_layers"] or kw["decoder_sparse_step"] != 1:
            problems.append(
                f"mlp_only_layers={list(kw['mlp_only_layers'])}, decoder_sparse_step={kw['decoder_sparse_step']} "
                "(llama.cpp makes every layer a mixture of experts)"
            )
    if problems:
        raise ValueError(
            f"{source}: this {family} model cannot run in llama.cpp as ftune runs it: {'; '.join(problems)}. "
            "Accepted: the published Qwen3 MoE layouts (norm_topk_prob true, every layer sparse)."
        )
    writer.add_expert_count(int(kw["num_experts"]))
    writer.add_expert_used_count(int(kw["top_k"]))
    if "moe_intermediate_dim" in kw:
        writer.add_expert_feed_forward_length(int(kw["moe_intermediate_dim"]))


def _gemma2(writer: gguf.GGUFWriter, kw: dict[str, Any], head_dim: int, source: Any) -> None:
    """Gemma 2: llama.cpp alternates local and global layers (local first) and scales queries by
    1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 46-layer 27B."""
    layers = int(kw["num_layers"])
    expected = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    problems = []
    if (given := list(kw.get("layer_types") or expected)) != expected:
        problems.append(
            f"layer_types {given} is not llama.cpp's Gemma 2 pattern (local, global, ...): {expected}"
        )
    scale = kw["embed_dim"] // kw["num_heads"] if layers == 46 else head_dim
    if kw["query_pre_attn_scalar"] != scale:
        problems.append(
            f"query_pre_attn_scalar is {kw['query_pre_attn_scalar']}, llama.cpp derives {scale} for this shape"
        )
    for cap in ("attn_logit_softcap", "final_logit_softcap"):
        if kw.get(cap) is None:  # llama.cpp's Gemma 2 graph caps anyway, at its defaults 50 and 30
            problems.append(f"{cap.replace('cap', 'capping')} is null (llama.cpp always caps Gemma 2)")
    if problems:
        raise ValueError(
            f"{source}: this Gemma 2 model cannot run in llama.cpp as ftune runs it: {'; '.join(problems)}. "
            "Accepted: the published Gemma 2 layouts (2B, 9B, 27B and their fine-tunes)."
        )
    writer.add_key_length(int(head_dim))
    writer.add_value_length(int(head_dim))
    writer.add_sliding_window(int(kw["sliding_window"]))
    writer.add_attn_logit_softcapping(float(kw["attn_logit_softcap"]))
    writer.add_final_logit_softcapping(float(kw["final_logit_softcap"]))


def _gemma3(writer: gguf.GGUFWriter, kw: dict[str, Any], head_dim: int, source: Any) -> None:
    layers = int(kw["num_layers"])
    expected = [
        "full_attention" if (i + 1) % SLIDING_WINDOW_PATTERN == 0 else "sliding_attention"
        for i in range(layers)
    ]
    given = kw.get("layer_types") or [
        "full_attention" if (i + 1) % kw["sliding_window_pattern"] == 0 else "sliding_attention"
        for i in range(layers)
    ]
    problems = []
    if list(given) != expected:
        problems.append(
            f"layer_types {given} is not llama.cpp's fixed Gemma 3 pattern (every {SLIDING_WINDOW_PATTERN}th "
            f"layer global): {expected}"
        )
    if float(kw["local_rope_base"]) != LOCAL_ROPE_BASE:
        problems.append(f"the local RoPE base is {kw['local_rope_base']}, llama.cpp fixes {LOCAL_ROPE_BASE}")
    scale = kw["embed_dim"] // kw["num_heads"] if kw["embed_dim"] == 5376 else head_dim
    if kw["query_pre_attn_scalar"] != scale:
        problems.append(
            f"query_pre_attn_scalar is {kw['query_pre_attn_scalar']}, llama.cpp derives {scale} for this shape"
        )
    if problems:
        raise ValueError(
            f"{source}: this Gemma 3 model cannot run in llama.cpp as ftune runs it: {'; '.join(problems)}. "
            "Accepted: the published Gemma 3 layouts (270M, 1B, 4B, 12B, 27B and their fine-tunes)."
        )
    writer.add_key_length(int(head_dim))
    writer.add_value_length(int(head_dim))
    writer.add_sliding_window(int(kw["sliding_window"]))
    if kw.get("rope_scaling_factor") is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(kw["rope_scaling_factor"]))
