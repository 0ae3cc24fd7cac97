"""Tool-call formats: parity with the families' real chat templates, malformed calls, the family table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trl

from ftune.agents import ToolCall
from ftune.agents.tool_formats import FAMILY_FORMATS, FORMATS, assistant_message, tool_format
from ftune.models import FAMILIES
from ftune.tokenizers.chat_template import compile_chat_template

TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
CALLS = [
    ToolCall("add", {"a": 2, "b": 40}, "abc123XYZ"),
    ToolCall("add", {"a": -1, "b": 3.5, "note": 'é "q"'}, "Zz9Yy8Xx7"),
]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

# template file, the family's format name, the text that starts the assistant message, its end, calls per message
CASES = {
    "llama3_1": (
        TRL_TEMPLATES / "llama3_1.jinja",
        "llama3_json",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        1,
    ),
    "llama3_2": (
        TRL_TEMPLATES / "llama3_2.jinja",
        "llama3_json",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        1,
    ),
    "qwen2_5": (TRL_TEMPLATES / "qwen2_5.jinja", "hermes", "<|im_start|>assistant\n", "<|im_end|>", 2),
    "qwen3": (TRL_TEMPLATES / "qwen3.jinja", "hermes", "<|im_start|>assistant\n", "<|im_end|>", 2),
}


def _message(calls: list[ToolCall], content: str) -> dict:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }


def _assistant_text(case: str, calls: list[ToolCall], content: str) -> str:
    """The text the real template renders for an assistant message with `calls` (header and end cut off)."""
    path, _, start, end, _ = CASES[case]
    template = compile_chat_template(path.read_text(), str(path))
    # no system message: Mistral's template writes it into the last user message, which moves
    messages = [{"role": "user", "content": "What is 2 + 40?"}]
    before = template.render(messages=messages, tools=TOOLS, add_generation_prompt=False, **SPECIAL)
    after = template.render(
        messages=[*messages, _message(calls, content)], tools=TOOLS, add_generation_prompt=False, **SPECIAL
    )
    assert after.startswith(before)
    text = after[len(before) :]
    if text.startswith(start):
        text = text[len(start) :]
    if case == "qwen3":  # Qwen3 writes an empty reasoning block before a final turn's text
        text = text.removeprefix("<think>\n\n</think>\n\n")
    assert text.endswith(end + "\n") or text.endswith(end), text
    return text[: text.rindex(end)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_parse_gives_back_the_calls_the_real_template_renders(case):
    fmt = FORMATS[CASES[case][1]]
    calls = CALLS[: CASES[case][4]]
    content = "" if case.startswith(("llama", "mistral")) else "Let me add."  # those templates drop content
    text = _assistant_text(case, calls, content)
    turn = fmt.parse(text)
    assert turn.error is None, turn.error
    ids = [c.id for c in calls] if fmt.name.startswith("mistral") else [None] * len(calls)
    assert [(c.name, c.arguments, c.id) for c in turn.tool_calls] == [
        (c.name, c.arguments, i) for c, i in zip(calls, ids)
    ]
    assert turn.content == content
    assert fmt.render(calls, content) == text  # render writes what the template writes


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plain_answer_has_no_calls(case):
    turn = FORMATS[CASES[case][1]].parse("The answer is 42.")
    assert turn.tool_calls == () and turn.error is None and turn.content == "The answer is 42."


def test_llama3_accepts_the_python_tag_and_arguments_key():
    turn = FORMATS["llama3_json"].parse('<|python_tag|>{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert turn.tool_calls == (ToolCall("add", {"a": 1, "b": 2}, None),) and turn.error is None
    two = FORMATS["llama3_json"].parse(
        '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}'
    )
    assert [c.name for c in two.tool_calls] == ["a", "b"]


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        (
            "hermes",
            '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>',
            r"tool call 1 is not valid JSON",
        ),
        ("hermes", '<tool_call>\n{"name": "add", "arguments": {"a": 1}}', r"no closing </tool_call>"),
        ("hermes", '<tool_call>\n{"arguments": {}}\n</tool_call>', r'has no "name" string'),
        (
            "hermes",
            '<tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>',
            r'"arguments" of \'add\' must be a JSON object',
        ),
        ("hermes", '<tool_call>\n{"name": "add"} trailing\n</tool_call>', r"text after its JSON object"),
        ("llama3_json", '<|python_tag|>{"name": "add", "parameters": ', r"not valid JSON"),
        ("llama3_json", '{"name": 3, "parameters": {}}', r'has no "name" string'),
        ("mistral_v3", "[TOOL_CALLS] {}", r"non-empty JSON list"),
        ("mistral_v3", "[TOOL_CALLS] [oops]", r"not valid JSON"),
        ("mistral_v13", "[TOOL_CALLS]add{}", r"must read \[TOOL_CALLS\]<name>\[ARGS\]"),
        ("mistral_v11", '[TOOL_CALLS]add[CALL_ID]x1[ARGS]{"a": }', r"\[ARGS\] is not valid JSON"),
    ],
)
def test_a_malformed_call_is_an_error_for_the_model_not_an_exception(fmt, text, message):
    turn = FORMATS[fmt].parse(text)
    assert turn.tool_calls == ()
    assert turn.error is not None
    assert re.search(message, turn.error), turn.error
    assert turn.error.endswith("No tool was run.")


def test_one_bad_call_among_good_ones_runs_none():
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{bad}\n</tool_call>'
    turn = FORMATS["hermes"].parse(text)
    assert turn.tool_calls == () and "tool call 2" in turn.error


@pytest.mark.parametrize("name", ["mistral_v3", "mistral_v3_tekken", "mistral_v11", "mistral_v13", "hermes"])
def test_render_then_parse_is_identity(name):
    fmt = FORMATS[name]
    turn = fmt.parse(fmt.render(CALLS))
    ids = (
        [c.id for c in CALLS] if name in ("mistral_v3", "mistral_v3_tekken", "mistral_v11") else [None, None]
    )
    assert turn.error is None
    assert [(c.name, c.arguments, c.id) for c in turn.tool_calls] == [
        (c.name, c.arguments, i) for c, i in zip(CALLS, ids)
    ]


def test_mistral_v3_spm_writes_a_space_and_checks_ids():
    assert FORMATS["mistral_v3"].render(CALLS[:1]).startswith("[TOOL_CALLS] [{")
    with pytest.raises(ValueError, match=r"call ids of 9 letters or digits, got \['call_1'\]"):
        FORMATS["mistral_v3"].render([ToolCall("add", {}, "call_1")])


def test_llama3_renders_one_call_a_message():
    with pytest.raises(ValueError, match="exactly one tool call a message, got 2"):
        FORMATS["llama3_json"].render(CALLS)


def test_every_family_in_the_table_is_a_family():
    assert set(FAMILY_FORMATS) <= set(FAMILIES)
    assert set(FAMILY_FORMATS.values()) <= set(FORMATS)


def test_the_family_picks_the_format_and_an_override_wins():
    assert tool_format("qwen2_5").name == "hermes"
    assert tool_format("llama3_2").name == "llama3_json"
    assert tool_format("gemma3", override="hermes").name == "hermes"
    assert tool_format("qwen3", override="mistral_v13").name == "mistral_v13"


def test_no_silent_default():
    with pytest.raises(
        ValueError,
        match=r"tool_format: model family 'gemma3' has no known tool-call format .* Set tool_format to one of: hermes, llama3_json",
    ):
        tool_format("gemma3")
    with pytest.raises(
        ValueError, match=r"env.tool_format: 'json' is not a tool-call format; set it to one of: hermes"
    ):
        tool_format("qwen3", override="json", key="env.tool_format")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_parsed_turn_renders_back_to_the_models_text(case):
    """assistant_message(parse(text)) through the real template gives back the text the model wrote."""
    fmt = FORMATS[CASES[case][1]]
    calls = CALLS[: CASES[case][4]]
    content = "" if case.startswith(("llama", "mistral")) else "Let me add."
    text = fmt.render(calls, content)
    message = assistant_message(fmt.parse(text))
    back = [
        ToolCall(c["function"]["name"], c["function"]["arguments"], c.get("id"))
        for c in message["tool_calls"]
    ]
    assert _assistant_text(case, back, message["content"]) == text


def test_assistant_message_of_a_plain_or_malformed_turn():
    assert assistant_message(FORMATS["hermes"].parse("42")) == {"role": "assistant", "content": "42"}
    bad = "<tool_call>\n{oops}\n</tool_call>"
    assert assistant_message(FORMATS["hermes"].parse(bad)) == {"role": "assistant", "content": bad}
