"""Qwen2: component builder `qwen2`, model builders, converters, tokenizer builder.

Qwen2 (Alibaba, June 2024) has the architecture Qwen2.5 kept: a checkpoint's config.json
(`Qwen2ForCausalLM`, model_type "qwen2") does not say which of the two it is, so a folder loaded
without a model_type is built by the qwen2_5 family, with the same modules and weights.
"""

from ftune.models.qwen2._component_builders import qwen2
from ftune.models.qwen2._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.qwen2._model_builders import qwen2_0_5b, qwen2_1_5b, qwen2_7b, qwen2_72b
from ftune.models.qwen2._tokenizer import qwen2_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "qwen2",
    "qwen2_0_5b",
    "qwen2_1_5b",
    "qwen2_72b",
    "qwen2_7b",
    "qwen2_tokenizer",
]
