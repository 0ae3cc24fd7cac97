"""Prompt datasets for online RL (GRPO): a prompt to complete and the fields its rewards read.

A record holds the prompt (a string, taken as the user's message, or a list of role/content
messages) and any other fields (a reference answer, a label). Each item is the prompt's tokens in
the model's chat format, ending where the assistant's reply begins, plus the prompt text and the
record's other fields, which the rewards receive as ``sample``::

    {"prompt": "Rewrite the date 2023-07-14 in the format DD/MM/YYYY. ...", "answer": "14/07/2023"}

The demo task's prompt split (``demo_prompt_dataset``) is the quickstart's date reformatting
questions with their answers in the ``answer`` field.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from ftune.config.record_checks import prompt_problem
from ftune.data.messages import Message
from ftune.datasets.demo import HELDOUT_FILE, TRAIN_FILE, read_demo_examples, write_demo_data
from ftune.datasets.sft import check_columns
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

log = logging.getLogger(__name__)

TRAIN_PROMPTS_FILE, HELDOUT_PROMPTS_FILE = "train_prompts.jsonl", "heldout_prompts.jsonl"


class PromptDataset(torch.utils.data.Dataset):
    """Records -> {"tokens", "prompt", "sample", "index"} (collate with ``ftune.data.collate_prompts``).

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: the model's tokenizer: ``tokenize_messages(..., add_generation_prompt=True)``.
        prompt_column: the column holding the prompt.
        new_system_prompt: a system message put before every prompt (replacing one the prompt has).
        max_prompt_len: keep only the last this many prompt tokens (the end of a prompt is what the
            answer follows); None keeps every token.
        source: where the records came from, for messages.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        *,
        prompt_column: str,
        new_system_prompt: str | None,
        max_prompt_len: int | None,
        source: str,
    ) -> None:
        self.records, self.tokenizer = records, tokenizer
        self.prompt_column, self.new_system_prompt = prompt_column, new_system_prompt
        self.max_prompt_len, self.source = max_prompt_len, source

    def __len__(self) -> int:
        return len(self.records)

    def messages(self, index: int) -> tuple[str, list[Message]]:
        """The prompt's text (what the rewards see) and its messages (what the model reads)."""
        prompt = self.records[index][self.prompt_column]
        problem = prompt_problem(prompt, self.prompt_column)
        if problem is not None:
            raise ValueError(
                f"prompt_dataset ({self.source}) row {index + 1}: {problem}. Fix the record or delete it."
            )
        if isinstance(prompt, str):
            text, messages = prompt, [Message("user", prompt)]
        else:
            messages = [Message(m["role"], m["content"]) for m in prompt]
            text = messages[-1].content
        if self.new_system_prompt is not None:
            messages = [Message("system", self.new_system_prompt)] + [
                m for m in messages if m.role != "system"
            ]
        return text, messages

    def __getitem__(self, index: int) -> dict[str, Any]:
        text, messages = self.messages(index)
        tokens, _ = self.tokenizer.tokenize_messages(messages, add_eos=False, add_generation_prompt=True)
        if self.max_prompt_len is not None:
            tokens = list(tokens)[-self.max_prompt_len :]
        sample = {k: v for k, v in dict(self.records[index]).items() if k != self.prompt_column}
        return {"tokens": list(tokens), "prompt": text, "sample": sample, "index": index}


