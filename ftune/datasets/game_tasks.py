"""A TextArena game's opening boards as GRPO prompts (``textarena_dataset``), for the agent recipe.

Each record is one game dealt from its seed (``seed``, ``seed + 1``, ...): ``prompt`` (the game's opening
observation: its rules and board), ``game`` and ``seed``. The agent recipe's
:class:`~ftune.agents.TextArenaEnvironment` deals the same game again from the record's seed and plays it
with the model, so the dataset and the environment agree on every board without storing it::

    dataset:
      _component_: ftune.datasets.textarena_dataset
      game: GuessTheNumber-v0
      size: 200
      seed: 0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ftune.agents.textarena_env import TextArenaEnvironment
from ftune.datasets.prompts import PromptDataset

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


def textarena_dataset(
    tokenizer: Tokenizer,
    *,
    game: str,
    size: int,
    seed: int = 0,
    max_prompt_len: int | None = None,
) -> PromptDataset:
    """`size` games of a one-player TextArena game as prompts (see the module docstring).

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        game: the game's TextArena id (``GuessTheNumber-v0``...).
        size: how many games (>= 1).
        seed: the first game's seed; the others follow it.
        max_prompt_len: keep only each prompt's last this many tokens (null: all).

    Raises:
        ValueError: `size` is not an int >= 1, or `game` is not a TextArena id.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"dataset.size: textarena_dataset needs an int >= 1, got {size!r}.")
    records = TextArenaEnvironment(game, max_turns=1).records(size, seed=seed)
    return PromptDataset(
        records,
        tokenizer,
        prompt_column="prompt",
        new_system_prompt=None,
        max_prompt_len=max_prompt_len,
        source=f"textarena {game}",
    )
