"""A TextArena game (the ``textarena`` package) as an ftune Environment: the game engine plays the user.

TextArena's one-player games are text environments with their own rules, moves and rewards: ``ta.make(id)``
builds one, ``reset(num_players=1, seed=...)`` deals the seeded board, ``step(move)`` plays the model's
turn and ``state.rewards`` holds the outcome once ``state.done``. Here each conversation is one game: the
record's ``seed`` deals it (so a record's ``group_size`` conversations play the same board, which GRPO's
group comparison needs), the game's first observation is the user's opening message, each model turn is
played as the move, and what the game says back (the part of its observation that is new since the last
turn: a hint, an invalid-move warning) is the next user message. The game's own reward for player 0 is
the last step's reward::

    environment:
      _component_: ftune.agents.TextArenaEnvironment
      game: GuessTheNumber-v0
      max_turns: 6

Only games that need nothing beyond the package run offline: the number and board games
(``GuessTheNumber-v0``, ``Mastermind-v0``, ``TowerOfHanoi-v0``, ``Minesweeper-v0``...) do; the word
games (Wordle, Hangman, WordLadder, WordSearch...) call ``nltk.download`` for their word lists, which
fails without the network. textarena is an optional dependency (``ftune[agents]``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ftune.agents.environment import EnvStep, Message, Turn

SYSTEM_PROMPT = (
    "You are playing a game. Read the rules and answer each turn with your move in the exact format "
    "the game asks for."
)


def _ta() -> Any:
    try:
        import textarena
    except ImportError:
        raise ImportError(
            "TextArenaEnvironment needs the textarena package, which is not installed; install it with "
            "pip install 'ftune[agents]' (or pip install textarena)."
        ) from None
    return textarena


def _new_text(before: str, now: str) -> str:
    """What `now` (the game's whole observation so far) adds to `before`, from the game's first message on
    (the echo of the model's own move is dropped): the game's answer to the last turn."""
    new = now[len(before) :] if now.startswith(before) else now
    return new[new.index("[GAME]") :].strip() if "[GAME]" in new else new.strip()


class TextArenaEnvironment:
    """Plays a one-player TextArena game with ftune's model (see the module docstring).

    Args:
        game: the game's TextArena id (``GuessTheNumber-v0``...).
        max_turns: the most model turns a game has (>= 1); a game still running then ends with reward 0.
        system_prompt: the system message before the game's rules (None: none).

    Raises:
        ValueError: `game` is not a TextArena id, or `max_turns` is not an int >= 1.
    """

    tools: list[dict[str, Any]] = []  # the game reads the turn's text: no tools

    def __init__(self, game: str, *, max_turns: int, system_prompt: str | None = SYSTEM_PROMPT) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"environment.max_turns must be an int >= 1, got {max_turns!r}.")
        registry = _ta().envs.registration.ENV_REGISTRY
        if game not in registry:
            raise ValueError(
                f"environment.game: {game!r} is not a TextArena game id (textarena.envs.registration.ENV_REGISTRY "
                "lists them); set game to a one-player game's id, e.g. GuessTheNumber-v0, Mastermind-v0 or "
                "TowerOfHanoi-v0."
            )
        self.game, self.max_turns, self.system_prompt = game, max_turns, system_prompt

    def _deal(self, seed: int) -> Any:
        """A new game dealt from `seed`, leaving Python's global RNG (which TextArena seeds) as it was."""
        state = random.getstate()
        try:
            env = _ta().make(env_id=self.game)
            env.reset(num_players=1, seed=seed)
        finally:
            random.setstate(state)
        return env

    def records(self, size: int, *, seed: int = 0) -> list[dict[str, Any]]:
        """`size` games, dealt from the seeds seed, seed + 1, ...: ``prompt`` (the game's opening), ``game``, ``seed``."""
        return [
            {"prompt": str(self._deal(s).get_observation()[1]).strip(), "game": self.game, "seed": s}
            for s in range(seed, seed + size)
        ]

    def start(self, record: Mapping[str, Any]) -> tuple[list[Message], TextArenaEpisode]:
        if "seed" not in record:
            raise KeyError(
                f"environment: the record has no field 'seed' (its fields: {sorted(record)}); TextArenaEnvironment "
                "deals each game from its record's seed: use ftune.datasets.textarena_dataset for the dataset."
            )
        env = self._deal(int(record["seed"]))
        observation = str(env.get_observation()[1])
        messages: list[Message] = [{"role": "user", "content": observation.strip()}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages, TextArenaEpisode(env, observation, self.max_turns)


class TextArenaEpisode:
    """One game in progress: the engine, what the model has seen of its observation, the turns taken."""

    def __init__(self, env: Any, seen: str, max_turns: int) -> None:
        self.env, self.seen, self.max_turns, self.turns = env, seen, max_turns, 0

    def step(self, turn: Turn) -> EnvStep:
        self.turns += 1
        done, _ = self.env.step(turn.text)
        if done or self.env.state.done:
            return EnvStep(messages=[], reward=float((self.env.state.rewards or {}).get(0, 0.0)), done=True)
        if self.turns >= self.max_turns:
            return EnvStep(messages=[], reward=0.0, done=True)
        observation = str(self.env.get_observation()[1])
        answer, self.seen = _new_text(self.seen, observation), observation
        return EnvStep(messages=[{"role": "user", "content": answer}], reward=0.0, done=False)
