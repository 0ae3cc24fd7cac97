"""Mixtral state-dict converters (pure: dict in, dict out, input untouched).

The hub's files (and what transformers 5's `save_pretrained` writes) keep the names of Mistral's
original release: the MoE block is `block_sparse_moe`, each expert has its own `w1` (gate), `w3`
(up) and `w2` (down). transformers 5 renames the block to `mlp` and fuses the experts in memory,
and so does ftune (`ftune.modules.moe_experts.GroupedExperts`):

    HF (files)                                           ftune
    model.layers.{L}.block_sparse_moe.experts.{e}.w1.weight  layers.{L}.mlp.experts.gate_up_proj[e, :I]
    model.layers.{L}.block_sparse_moe.experts.{e}.w3.weight  layers.{L}.mlp.experts.gate_up_proj[e, I:]
    model.layers.{L}.block_sparse_moe.experts.{e}.w2.weight  layers.{L}.mlp.experts.down_proj[e]
    model.layers.{L}.block_sparse_moe.gate.weight            layers.{L}.mlp.gate.weight (the router)

Reading stacks the experts (a copy, one layer at a time); writing hands out views of the stacked
tensors (no copy). transformers 5's in-memory names (`model.layers.{L}.mlp.gate.weight`,
`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`) are read as renames. Attention, norms and
embeddings are Mistral's.
"""

from ftune.models._converter import Converter
from ftune.models._expert_keys import ExpertLayout
from ftune.models._hf_keys import HF_IGNORED, hf_table
from ftune.models._key_rename import StateDict, key_pattern
from ftune.models._table_converter import _ftune_to_hf, _hf_to_ftune

FAMILY = "mixtral"
# The files' names: Mistral's attention, norms and embeddings (no dense feed-forward) and the router.
HF_TABLE: dict[str, str] = {
    **{k: v for k, v in hf_table(qkv_bias=False).items() if ".mlp." not in k},
    "model.layers.{}.block_sparse_moe.gate.weight": "layers.{}.mlp.gate.weight",
}
# transformers 5's in-memory names, read only.
_LIVE_TABLE: dict[str, str] = {
    "model.layers.{}.mlp.gate.weight": "layers.{}.mlp.gate.weight",
    "model.layers.{}.mlp.experts.gate_up_proj": "layers.{}.mlp.experts.gate_up_proj",
    "model.layers.{}.mlp.experts.down_proj": "layers.{}.mlp.experts.down_proj",
}
_EXPERTS = ExpertLayout(FAMILY, "model.layers.{layer}.block_sparse_moe.experts.", ("w1", "w3", "w2"))


def hf_to_ftune(sd: StateDict, *, tie_word_embeddings: bool | None = None) -> StateDict:
    """HF keys (the files' per-expert layout or transformers 5's fused one) -> ftune keys.

    Raises:
        KeyError: an unknown key, a layer missing some expert's projection, or a tensor given in
            both layouts (per-expert and fused experts, or `block_sparse_moe.gate` and `mlp.gate`).
    """
    experts, rest = _EXPERTS.split_hf(sd)
    table = {**HF_TABLE, **_LIVE_TABLE}
    out = _hf_to_ftune(rest, family=FAMILY, table=table, tie_word_embeddings=tie_word_embeddings)
    targets: dict[str, str] = {}
    for key in rest:
        pattern, index = key_pattern(key)
        if pattern in table and index is not None:
            target = table[pattern].replace("{}", index)
            if target in targets:
                raise KeyError(
                    f"{FAMILY}: {key!r} and {targets[target]!r} both hold {target}; a checkpoint holds "
                    "one layout (the files' block_sparse_moe or transformers' fused mlp). Remove one."
                )
            targets[target] = key
    return _EXPERTS.add_stacked(out, experts)


def ftune_to_hf(sd: StateDict) -> StateDict:
    """ftune keys -> HF keys as the hub's files hold them (one key per expert and projection; views).

    Raises:
        KeyError: a key that is not part of the family's base model (e.g. LoRA weights).
    """
    rest, out = _EXPERTS.split_ftune(sd)
    return {**_ftune_to_hf(rest, family=FAMILY, table=HF_TABLE), **out}


CONVERTER = Converter(
    family=FAMILY,
    hf_to_ftune=hf_to_ftune,
    ftune_to_hf=ftune_to_hf,
    hf_ignored=HF_IGNORED,
)
