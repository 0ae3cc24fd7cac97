"""Phi-4: model builder `phi4_14b` (Phi-3's architecture: `ftune.models.phi3.phi3`), converter, tokenizer.

Phi-4 (Microsoft, December 2024) is a Phi3ForCausalLM with GQA (40 query, 10 key/value heads), RoPE
base 250,000, a 16k context, no sliding window, and a tiktoken-style byte-level BPE of 100,352 rows
(cl100k's pieces plus ChatML-like specials `<|im_start|>`, `<|im_sep|>`, `<|im_end|>`).
"""

from ftune.models.phi3._convert import fused_converter
from ftune.models.phi4._model_builders import phi4_14b
from ftune.models.phi4._tokenizer import phi4_tokenizer

CONVERTER = fused_converter("phi4")
hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf

__all__ = ["CONVERTER", "ftune_to_hf", "hf_to_ftune", "phi4_14b", "phi4_tokenizer"]
