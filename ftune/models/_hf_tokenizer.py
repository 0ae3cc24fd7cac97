"""The tokenizer of every family that ships a Hugging Face `tokenizer.json` with its chat template.

Qwen2/2.5/3, SmolLM2, Gemma 1/3, Phi-3/4 and Mixtral-8x22B differ in their files, not in how they
are read: each family's `<family>_tokenizer` (the name configs use) says what its files hold and
calls `hf_family_tokenizer`.
"""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.hf import HFTokenizer


def hf_family_tokenizer(
    path: str | Path, max_seq_len: int | None = None, *, beside: str | None = None
) -> HFTokenizer:
    """A family's tokenizer from its `tokenizer.json` + `tokenizer_config.json`.

    The pieces run through the `tokenizers` library itself and conversations through the
    checkpoint's own chat template, so ids equal transformers' AutoTokenizer's.

    Args:
        path: the `tokenizer.json` file, or the folder holding it with `tokenizer_config.json`
            (e.g. the checkpoint folder); or the folder's file named `beside`.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
        beside: another file of the folder that names it (torchtune's configs point at Gemma's and
            Phi-3's `tokenizer.model`, Phi-4's `vocab.json`): a path to it reads the `tokenizer.json`
            beside it.

    Returns:
        An HFTokenizer: special tokens from the config, `tokenize_messages` through the chat template.

    Raises:
        FileNotFoundError: no tokenizer.json at `path` (or beside the file it names).
        ValueError: unreadable files, or no EOS token in the config.
    """
    path = Path(path)
    if beside is not None and path.name == beside:
        path = path.parent
    return HFTokenizer(path, max_seq_len=max_seq_len)
