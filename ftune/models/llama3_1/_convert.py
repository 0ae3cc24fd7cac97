"""Llama 3.1 state-dict converters (pure: dict in, dict out).

Meta consolidated.pth checkpoints convert with `meta_to_ftune(sd, num_heads=..., num_kv_heads=...)`
and back with `ftune_to_meta` (q/k rows permuted between Meta's and HF's RoPE layouts).
"""

from ftune.models._converter import llama_style_converter

CONVERTER = llama_style_converter("llama3_1", meta=True)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
meta_to_ftune = CONVERTER.meta_to_ftune
ftune_to_meta = CONVERTER.ftune_to_meta
