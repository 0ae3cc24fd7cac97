"""Qwen3 state-dict converters (pure: dict in, dict out): the llama-style keys plus q/k norms."""

from ftune.models._hf_keys import hf_table
from ftune.models._table_converter import table_converter

HF_TABLE: dict[str, str] = {
    **hf_table(qkv_bias=False),
    "model.layers.{}.self_attn.q_norm.weight": "layers.{}.attn.q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight": "layers.{}.attn.k_norm.weight",
}
CONVERTER = table_converter("qwen3", HF_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
