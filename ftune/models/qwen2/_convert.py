"""Qwen2 state-dict converters (pure: dict in, dict out): Hugging Face's Qwen2ForCausalLM keys."""

from ftune.models._converter import llama_style_converter

CONVERTER = llama_style_converter("qwen2", qkv_bias=True)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
