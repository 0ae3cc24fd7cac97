"""Phi-3 tokenizer: its HF `tokenizer.json` (Llama 2's sentencepiece BPE, 32,000 pieces, plus Phi-3's
specials `<|endoftext|>`, `<|assistant|>`, `<|end|>`, `<|user|>`, `<|system|>`...) and chat template."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def phi3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Phi-3 tokenizer: Llama 2's 32,000 sentencepiece BPE pieces plus Phi-3's specials and the
    `<|user|>\\n...<|end|>\\n<|assistant|>\\n...` chat template. A path to the folder's `tokenizer.model`
    (torchtune's configs name it) reads the `tokenizer.json` beside it.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len, beside="tokenizer.model")
