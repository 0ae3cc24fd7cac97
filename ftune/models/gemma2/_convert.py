"""Gemma 2 state-dict converters (pure: dict in, dict out).

The four norms a layer take HF names that differ from the llama-style ones
(`post_attention_layernorm` is the norm *on* the attention output, ftune `post_attn_norm`; the norm
before the feed-forward is `pre_feedforward_layernorm`, ftune `mlp_norm`). Gemma 3's table is this
one plus its q/k norms.
"""

from ftune.models._hf_keys import hf_table
from ftune.models._table_converter import table_converter

HF_TABLE: dict[str, str] = {
    # The llama-style keys but its two norms a layer (Gemma's names them differently), then Gemma's four.
    **{k: v for k, v in hf_table(qkv_bias=False).items() if "layernorm" not in k},
    "model.layers.{}.input_layernorm.weight": "layers.{}.attn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.post_attn_norm.weight",
    "model.layers.{}.pre_feedforward_layernorm.weight": "layers.{}.mlp_norm.weight",
    "model.layers.{}.post_feedforward_layernorm.weight": "layers.{}.post_mlp_norm.weight",
}
CONVERTER = table_converter("gemma2", HF_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
