"""Mixtral tokenizer: Mistral's.

Mixtral-8x7B (v0.1, base and Instruct) ships Mistral 7B's v1 sentencepiece `tokenizer.model` and
its `[INST]` format: `mixtral_tokenizer` is `mistral_tokenizer`. Mixtral-8x22B uses the v3
vocabulary (32,768 tokens, `[INST]` a control token): read it with `ftune.tokenizers.hf.HFTokenizer`
from the model's tokenizer.json, as for Mistral v0.3.
"""

from ftune.models.mistral._tokenizer import mistral_tokenizer

mixtral_tokenizer = mistral_tokenizer
