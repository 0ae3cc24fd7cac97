"""The eval recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import ClassVar

from ftune.config.settings import setting
from ftune.settings.inference import InferenceModelSettings


@dataclass
class EvalSettings(InferenceModelSettings):
    """The eval recipe: perplexity on text files, exact match on held-out chat records, lm-eval tasks."""

    # image_transform: the family's image transform for a heldout_file with images (null: config.json's)
    COMPONENTS: ClassVar[dict[str, bool]] = {**InferenceModelSettings.COMPONENTS, "image_transform": False}

    text_files: list[str] = setting([], "text files for perplexity, one document each")
    heldout_file: str | None = setting(
        None,
        "JSONL of chat records for exact match (the demo's heldout.jsonl; with image parts: an image-text "
        "model's, e.g. the image task's heldout.jsonl); null: skip",
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
    batch_size: int = setting(
        32, "prompts generated together, perplexity windows per forward, lm-eval requests per forward"
    )
    limit: int | None = setting(None, "evaluate at most this many held-out records (null: all)")
    show_examples: int = setting(3, "print this many held-out predictions next to their references")
    output_file: str | None = setting(None, "also write the results as JSON here")
    lm_eval_tasks: list[str] = setting(
        [], "lm-evaluation-harness task, group or tag names (needs pip install 'ftune[lm-eval]'); []: skip"
    )
    lm_eval_include_path: str | None = setting(
        None, "lm-eval: a folder of your own task YAMLs, searched before the built-in tasks"
    )
    lm_eval_builtin_tasks: bool = setting(
        True,
        "lm-eval: also index its ~15,000 built-in tasks (tens of seconds); false: include path only",
    )
    lm_eval_num_fewshot: int | None = setting(
        None, "lm-eval: few-shot examples per prompt (null: each task's own)"
    )
    lm_eval_limit: int | None = setting(None, "lm-eval: at most this many examples per task (null: all)")
    lm_eval_max_length: int | None = setting(
        None, "lm-eval: longest input in tokens, longer ones lose their start (null: the model's max_seq_len)"
    )

    def problems(self) -> list[str]:
        """Out-of-range lm-eval numbers, named with what is accepted."""
        out = super().problems()
        for key, least in (("lm_eval_num_fewshot", 0), ("lm_eval_limit", 1), ("lm_eval_max_length", 2)):
            value = getattr(self, key)
            if value is not None and value < least:
                out.append(
                    f"{key}: got {value}; it must be >= {least} or null. Pass {key}=<n> or {key}=null."
                )
        if self.lm_eval_tasks and not lm_eval_installed():  # a config-only refusal: before any folder check
            out.append(lm_eval_missing("lm_eval_tasks"))
        return out


def lm_eval_missing(key: str) -> str:
    """The refusal of a setting `key` that needs lm-evaluation-harness where it is not installed."""
    return (
        f"{key} needs lm-evaluation-harness, which is not installed: pip install 'ftune[lm-eval]' "
        "(or pip install 'lm_eval>=0.4'), or set lm_eval_tasks=[]."
    )


def lm_eval_installed() -> bool:
    """Whether `import lm_eval` would find the package (found, not imported: it takes seconds)."""
    if "lm_eval" in sys.modules:
        return sys.modules["lm_eval"] is not None  # None: an import that is known to fail
    try:
        return importlib.util.find_spec("lm_eval") is not None
    except (ImportError, ValueError):
        return False
