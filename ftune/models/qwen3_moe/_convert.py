"""Qwen3-MoE state-dict converters (pure: dict in, dict out, input untouched).

Hugging Face checkpoints store each expert's projections apart, as the hub's files and
transformers 5's `save_pretrained` write them; transformers 5 fuses them in memory, and so does
ftune (`ftune.modules.moe_experts.GroupedExperts`):

    HF (files)                                         ftune
    model.layers.{L}.mlp.experts.{e}.gate_proj.weight  layers.{L}.mlp.experts.gate_up_proj[e, :I]
    model.layers.{L}.mlp.experts.{e}.up_proj.weight    layers.{L}.mlp.experts.gate_up_proj[e, I:]
    model.layers.{L}.mlp.experts.{e}.down_proj.weight  layers.{L}.mlp.experts.down_proj[e]
    model.layers.{L}.mlp.gate.weight                   layers.{L}.mlp.gate.weight (the router)

Reading stacks the experts (a copy, one layer at a time); writing hands out views of the stacked
tensors (no copy). The fused in-memory names (`mlp.experts.gate_up_proj`, saved by transformers
with `save_original_format=False`) are read as a rename. Every other key is Qwen3's.
"""

from ftune.models._expert_keys import ExpertLayout
from ftune.models._hf_keys import hf_table
from ftune.models._moe_converter import moe_converter

FAMILY = "qwen3_moe"
HF_TABLE: dict[str, str] = {
    **hf_table(qkv_bias=False),
    "model.layers.{}.self_attn.q_norm.weight": "layers.{}.attn.q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight": "layers.{}.attn.k_norm.weight",
    "model.layers.{}.mlp.gate.weight": "layers.{}.mlp.gate.weight",
    "model.layers.{}.mlp.experts.gate_up_proj": "layers.{}.mlp.experts.gate_up_proj",
    "model.layers.{}.mlp.experts.down_proj": "layers.{}.mlp.experts.down_proj",
}
_EXPERTS = ExpertLayout(FAMILY, "model.layers.{layer}.mlp.experts.", ("gate_proj", "up_proj", "down_proj"))

CONVERTER = moe_converter(_EXPERTS, HF_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
