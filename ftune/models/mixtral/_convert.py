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

from ftune.models._expert_keys import ExpertLayout
from ftune.models._hf_keys import hf_table
from ftune.models._moe_converter import moe_converter

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

CONVERTER = moe_converter(_EXPERTS, HF_TABLE, read_only=_LIVE_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
