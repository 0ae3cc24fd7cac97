"""Components that recipe tests plug into configs (importable: tests/assets is on sys.path)."""

from __future__ import annotations

from ftune.data.collate import padded_collate_sft

CALLS = {"collate": 0}


def counting_collate(batch, *, pad_id: int, pad_to_multiple_of: int = 16):
    """Right padding to a multiple of 16, counting its calls: proves the recipe used the config's collate."""
    CALLS["collate"] += 1
    return padded_collate_sft(batch, pad_id=pad_id, pad_to_multiple_of=pad_to_multiple_of)


def char_code_reward(prompt: str, completion: str, sample) -> float:
    """A GRPO test reward that differs between a tiny random model's completions (exact match is 0 for
    all of them, which gives no advantage): the completion's character codes summed, mod 7, over 6."""
    return sum(map(ord, completion)) % 7 / 6.0


class ScriptedCalculator:
    """The agent recipe tests' environment (an ftune.agents.Environment in plain Python): the record's prompt as
    the user's message; each turn is answered by a tool message (the sum of the digits of the turn's text)
    until the second turn, which ends the episode. Reward 0.25 a turn that wrote a digit."""

    tools: list = []

    def start(self, record):
        return [{"role": "user", "content": record["prompt"]}], _ScriptedEpisode()


class _ScriptedEpisode:
    def __init__(self) -> None:
        self.turns = 0

    def step(self, turn):
        from ftune.agents import EnvStep

        self.turns += 1
        reward = 0.25 * any(c.isdigit() for c in turn.text)
        if self.turns >= 2:
            return EnvStep([], reward, True)
        return EnvStep(
            [{"role": "tool", "content": str(sum(int(c) for c in turn.text if c.isdigit()))}], reward, False
        )


def plain_turn(text: str):
    """A tool-call format for the tests: every turn is a plain answer (no call)."""
    from ftune.agents import Turn

    return Turn(text, text, (), None)
