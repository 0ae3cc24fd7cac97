"""Llama 3.2 state-dict converters (pure: dict in, dict out).

Meta consolidated.pth checkpoints convert with `meta_to_ftune(sd, num_heads=..., num_kv_heads=...)`
and back with `ftune_to_meta` (q/k rows permuted between Meta's and HF's RoPE layouts).
The models tie their embeddings: Meta's `output.weight` is skipped on the way in and
written (the embedding tensor) on the way out.
"""

from ftune.models._converter import llama_style_converter

CONVERTER = llama_style_converter("llama3_2", meta=True, meta_tied=True)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
meta_to_ftune = CONVERTER.meta_to_ftune
ftune_to_meta = CONVERTER.ftune_to_meta
