"""A TextArena game (textarena's Guess The Number) as an ftune Environment: the game's own engine deals the
board from the record's seed, answers each turn and scores the game."""

import random

import pytest

from ftune.agents import Environment, TextArenaEnvironment, Turn

ta = pytest.importorskip("textarena")


def _turn(text):
    return Turn(text=text, content=text, tool_calls=(), error=None)


def _secret(episode):
    return episode.env.state.game_state["game_number"]


def test_records_are_games_dealt_from_their_seeds():
    env = TextArenaEnvironment("GuessTheNumber-v0", max_turns=4)
    assert isinstance(env, Environment) and env.tools == []
    records = env.records(3, seed=5)
    assert [(r["game"], r["seed"]) for r in records] == [("GuessTheNumber-v0", s) for s in (5, 6, 7)]
    assert records[0]["prompt"].startswith("[GAME] You are Player 0. You are playing Guess The Number.")
    # the same seed deals the same number as textarena itself does
    game = ta.make(env_id="GuessTheNumber-v0")
    game.reset(num_players=1, seed=6)
    _, episode = env.start(records[1])
    assert _secret(episode) == game.state.game_state["game_number"]


def test_dealing_leaves_pythons_random_as_it_was():
    random.seed(3)
    expected = random.random()
    random.seed(3)
    TextArenaEnvironment("GuessTheNumber-v0", max_turns=2).records(2)
    assert random.random() == expected


def test_the_game_answers_each_turn_and_its_reward_ends_it():
    env = TextArenaEnvironment("GuessTheNumber-v0", max_turns=8)
    messages, episode = env.start({"seed": 0})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Guess The Number" in messages[1]["content"]
    secret = _secret(episode)
    low = 1 if secret != 1 else 2
    step = episode.step(_turn(f"I guess [{low}]"))
    hint = "lower" if low > secret else "higher"
    assert step == type(step)(messages=[{"role": "user", "content": f"[GAME] The target number is {hint}."}],
                              reward=0.0, done=False)  # fmt: skip
    step = episode.step(_turn("no idea"))  # no [number]: the game warns once, the conversation goes on
    assert step.messages[0]["content"].startswith("[GAME] You attempted an invalid move.") and not step.done
    last = episode.step(_turn(f"[{secret}]"))
    assert (last.messages, last.reward, last.done) == ([], 1.0, True)


def test_max_turns_ends_a_running_game_with_reward_0():
    env = TextArenaEnvironment("GuessTheNumber-v0", max_turns=2, system_prompt=None)
    messages, episode = env.start({"seed": 1})
    assert [m["role"] for m in messages] == ["user"]
    wrong = [n for n in range(1, 21) if n != _secret(episode)]
    assert episode.step(_turn(f"[{wrong[0]}]")).done is False
    last = episode.step(_turn(f"[{wrong[1]}]"))
    assert (last.messages, last.reward, last.done) == ([], 0.0, True)


def test_a_bad_game_a_bad_max_turns_and_a_record_without_seed_are_named():
    with pytest.raises(
        ValueError, match=r"environment.game: 'Guess' is not a TextArena game id .*GuessTheNumber-v0"
    ):
        TextArenaEnvironment("Guess", max_turns=2)
    with pytest.raises(ValueError, match=r"environment.max_turns must be an int >= 1, got 0"):
        TextArenaEnvironment("GuessTheNumber-v0", max_turns=0)
    with pytest.raises(
        KeyError, match=r"the record has no field 'seed' \(its fields: \['prompt'\]\).*textarena_dataset"
    ):
        TextArenaEnvironment("GuessTheNumber-v0", max_turns=2).start({"prompt": "hi"})
