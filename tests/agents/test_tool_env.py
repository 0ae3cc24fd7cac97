"""ToolEnvironment: trusted tools only, calls answered as tool messages, errors to the model, max turns."""

import pytest
import sample_tools

from ftune.agents import Environment, Episode, ToolCall, Turn
from ftune.agents.tool_env import ToolEnvironment, argument_problem, cap_output
from ftune.agents.tool_schema import function_schema
from ftune.config import instantiate
from ftune.config.errors import ConfigError

SETTINGS = {"prompt_field": "question", "max_turns": 3, "max_output_chars": 50}


def _env(*tools, **kw):
    return ToolEnvironment(list(tools) or ["sample_tools.add"], **{**SETTINGS, **kw})


def _calls(*calls):
    return Turn(text="", content="", tool_calls=tuple(ToolCall(n, a, i) for n, a, i in calls), error=None)


def test_it_is_an_environment_and_its_tools_are_the_schemas():
    env = _env("sample_tools.add", "sample_tools.loud")
    assert isinstance(env, Environment)
    assert env.tools == [function_schema(sample_tools.add), function_schema(sample_tools.loud)]
    messages, episode = env.start({"question": "What is 2 + 40?"})
    assert messages == [{"role": "user", "content": "What is 2 + 40?"}] and isinstance(episode, Episode)


def test_built_from_a_config_node():
    env = instantiate(
        {"_component_": "ftune.agents.ToolEnvironment", "tools": ["sample_tools.add"], **SETTINGS}
    )
    assert [t["function"]["name"] for t in env.tools] == ["add"]


def test_system_prompt_comes_first_and_replaces_the_records():
    env = _env(system_prompt="Use tools.")
    messages, _ = env.start(
        {"question": [{"role": "system", "content": "old"}, {"role": "user", "content": "hi"}]}
    )
    assert messages == [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "hi"}]


def test_calls_are_answered_with_tool_messages_then_a_plain_answer_ends():
    _, episode = _env("sample_tools.add", "sample_tools.no_args").start({"question": "q"})
    step = episode.step(_calls(("add", {"a": 2, "b": 40}, "abc123XYZ"), ("no_args", {}, None)))
    assert step.done is False and step.reward == 0.0
    assert step.messages == [
        {"role": "tool", "name": "add", "content": "42", "tool_call_id": "abc123XYZ"},
        {"role": "tool", "name": "no_args", "content": "hello"},
    ]
    end = episode.step(Turn(text="42", content="42", tool_calls=(), error=None))
    assert end.done is True and end.messages == [] and end.reward == 0.0


def test_max_turns_ends_the_conversation():
    _, episode = _env(max_turns=2).start({"question": "q"})
    call = _calls(("add", {"a": 1, "b": 1}, None))
    assert episode.step(call).done is False
    last = episode.step(call)  # the 2nd turn: its calls are not run, no turn is left to read them
    assert last.done is True and last.messages == []


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        (
            ("nope", {}, None),
            "error: there is no tool named 'nope'; the tools are: add, fails, loud, sleeps.",
        ),
        (("add", {"a": 1}, None), "error: add was not run: missing argument(s) ['b']."),
        (
            ("add", {"a": 1, "b": 2, "c": 3}, None),
            "error: add was not run: unknown argument(s) ['c']; it takes: a, b.",
        ),
        (
            ("add", {"a": "1", "b": 2}, None),
            "error: add was not run: argument 'a' must be integer, got \"1\".",
        ),
        (("fails", {"x": 3}, None), "error: fails raised RuntimeError: boom 3"),
        (("sleeps", {"seconds": 5.0}, None), "error: sleeps ran longer than 0.2 s and was stopped."),
        (("loud", {"n": 80}, None), "x" * 50 + "\n[output cut: 50 of 80 characters shown]"),
    ],
)
def test_a_tool_failure_goes_back_to_the_model(call, answer):
    env = _env(
        "sample_tools.add", "sample_tools.fails", "sample_tools.loud", "sample_tools.sleeps", time_limit_s=0.2
    )
    _, episode = env.start({"question": "q"})
    step = episode.step(_calls(call))
    assert step.done is False
    assert step.messages[0]["content"] == answer


