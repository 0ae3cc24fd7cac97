"""textarena_dataset: a TextArena game's boards as prompts, the records the environment deals again."""

import pytest

from ftune.agents import TextArenaEnvironment
from ftune.datasets import textarena_dataset

pytest.importorskip("textarena")


def test_records_are_the_environments_games():
    data = textarena_dataset(None, game="GuessTheNumber-v0", size=3, seed=2)
    env = TextArenaEnvironment("GuessTheNumber-v0", max_turns=1)
    assert list(data.records) == env.records(3, seed=2)
    assert data.messages(0) == (data.records[0]["prompt"], data.messages(0)[1])


def test_size_must_be_positive():
    with pytest.raises(ValueError, match=r"dataset.size: textarena_dataset needs an int >= 1, got 0"):
        textarena_dataset(None, game="GuessTheNumber-v0", size=0)
