"""Code Llama (Meta, 2023): Llama 2's architecture trained on code, with RoPE base 1,000,000 and a 16k
context; 7B, 13B and 70B add 16 tokens (infilling) to Llama 2's 32,000. Model builders, converters
(HF and Meta), tokenizer builder; the component builder is `ftune.models.llama2.llama2`."""

from ftune.models._converter import llama_style_converter
from ftune.models.code_llama2._model_builders import (
    code_llama2_7b,
    code_llama2_13b,
    code_llama2_34b,
    code_llama2_70b,
)
from ftune.models.code_llama2._tokenizer import code_llama2_tokenizer

CONVERTER = llama_style_converter("code_llama2", meta=True)
hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
meta_to_ftune = CONVERTER.meta_to_ftune
ftune_to_meta = CONVERTER.ftune_to_meta

__all__ = [
    "CONVERTER",
    "code_llama2_13b",
    "code_llama2_34b",
    "code_llama2_70b",
    "code_llama2_7b",
    "code_llama2_tokenizer",
    "ftune_to_hf",
    "ftune_to_meta",
    "hf_to_ftune",
    "meta_to_ftune",
]
