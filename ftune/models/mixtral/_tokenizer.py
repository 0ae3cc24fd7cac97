"""Mixtral tokenizers: Mistral's, in the two vocabularies the releases use.

Mixtral-8x7B (v0.1, base and Instruct) ships Mistral 7B's v1 sentencepiece `tokenizer.model` and
its `[INST]` format: `mixtral_tokenizer` is `mistral_tokenizer`. Mixtral-8x22B uses the v3
vocabulary (32,768 tokens, `[INST]` and `[/INST]` control tokens) with its chat template in
tokenizer_config.json: `mixtral_v3_tokenizer` reads its tokenizer.json.
"""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.models.mistral._tokenizer import mistral_tokenizer
from ftune.tokenizers.hf import HFTokenizer

mixtral_tokenizer = mistral_tokenizer


def mixtral_v3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Mixtral-8x22B tokenizer (v3 vocabulary) from its tokenizer.json, with the folder's chat template.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len)
