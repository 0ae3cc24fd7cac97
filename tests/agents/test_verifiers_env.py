"""A verifiers 0.4 environment (tests/agents/vf_guess_game.py, built from verifiers' own classes) run as an
ftune Environment: its run() answers each model turn, its task's @vf.reward methods score the episode."""

import asyncio

import pytest
import verifiers.v1 as vf

from ftune.agents import Environment, Turn
from ftune.agents.verifiers_env import VerifiersEnvironment
from ftune.config import instantiate
from ftune.config.errors import ConfigError


def _turn(text):
    return Turn(text=text, content=text, tool_calls=(), error=None)


@pytest.fixture(scope="module")
def env():
    return instantiate(
        {
            "_component_": "ftune.agents.VerifiersEnvironment",
            "env": "vf_guess_game",
            "max_turns": 4,
            "taskset": {"size": 3},
        }
    )


def test_records_are_the_tasksets_tasks(env):
    assert isinstance(env, Environment) and env.tools == []
    records = env.records(3)
    assert [r["secret"] for r in records] == [4, 1, 8]
    assert records == [t.data.model_dump(mode="json") for t in env.env.taskset][:3]


def test_the_environments_run_answers_each_turn_and_its_rubric_scores(env):
    messages, episode = env.start(env.records(1)[0])
    assert messages == [
        {"role": "system", "content": "You play a guessing game."},
        {"role": "user", "content": "Guess my number between 1 and 10. Reply with one number."},
    ]
    assert episode.step(_turn("5")).messages == [{"role": "user", "content": "lower"}]
    assert episode.step(_turn("maybe 3?")).messages == [{"role": "user", "content": "higher"}]
    assert episode.step(_turn("pass")).messages == [{"role": "user", "content": "Reply with one number."}]
    last = episode.step(_turn("4"))
    assert last.done is True and last.messages == []
    # the reward is verifiers' own: Task.score on a trace holding the same conversation
    trace = episode.trace
    assert [m.content for m in trace.assistant_messages] == ["5", "maybe 3?", "pass", "4"]
    assert trace.rewards["solved"].score == 1.0 and trace.rewards["fewer_turns"].score == 0.25
    assert last.reward == pytest.approx(1.0 + 0.1 * 0.25) == trace.reward
    again = vf.Trace(task=trace.task, agent=trace.agent, nodes=trace.nodes, info=dict(trace.info))
    asyncio.run(episode.task.score(again))
    assert again.reward == last.reward


def test_max_turns_terminates_the_exchange_as_verifiers_does(env):
    _, episode = env.start(env.records(3)[2])  # the secret is 8
    steps = [episode.step(_turn("1")) for _ in range(4)]
    assert [s.done for s in steps] == [False, False, False, True]
    assert episode.trace.stop_condition == "max_turns"
    assert episode.trace.rewards["solved"].score == 0.0 and steps[-1].reward == pytest.approx(0.1 * 0.25)


def test_an_untrusted_environment_module_is_refused():
    with pytest.raises(ConfigError, match=r"environment.env: refusing to import 'json'.*--trust json"):
        VerifiersEnvironment("json", max_turns=2)


def test_a_run_that_awaits_something_else_is_named(env, monkeypatch):
    async def sleepy(task, agents):
        await asyncio.sleep(0)

    monkeypatch.setattr(env.env, "run", sleepy)
    with pytest.raises(
        RuntimeError, match=r"'vf_guess_game' awaited None in run\(\); VerifiersEnvironment drives"
    ):
        env.start(env.records(1)[0])


def test_max_turns_is_required_and_positive():
    with pytest.raises(ValueError, match=r"environment.max_turns must be an int >= 1, got 0"):
        VerifiersEnvironment("vf_guess_game", max_turns=0)