def prompt_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    new_system_prompt: str | None = None,
    max_prompt_len: int | None = None,
) -> PromptDataset:
    """Prompts to sample completions of, with the fields the rewards read (GRPO recipes).

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: a hub id, a local file (.json .jsonl .csv .parquet) or folder, or a builder name.
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"prompt": <your prompt column>}; the other columns reach the rewards as they are.
        new_system_prompt: a system message before every prompt.
        max_prompt_len: keep only each prompt's last this many tokens (null: all of them).

    Returns:
        A `PromptDataset`.

    Raises:
        KeyError: the data has no prompt column.
        ValueError: ``max_prompt_len`` below 1, or a prompt (row named) that is empty or not text (a
            number, a null, a message whose content is not a string).
    """
    if max_prompt_len is not None and (isinstance(max_prompt_len, bool) or max_prompt_len < 1):
        raise ValueError(
            f"prompt_dataset: max_prompt_len must be an int >= 1 or null, got {max_prompt_len!r}."
        )
    unknown = set(column_map or {}) - {"prompt"}
    if unknown:
        raise ValueError(
            f"prompt_dataset: column_map maps {sorted(unknown)}; it accepts only 'prompt' (the other "
            "columns reach the rewards under their own names)."
        )
    column = (column_map or {}).get("prompt", "prompt")
    records = load_source(source, data_files=data_files, split=split, name=name)
    check_columns(records, [column], "prompt_dataset", source)
    dataset = PromptDataset(
        records,
        tokenizer,
        prompt_column=column,
        new_system_prompt=new_system_prompt,
        max_prompt_len=max_prompt_len,
        source=source,
    )
    prompts = records[column] if hasattr(records, "column_names") else [r[column] for r in records]
    for i, prompt in enumerate(prompts):  # one column read: every prompt checked here, not mid-run
        if prompt_problem(prompt, column) is not None:
            dataset.messages(i)
    return dataset


def write_demo_prompts(
    out_dir: str | os.PathLike, *, n_train: int = 2000, n_heldout: int = 100, seed: int = 0
) -> tuple[Path, Path]:
    """Write train_prompts.jsonl and heldout_prompts.jsonl, ``{"prompt", "answer"}`` records.

    They hold the questions of train.jsonl and heldout.jsonl (written first if missing), line for
    line: the held-out prompts never occur in training. `n_train`, `n_heldout` and `seed` are those of
    `ftune.datasets.write_demo_data`, used when those files are missing.

    Returns:
        (path of train_prompts.jsonl, path of heldout_prompts.jsonl).
    """
    out = Path(out_dir)
    if not (out / TRAIN_FILE).is_file() or not (out / HELDOUT_FILE).is_file():
        write_demo_data(out, n_train=n_train, n_heldout=n_heldout, seed=seed)
    paths = []
    for src, dst in ((TRAIN_FILE, TRAIN_PROMPTS_FILE), (HELDOUT_FILE, HELDOUT_PROMPTS_FILE)):
        lines = [json.dumps({"prompt": e.prompt, "answer": e.answer}) for e in read_demo_examples(out / src)]
        (out / dst).write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(out / dst)
    log.info("wrote the demo prompts to %s", out)
    return paths[0], paths[1]


def demo_prompt_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    split: Literal["train", "heldout"] = "train",
    max_prompt_len: int | None = None,
    n_train: int = 2000,
    n_heldout: int = 100,
    seed: int = 0,
) -> PromptDataset:
    """The demo task's prompts with their reference answers (field ``answer``), for the GRPO recipes.

    Writes the data first if `data_dir` has none (the same questions as `demo_dataset`'s split).

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        data_dir: folder holding (or receiving) the demo files.
        split: "train" or "heldout".
        max_prompt_len: as in `prompt_dataset`.
        n_train, n_heldout, seed: the demo data written when the folder has none (`demo_dataset`'s).

    Raises:
        ValueError: `split` is not "train" or "heldout".
    """
    files = {"train": TRAIN_PROMPTS_FILE, "heldout": HELDOUT_PROMPTS_FILE}
    if split not in files:
        raise ValueError(f"demo_prompt_dataset: split={split!r} is not accepted; use 'train' or 'heldout'.")
    path = Path(data_dir) / files[split]
    if not path.is_file():
        write_demo_prompts(data_dir, n_train=n_train, n_heldout=n_heldout, seed=seed)
    return prompt_dataset(tokenizer, source=str(path), max_prompt_len=max_prompt_len)
