"""Hugging Face `transformers` <-> ftune key tables for the llama-style families.

ftune's module names were chosen to equal HF's (q_proj, gate_proj, ...) and ftune's RoPE uses
HF's rotate_half layout, so this conversion is a pure rename: tensors pass through untouched.
"""

import torch

from ftune.models._key_rename import StateDict, invert, rename_key

_BASE: dict[str, str] = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.mlp_norm.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attn.q_proj.weight",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attn.k_proj.weight",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attn.v_proj.weight",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attn.o_proj.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.mlp.gate_proj.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.mlp.up_proj.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.mlp.down_proj.weight",
}
_QKV_BIAS: dict[str, str] = {
    f"model.layers.{{}}.self_attn.{p}_proj.bias": f"layers.{{}}.attn.{p}_proj.bias" for p in "qkv"
}

# Keys that older transformers versions saved and that carry no learned state.
HF_IGNORED: frozenset[str] = frozenset({"model.layers.{}.self_attn.rotary_emb.inv_freq"})


def hf_table(*, qkv_bias: bool) -> dict[str, str]:
    """HF pattern -> ftune pattern for a llama-style family, with or without q/k/v biases."""
    return {**_BASE, **_QKV_BIAS} if qkv_bias else dict(_BASE)


def _aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if `a` and `b` are views of the same memory (a tied weight seen twice)."""
    if a is b:
        return True
    if a.is_meta or b.is_meta or a.shape != b.shape or a.device != b.device:
        return False
    return a.data_ptr() == b.data_ptr()


def is_tied_copy(sd: StateDict, key: str, tie_word_embeddings: bool | None) -> bool:
    """Whether `key` of the HF state dict `sd` is a tied model's `lm_head.weight`, which reading drops:
    when asked to (True), or (None) when it is the very memory of `model.embed_tokens.weight`."""
    if key != "lm_head.weight":
        return False
    if tie_word_embeddings is not None:
        return bool(tie_word_embeddings)
    embed = sd.get("model.embed_tokens.weight")
    return embed is not None and _aliases(sd[key], embed)


def hf_to_ftune(
    sd: StateDict, *, family: str, qkv_bias: bool, tie_word_embeddings: bool | None = None
) -> StateDict:
    """Rename an HF state dict to ftune keys (pure: no copies, no casts, input untouched).

    Args:
        sd: HF state dict (`model.layers.0.self_attn.q_proj.weight`, ...).
        family: model family, for error messages.
        qkv_bias: whether the family has q/k/v biases.
        tie_word_embeddings: True drops `lm_head.weight` (a tied model's duplicate of the
            embeddings); False keeps it as `output.weight`; None (default) drops it only when it
            is the very same memory as `model.embed_tokens.weight`, as in `model.state_dict()` of
            a tied `transformers` model.

    Returns:
        A new dict with ftune keys and the same tensor objects.

    Raises:
        KeyError: for a key that is neither known nor in `HF_IGNORED`.
    """
    return table_hf_to_ftune(
        sd, family=family, table=hf_table(qkv_bias=qkv_bias), tie_word_embeddings=tie_word_embeddings
    )


def ftune_to_hf(sd: StateDict, *, family: str, qkv_bias: bool) -> StateDict:
    """Rename an ftune state dict to HF keys (pure). A tied model has no `output.weight`, so the
    result has no `lm_head.weight`, exactly like the files `save_pretrained` writes for it.

    Raises:
        KeyError: for a key that is not part of the family's base model (e.g. LoRA weights).
    """
    return table_ftune_to_hf(sd, family=family, table=hf_table(qkv_bias=qkv_bias))


def table_hf_to_ftune(
    sd: StateDict, *, family: str, table: dict[str, str], tie_word_embeddings: bool | None = None
) -> StateDict:
    """`hf_to_ftune` through any pattern table (HF pattern -> ftune pattern): the families whose keys
    are not the llama-style set (`_table_converter`, `_moe_converter`)."""
    out: StateDict = {}
    for key, value in sd.items():
        if is_tied_copy(sd, key, tie_word_embeddings):
            continue
        new_key = rename_key(key, table, HF_IGNORED, family=family, source="HF")
        if new_key is not None:
            out[new_key] = value
    return out


def table_ftune_to_hf(sd: StateDict, *, family: str, table: dict[str, str]) -> StateDict:
    """`ftune_to_hf` through any pattern table (the HF -> ftune one, inverted here)."""
    inverse = invert(table)
    return {rename_key(k, inverse, frozenset(), family=family, source="ftune"): v for k, v in sd.items()}
