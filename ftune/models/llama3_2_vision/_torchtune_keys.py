"""Llama 3.2 Vision weights in torchtune 0.6.1's own names (its `FullModelTorchTuneCheckpointer` files,
`DeepFusionModel` state dicts) <-> ftune's; pure functions, dict in, dict out.

torchtune's model differs from transformers' in four ways this undoes (the names are those of its
`llama3_2_vision/_convert_weights.py`):
- its decoder wraps each cross-attention layer with the self-attention layer after it
  (`decoder.layers.{j}.fusion_layer.*` and `decoder.layers.{j}.*`), so its layer j is transformers'
  layer j + (cross-attention layers before it), and + 1 more for the wrapped self-attention part;
- the self-attention q/k rows are in the interleaved RoPE order (Meta's);
- the 8 embedding rows past the vocabulary are `decoder.tok_embeddings.fusion_embedding.weight`;
- the tile embeddings are a grid (max_tiles, max_tiles, tokens, width) indexed by tile row and column,
  where transformers (and ftune) keep one row per tile arrangement: arrangement (h, w) reads the grid's
  top-left h x w cells, row by row (id 0, no image, is zeros).
"""

from __future__ import annotations

import torch

from ftune.models._key_rename import StateDict, invert, rename_key
from ftune.models._meta_keys import from_meta_qk, to_meta_qk
from ftune.models.llama3_2_vision._convert import FAMILY
from ftune.models.llama3_2_vision._hf_config import VISION_DEFAULTS

_NORM = ("weight", "bias")
_TEXT_MLP = {
    "mlp.w1.weight": "mlp.gate_proj.weight",
    "mlp.w3.weight": "mlp.up_proj.weight",
    "mlp.w2.weight": "mlp.down_proj.weight",
}
# torchtune suffix under decoder.layers.{j}. -> ftune suffix under decoder.layers.{i}.
SELF_LAYER: dict[str, str] = {
    **{f"attn.{p}_proj.weight": f"attn.{p}_proj.weight" for p in "qkv"},
    "attn.output_proj.weight": "attn.o_proj.weight",
    "sa_norm.scale": "attn_norm.weight",
    "mlp_norm.scale": "mlp_norm.weight",
    **_TEXT_MLP,
}
FUSION_LAYER: dict[str, str] = {
    **{f"fusion_layer.attn.{p}_proj.weight": f"cross_attn.{p}_proj.weight" for p in "qkv"},
    "fusion_layer.attn.output_proj.weight": "cross_attn.o_proj.weight",
    "fusion_layer.attn.q_norm.scale": "cross_attn.q_norm.weight",
    "fusion_layer.attn.k_norm.scale": "cross_attn.k_norm.weight",
    "fusion_layer.ca_norm.scale": "attn_norm.weight",
    "fusion_layer.mlp_norm.scale": "mlp_norm.weight",
    "fusion_layer.ca_scale.scale": "attn_gate",
    "fusion_layer.mlp_scale.scale": "mlp_gate",
    **{f"fusion_layer.{k}": v for k, v in _TEXT_MLP.items()},
}
_VISION_LAYER = {
    **{f"attn.{p}_proj.weight": f"self_attn.{p}_proj.weight" for p in "qkv"},
    "attn.output_proj.weight": "self_attn.o_proj.weight",
    **{f"sa_norm.{k}": f"input_layernorm.{k}" for k in _NORM},
    **{f"mlp_norm.{k}": f"post_attention_layernorm.{k}" for k in _NORM},
    **{f"mlp.w1.{k}": f"mlp.fc1.{k}" for k in _NORM},
    **{f"mlp.w2.{k}": f"mlp.fc2.{k}" for k in _NORM},
}
_CLIP = "encoder.clip."
_TILES = {  # torchtune grid -> ftune per-arrangement table
    _CLIP
    + "token_pos_embedding.global_token_positional_embedding": "vision_encoder.gated_positional_embedding.tile_embedding.weight",
    _CLIP + "pre_tile_pos_embed.embedding": "vision_encoder.pre_tile_positional_embedding.embedding.weight",
    _CLIP + "post_tile_pos_embed.embedding": "vision_encoder.post_tile_positional_embedding.embedding.weight",
}
# torchtune pattern -> ftune pattern, every key outside the decoder's layers.
TABLE: dict[str, str] = {
    "decoder.norm.scale": "decoder.norm.weight",
    "decoder.output.weight": "decoder.output.weight",
    _CLIP + "conv.weight": "vision_encoder.patch_embedding.weight",
    _CLIP + "cls_token_embedding.weight": "vision_encoder.class_embedding",
    _CLIP
    + "token_pos_embedding.local_token_positional_embedding": "vision_encoder.gated_positional_embedding.embedding",
    _CLIP + "token_pos_embedding.gate": "vision_encoder.gated_positional_embedding.gate",
    _CLIP + "pre_tile_pos_embed.gate": "vision_encoder.pre_tile_positional_embedding.gate",
    _CLIP + "post_tile_pos_embed.gate": "vision_encoder.post_tile_positional_embedding.gate",
    **{_CLIP + f"ln_{w}.{k}": f"vision_encoder.layernorm_{w}.{k}" for w in ("pre", "post") for k in _NORM},
    **{
        _CLIP + f"layers.{{}}.{k}": f"vision_encoder.transformer.layers.{{}}.{v}"
        for k, v in _VISION_LAYER.items()
    },
    **{
        f"encoder.projection.layers.{{}}.{k}": f"vision_encoder.global_transformer.layers.{{}}.{v}"
        for k, v in _VISION_LAYER.items()
    },
    "encoder.projection.layers.{}.sa_scale.scale": "vision_encoder.global_transformer.layers.{}.gate_attn",
    "encoder.projection.layers.{}.mlp_scale.scale": "vision_encoder.global_transformer.layers.{}.gate_ffn",
    "encoder.projection.output.weight": "projector.proj.weight",
    "encoder.projection.output.bias": "projector.proj.bias",
    **_TILES,
}
_INVERSE, _SELF_INVERSE, _FUSION_INVERSE = invert(TABLE), invert(SELF_LAYER), invert(FUSION_LAYER)
_EMBED, _FUSION_EMBED = "decoder.tok_embeddings.weight", "decoder.tok_embeddings.fusion_embedding.weight"
_LAYERS = "decoder.layers."
_QK = ("attn.q_proj.weight", "attn.k_proj.weight")


