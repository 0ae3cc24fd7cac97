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

from ftune.models._converter import Converter
from ftune.models._expert_keys import ExpertLayout
from ftune.models._hf_keys import HF_IGNORED, hf_table
from ftune.models._key_rename import StateDict
from ftune.models._table_converter import _ftune_to_hf, _hf_to_ftune

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


def hf_to_ftune(sd: StateDict, *, tie_word_embeddings: bool | None = None) -> StateDict:
    """HF keys (per-expert or fused experts) -> ftune keys; see the module docstring.

    Raises:
        KeyError: an unknown key, a layer missing some expert's projection, or a layer given both
            per-expert and fused expert weights.
    """
    experts, rest = _EXPERTS.split_hf(sd)
    out = _hf_to_ftune(rest, family=FAMILY, table=HF_TABLE, tie_word_embeddings=tie_word_embeddings)
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
