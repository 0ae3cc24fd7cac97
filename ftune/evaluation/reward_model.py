"""A trained reward model as a reward of online RL: completions scored in batches by a model.

A GRPO config lists it beside rule rewards, weighted like them (``ftune.rewards.RewardSet``)::

    rewards:
      _component_: ftune.rewards.RewardSet
      rewards:
        preference: {_component_: ftune.evaluation.RewardModel, checkpoint_dir: output/rm/step_60, tokenizer: ...}
        correct: {_component_: ftune.rewards.ExactMatch, field: answer}
      weights: {preference: 0.5, correct: 1.0}

It lives here, not in ``ftune.rewards``: that package is torch-free and sits below the model layers
(the command line checks reward configs with it before torch is imported), while scoring needs the
checkpoint loaders and the score head (``ftune.training.reward_scores``); ``ftune.evaluation`` is the
layer above both. ``ftune.rewards.scoring`` calls any reward that has ``score_batch`` once per rollout.

Each (prompt, completion) is rendered as the reward model saw its training rows
(``ftune.datasets.preference_dataset``): the prompt as the user's message, the completion as the
assistant's, in the tokenizer's chat format, with the end-of-sequence token; rows are right-padded
with the pad id the model was trained with (its config.json's ``pad_token_id``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ftune.checkpointing import HFCheckpointer
from ftune.checkpointing.inference import build_float_model
from ftune.checkpointing.model_build import read_hf_config
from ftune.data.messages import Message
from ftune.modules.score_head import ScoreHead
from ftune.runtime.device import get_device
from ftune.training.methods.reward_loss import reward_scores

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class RewardModel:
    """Scores completions with a trained reward model (a reward_model recipe's step folder).

    Args:
        tokenizer: the reward model's tokenizer (a component: the tokenizer of its training config).
        checkpoint_dir: a full reward model's step folder (``<Family>ForSequenceClassification``), or the
            base model of a LoRA one (then ``adapter_dir``).
        adapter_dir: a LoRA reward model's step folder (adapters and score head, PEFT's format), or None.
        device: "cpu", "cuda", "mps" or "auto" (the policy's device when it has one: a GPU if present).
        dtype: "fp32" or "bf16".
        batch_size: completions scored per forward.
        max_seq_len: keep at most this many tokens of a row (its end, where the score is read); None: all.

    Raises:
        ValueError: a folder that holds no reward model, a bad dtype or batch size.
    """

    #: ``ftune.rewards.score_rewards`` calls ``score_batch`` once per rollout instead of one call a completion.
    batched: bool = True

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        checkpoint_dir: str | os.PathLike,
        adapter_dir: str | os.PathLike | None = None,
        device: str = "cpu",
        dtype: str = "fp32",
        batch_size: int = 8,
        max_seq_len: int | None = None,
    ) -> None:
        if dtype not in _DTYPES:
            raise ValueError(f"RewardModel: dtype must be one of {list(_DTYPES)}, got {dtype!r}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"RewardModel: batch_size must be a positive int, got {batch_size!r}.")
        self.tokenizer, self.batch_size, self.max_seq_len = tokenizer, batch_size, max_seq_len
        self.device = get_device(device)
        loaded = HFCheckpointer(checkpoint_dir).load()
        self.model = build_float_model(
            loaded,
            checkpoint_dir=checkpoint_dir,
            adapter_dir=adapter_dir,
            device=self.device,
            dtype=_DTYPES[dtype],
        )
        head = getattr(self.model, "score", None)
        if not isinstance(head, ScoreHead):
            raise ValueError(
                f"RewardModel: {checkpoint_dir} (adapter_dir {adapter_dir}) holds a language model, not a reward "
                "model: give checkpoint_dir the step folder of a full reward_model run (a ForSequenceClassification "
                "folder), or the base model and adapter_dir the step folder of a LoRA one."
            )
        config = read_hf_config(checkpoint_dir) or {}
        pad = config.get("pad_token_id") if adapter_dir is None else None
        head.pad_id = (
            pad if isinstance(pad, int) else tokenizer.pad_id
        )  # a LoRA run trained with its tokenizer's

    def rows(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[int]]:
        """Each (prompt, completion) as the token ids of a training row (the module docstring)."""
        out = []
        for prompt, completion in zip(prompts, completions):
            messages = [Message("user", prompt), Message("assistant", completion)]
            tokens, _ = self.tokenizer.tokenize_messages(messages, add_eos=True)
            tokens = list(tokens)
            out.append(tokens[-self.max_seq_len :] if self.max_seq_len else tokens)
        return out

    @torch.no_grad()
    def score_batch(
        self, prompts: Sequence[str], completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> list[float]:
        """The reward of each completion: the model's score of its row, in ``batch_size`` forwards."""
        rows, pad = self.rows(prompts, completions), self.model.score.pad_id
        scores: list[float] = []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            tokens = torch.full((len(chunk), max(map(len, chunk))), pad, dtype=torch.long)
            for i, row in enumerate(chunk):
                tokens[i, : len(row)] = torch.tensor(row)
            tokens = tokens.to(self.device)
            scores += reward_scores(self.model, self.model.hidden(tokens), tokens).tolist()
        return scores

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        """One completion's reward (the reward protocol; rollouts use ``score_batch``)."""
        return self.score_batch([prompt], [completion], [sample])[0]
