"""Gemma 3 (text) state-dict converters (pure: dict in, dict out).

Gemma 2's table (its four norms a layer under their HF names: `post_attention_layernorm` is the
norm *on* the attention output, ftune `post_attn_norm`; the norm before the feed-forward is
`pre_feedforward_layernorm`, ftune `mlp_norm`) plus the q/k norms Gemma 3 added.
"""

from ftune.models._table_converter import table_converter
from ftune.models.gemma2._convert import HF_TABLE as GEMMA2_TABLE

HF_TABLE: dict[str, str] = {
    **GEMMA2_TABLE,
    "model.layers.{}.self_attn.q_norm.weight": "layers.{}.attn.q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight": "layers.{}.attn.k_norm.weight",
}
CONVERTER = table_converter("gemma3", HF_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
