"""Phi-3 state-dict converters (pure: dict in, dict out): HF's fused `qkv_proj` and `gate_up_proj`
split into ftune's q/k/v and gate/up projections, and fused back.

HF's `qkv_proj.weight` is ``[q; k; v]`` stacked by rows (``num_heads * head_dim`` rows of queries, then
``num_kv_heads * head_dim`` each of keys and values); the query rows are read from `o_proj.weight`'s
columns, so the split needs no config. `gate_up_proj.weight` is ``[gate; up]``, two equal halves.
Splitting takes row slices and fusing concatenates them: values pass bit for bit.
"""

from __future__ import annotations

from functools import partial

import torch

from ftune.models._converter import Converter
from ftune.models._hf_keys import HF_IGNORED, is_tied_copy
from ftune.models._key_rename import StateDict, invert, key_pattern, rename_key

_ATTN = "model.layers.{}.self_attn."
_MLP = "model.layers.{}.mlp."
# The keys that are a pure rename (HF pattern -> ftune pattern).
_RENAMED: dict[str, str] = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.mlp_norm.weight",
    _ATTN + "o_proj.weight": "layers.{}.attn.o_proj.weight",
    _MLP + "down_proj.weight": "layers.{}.mlp.down_proj.weight",
}
# Fused HF pattern -> the ftune patterns of its parts, in row order.
_FUSED: dict[str, tuple[str, ...]] = {
    _ATTN + "qkv_proj.weight": tuple(f"layers.{{}}.attn.{p}_proj.weight" for p in "qkv"),
    _MLP + "gate_up_proj.weight": ("layers.{}.mlp.gate_proj.weight", "layers.{}.mlp.up_proj.weight"),
}
_PART_OF = {part: (fused, i) for fused, parts in _FUSED.items() for i, part in enumerate(parts)}


def _split(sd: StateDict, key: str, pattern: str, index: str, family: str) -> list[torch.Tensor]:
    fused = sd[key]
    if pattern.endswith("gate_up_proj.weight"):
        if fused.shape[0] % 2:
            raise ValueError(
                f"{family}: {key} has {fused.shape[0]} rows; gate_up_proj stacks two equal halves."
            )
        return list(fused.split(fused.shape[0] // 2))
    o_proj = sd.get(_ATTN.replace("{}", index) + "o_proj.weight")
    if o_proj is None:
        raise KeyError(
            f"{family}: {key} needs {_ATTN.replace('{}', index)}o_proj.weight in the same state dict "
            "(its columns give the number of query rows of the fused projection)."
        )
    q_rows = o_proj.shape[1]
    kv_rows, odd = divmod(fused.shape[0] - q_rows, 2)
    if odd or kv_rows <= 0:
        raise ValueError(
            f"{family}: {key} has {fused.shape[0]} rows, which is not {q_rows} query rows (o_proj's columns) "
            "plus two equal key and value blocks."
        )
    return list(fused.split([q_rows, kv_rows, kv_rows]))


def hf_to_ftune(sd: StateDict, *, family: str, tie_word_embeddings: bool | None = None) -> StateDict:
    """HF Phi-3 keys -> ftune keys, the fused projections split into row slices (views, no copies).

    Args:
        sd: HF state dict (`model.layers.0.self_attn.qkv_proj.weight`, ...).
        family: family name, for messages.
        tie_word_embeddings: as for the llama-style converters: True drops `lm_head.weight`, None
            drops it only when it is the embeddings' own memory.

    Raises:
        KeyError: an unknown key, or a qkv_proj without its layer's o_proj.
        ValueError: a fused weight whose rows do not split.
    """
    out: StateDict = {}
    for key, value in sd.items():
        if is_tied_copy(sd, key, tie_word_embeddings):
            continue
        pattern, index = key_pattern(key)
        if pattern in _FUSED:
            for part, tensor in zip(_FUSED[pattern], _split(sd, key, pattern, index, family), strict=True):
                out[part.replace("{}", index)] = tensor
            continue
        new_key = rename_key(
            key, {**_RENAMED, **{p: p for p in _FUSED}}, HF_IGNORED, family=family, source="HF"
        )
        if new_key is not None:
            out[new_key] = value
    return out


def ftune_to_hf(sd: StateDict, *, family: str) -> StateDict:
    """ftune keys -> HF Phi-3 keys, q/k/v and gate/up concatenated into the fused weights (new tensors).

    Raises:
        KeyError: an unknown key (e.g. LoRA weights), or a layer missing one part of a fused weight.
    """
    renamed = invert(_RENAMED)
    out: StateDict = {}
    parts: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    for key, value in sd.items():
        pattern, index = key_pattern(key)
        if pattern in _PART_OF:
            fused, i = _PART_OF[pattern]
            parts.setdefault((fused, index), {})[i] = value
            out.setdefault(fused.replace("{}", index), value)  # keeps the input's key order
            continue
        known = {**renamed, **{p: p for p in _PART_OF}}
        out[rename_key(key, known, frozenset(), family=family, source="ftune")] = value
    for (fused, index), got in parts.items():
        names = _FUSED[fused]
        if len(got) != len(names):
            missing = [n.replace("{}", index) for i, n in enumerate(names) if i not in got]
            raise KeyError(
                f"{family}: {fused.replace('{}', index)} is fused from {missing} too, which are missing. "
                "A LoRA adapter on part of a fused projection (q_proj, k_proj, v_proj; gate_proj, up_proj) has "
                "no PEFT layout in ftune yet: target o_proj and down_proj only, or merge the adapters into "
                "the model before saving it in HF format."
            )
        out[fused.replace("{}", index)] = torch.cat([got[i] for i in range(len(names))])
    return out


def fused_converter(family: str) -> Converter:
    """The Converter of a Phi3ForCausalLM family (phi3, phi4): HF only, no Meta format."""
    return Converter(
        family=family,
        hf_to_ftune=partial(hf_to_ftune, family=family),
        ftune_to_hf=partial(ftune_to_hf, family=family),
        hf_ignored=HF_IGNORED,
        fused_modules={
            k.removesuffix(".weight"): tuple(p.removesuffix(".weight") for p in v) for k, v in _FUSED.items()
        },
    )


CONVERTER = fused_converter("phi3")
