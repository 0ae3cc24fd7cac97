"""Gemma state-dict converters (pure: dict in, dict out): GemmaForCausalLM has the llama-style keys."""

from ftune.models._converter import llama_style_converter

CONVERTER = llama_style_converter("gemma")

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
