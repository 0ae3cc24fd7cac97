"""SmolLM2 state-dict converters (pure: dict in, dict out)."""

from ftune.models._converter import llama_style_converter

CONVERTER = llama_style_converter("smollm2")

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
