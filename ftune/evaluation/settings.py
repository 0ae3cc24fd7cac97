"""The eval recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

from dataclasses import dataclass

from ftune.checkpointing.settings import InferenceModelSettings
from ftune.config.settings import setting


@dataclass
class EvalSettings(InferenceModelSettings):
    """The eval recipe: perplexity on text files, exact match on held-out chat records."""

    text_files: list[str] = setting([], "text files for perplexity, one document each")
    heldout_file: str | None = setting(
        None, "JSONL of chat records for exact match (the demo's heldout.jsonl); null: skip"
    )
    demo_data_if_missing: bool = setting(
        True, "when heldout_file is a missing heldout.jsonl, write the demo data (as training does) first"
    )
    max_seq_len: int = setting(512, "perplexity: rolling-window length in tokens")
    stride: int | None = setting(
        None, "perplexity: new tokens per window after the first (null: max_seq_len)"
    )
    max_new_tokens: int | None = setting(
        None, "exact match: tokens generated per prompt (null: the longest reference's tokens + 4)"
    )
    batch_size: int = setting(32, "prompts generated together, and perplexity windows per forward")
    limit: int | None = setting(None, "evaluate at most this many held-out records (null: all)")
    show_examples: int = setting(3, "print this many held-out predictions next to their references")
    output_file: str | None = setting(None, "also write the results as JSON here")