def _ratios(max_num_tiles: int) -> list[tuple[int, int]]:
    """The tile arrangements of transformers' config, in id order (ids 1..n)."""
    if max_num_tiles == VISION_DEFAULTS["max_num_tiles"]:
        return [tuple(r) for r in VISION_DEFAULTS["supported_aspect_ratios"]]
    n = max_num_tiles
    return [(a, b) for a in range(1, n + 1) for b in range(1, n + 1) if a * b <= n]


def _grid_to_table(grid: torch.Tensor, ratios: list[tuple[int, int]]) -> torch.Tensor:
    """(T, T, n, d) -> (len(ratios) + 1, T * n * d): arrangement (h, w)'s row holds the grid's h x w cells."""
    tiles, _, n, d = grid.shape
    table = grid.new_zeros(len(ratios) + 1, tiles, n, d)
    for i, (h, w) in enumerate(ratios):
        table[i + 1, : h * w] = grid[:h, :w].reshape(h * w, n, d)
    return table.flatten(1)


def _table_to_grid(table: torch.Tensor, ratios: list[tuple[int, int]], tiles: int, dim: int) -> torch.Tensor:
    """Inverse of `_grid_to_table` for a table it wrote: the cells of the arrangements that fill every tile."""
    n = table.shape[1] // (tiles * dim)
    grid = table.new_zeros(tiles, tiles, n, dim)
    for i, (h, w) in enumerate(ratios):
        if h * w == tiles:
            grid[:h, :w] = table[i + 1].view(tiles, n, dim)[: h * w].view(h, w, n, dim)
    return grid


def _unknown(key: str, source: str, known: list[str]) -> KeyError:
    return KeyError(
        f"{FAMILY}: unknown key {key!r} in a {source} state dict; its decoder layers' keys are "
        f"{', '.join(sorted(known))} under decoder.layers.<i>."
    )