def test_a_malformed_turn_is_answered_by_a_user_message():
    _, episode = _env().start({"question": "q"})
    step = episode.step(
        Turn(text="<tool_call>{", content="", tool_calls=(), error="tool call 1 is bad. No tool was run.")
    )
    assert step.done is False
    assert step.messages == [
        {"role": "user", "content": "Your tool call could not be read: tool call 1 is bad. No tool was run."}
    ]


def test_an_untrusted_tool_is_refused_with_the_usual_error():
    with pytest.raises(
        ConfigError, match=r"environment.tools\[0\]: refusing to import 'json.dumps'.*--trust json"
    ):
        _env("json.dumps")


def test_a_tool_without_a_schema_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"environment.tools\[1\]: tool untyped, argument 'x': it has no type hint"
    ):
        _env("sample_tools.add", "sample_tools.untyped")


def test_a_missing_prompt_field_names_the_fields():
    with pytest.raises(KeyError, match=r"no field 'question' \(its fields: \['prompt'\]\); set prompt_field"):
        _env().start({"prompt": "q"})


@pytest.mark.parametrize("key", ["max_turns", "max_output_chars"])
def test_limits_must_be_positive_ints(key):
    with pytest.raises(ValueError, match=rf"environment.{key} must be an int >= 1, got 0"):
        _env(**{key: 0})


def test_no_silent_default_for_the_limits():
    with pytest.raises(TypeError, match="max_turns"):
        ToolEnvironment(["sample_tools.add"], prompt_field="q", max_output_chars=10)


def test_cap_and_argument_checks():
    assert cap_output("abc", 3) == "abc"
    schema = function_schema(sample_tools.describe)
    assert (
        argument_problem(schema, {"text": "t", "scale": 1, "loud": True, "tags": [], "limit": None}) is None
    )
    assert "must be one of ['short', 'long']" in argument_problem(
        schema, {"text": "t", "scale": 1, "loud": True, "tags": [], "mode": "mid"}
    )


def _python_env(time_limit_s):
    return instantiate(
        {
            "_component_": "ftune.agents.ToolEnvironment",
            "tools": [
                {
                    "_component_": "ftune.agents.PythonTool",
                    "time_limit_s": time_limit_s,
                    "max_output_chars": 400,
                }
            ],
            "prompt_field": "question",
            "max_turns": 8,
            "max_output_chars": 500,
        }
    )


def test_the_four_hostile_tools_are_answered_to_the_model(tmp_path):
    """A tool that hangs, writes outside its folder, prints 100 MB, raises: each a tool message, the run goes on."""
    _, hangs = _python_env(0.5).start({"question": "q"})
    answer = hangs.step(_calls(("python", {"code": "while True: pass"}, None))).messages[0]["content"]
    assert answer == "[stopped: it ran longer than 0.5 s]"
    _, episode = _python_env(60.0).start({"question": "q"})  # generous: a busy machine starts Python slowly
    outside = tmp_path / "x.txt"
    codes = [f"open({str(outside)!r}, 'w')", "print('x' * 100 * 2**20)", "raise KeyError('k')"]
    answers = [episode.step(_calls(("python", {"code": c}, None))).messages[0]["content"] for c in codes]
    assert "PermissionError: sandbox: writing" in answers[0] and "outside the tool's folder" in answers[0]
    assert answers[1] == "x" * 400 + "\n[output cut: it printed more than 400 characters and was stopped]"
    assert answers[2].endswith("KeyError: 'k'")
    assert not outside.exists()


def test_config_mistakes_are_named():
    with pytest.raises(ValueError, match=r"environment.tools must be a non-empty list of tools, got \[\]"):
        ToolEnvironment([], **SETTINGS)
    with pytest.raises(
        ConfigError, match=r"environment.tools\[1\]: a second tool named 'add'; tool names must be unique"
    ):
        _env("sample_tools.add", "sample_tools.add")
    with pytest.raises(
        ConfigError, match=r"environment.tools\[0\]: 3 is not callable; name a typed function"
    ):
        _env(3)
    with pytest.raises(
        ConfigError, match=r"environment.tools\[0\]: cannot import tool 'sample_tools.nope': module"
    ):
        _env("sample_tools.nope")
    with pytest.raises(
        ValueError, match=r"environment.prompt_field must name the record's prompt field, got ''"
    ):
        _env(prompt_field="")