def torchtune_to_ftune(
    sd: StateDict,
    *,
    num_heads: int,
    num_kv_heads: int,
    cross_attention_layers: list[int],
    max_num_tiles: int = 4,
) -> StateDict:
    """torchtune's Llama 3.2 Vision state dict -> `CrossAttentionImageTextModel` keys.

    Args:
        sd: torchtune's keys (`decoder.*`, `encoder.clip.*`, `encoder.projection.*`).
        num_heads, num_kv_heads: the decoder's heads (to reorder the self-attention q/k rows).
        cross_attention_layers: transformers' indices of the cross-attention layers (11B: 3, 8, ..., 38).
        max_num_tiles: tiles an image has at most.

    Raises:
        KeyError: a key of no part of the model, naming it and the known patterns.
    """
    tune_cross = [c - k for k, c in enumerate(sorted(cross_attention_layers))]  # torchtune's fusion layers
    ratios = _ratios(max_num_tiles)
    out: StateDict = {}
    for key, value in sd.items():
        if key in (_EMBED, _FUSION_EMBED):
            continue
        if key.startswith(_LAYERS):
            j_text, rest = key[len(_LAYERS) :].split(".", 1)
            j, fusion = int(j_text), rest.startswith("fusion_layer.")
            table = FUSION_LAYER if fusion else SELF_LAYER
            if rest not in table:
                raise _unknown(key, "torchtune", list(SELF_LAYER) + list(FUSION_LAYER))
            i = j + sum(j > c for c in tune_cross) + (j in tune_cross and not fusion)
            if not fusion and rest in _QK:
                value = from_meta_qk(value, num_heads if rest.startswith("attn.q") else num_kv_heads)
            out[f"{_LAYERS}{i}.{table[rest]}"] = value
            continue
        new = rename_key(key, TABLE, frozenset(), family=FAMILY, source="torchtune")
        out[new] = _grid_to_table(value, ratios) if key in _TILES else value
    if _EMBED in sd:
        extra = [sd[_FUSION_EMBED]] if _FUSION_EMBED in sd else []
        out[_EMBED] = torch.cat([sd[_EMBED], *extra])
    return out


def ftune_to_torchtune(
    sd: StateDict, *, num_heads: int, num_kv_heads: int, vocab_size: int, max_num_tiles: int = 4
) -> StateDict:
    """Inverse of `torchtune_to_ftune`; the cross-attention layers are those with `cross_attn.*` keys.

    The tile-embedding tables keep what torchtune's grid holds: the cells of the arrangements that fill
    every tile (for a table `torchtune_to_ftune` wrote, all of it).

    Raises:
        KeyError: a key of no part of the model.
    """
    cross = sorted(
        {int(k[len(_LAYERS) :].split(".", 1)[0]) for k in sd if k.startswith(_LAYERS) and ".cross_attn." in k}
    )
    ratios = _ratios(max_num_tiles)
    out: StateDict = {}
    for key, value in sd.items():
        if key == _EMBED:
            out[_EMBED], out[_FUSION_EMBED] = value[:vocab_size], value[vocab_size:]
            continue
        if key.startswith(_LAYERS):
            i_text, rest = key[len(_LAYERS) :].split(".", 1)
            i = int(i_text)
            table = _FUSION_INVERSE if i in cross else _SELF_INVERSE
            if rest not in table:
                raise _unknown(key, "ftune", list(_SELF_INVERSE) + list(_FUSION_INVERSE))
            if i not in cross and table[rest] in _QK:
                value = to_meta_qk(value, num_heads if rest.startswith("attn.q") else num_kv_heads)
            out[f"{_LAYERS}{i - sum(i > c for c in cross)}.{table[rest]}"] = value
            continue
        new = rename_key(key, _INVERSE, frozenset(), family=FAMILY, source="ftune")
        if new in _TILES:
            dim = sd["vision_encoder.class_embedding"].shape[0]
            value = _table_to_grid(value, ratios, max_num_tiles, dim)
        out[new] = value
    return out
