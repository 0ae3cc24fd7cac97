import pytest

from ftune.data.messages import Message
from ftune.data.transforms import (
    ALPACA_PROMPT_NO_INPUT,
    ALPACA_PROMPT_WITH_INPUT,
    AlpacaToMessages,
    ChosenRejectedToMessages,
    InputOutputToMessages,
    OpenAIToMessages,
    ShareGPTToMessages,
)


def _view(messages):
    return [(m.role, m.content, m.masked) for m in messages]


@pytest.mark.parametrize("train_on_input", [False, True])
def test_input_output_masks_prompt_unless_train_on_input(train_on_input):
    out = InputOutputToMessages(train_on_input=train_on_input)({"input": "2+2?", "output": "4"})
    assert _view(out) == [("user", "2+2?", not train_on_input), ("assistant", "4", False)]


def test_input_output_column_map_and_system_prompt():
    t = InputOutputToMessages(column_map={"input": "q", "output": "a"}, new_system_prompt="Be brief.")
    assert t.required_columns == ["q", "a"]
    out = t({"q": "Hi", "a": "Hello", "input": "ignored"})
    assert _view(out) == [("system", "Be brief.", True), ("user", "Hi", True), ("assistant", "Hello", False)]


def test_column_map_rejects_keys_the_transform_does_not_read():
    with pytest.raises(
        KeyError,
        match=r"column_map keys \['question'\] are not columns this transform reads; accepted keys are \['input', 'output'\]",
    ):
        InputOutputToMessages(column_map={"question": "q"})


def test_missing_column_names_the_column_and_the_fix():
    with pytest.raises(
        KeyError,
        match=r"column 'a' \(for 'output'\) is not in the record; the record has columns \['answer', 'q'\]. Set column_map",
    ):
        InputOutputToMessages(column_map={"input": "q", "output": "a"})({"q": "x", "answer": "y"})


def test_alpaca_prompt_with_and_without_input():
    t = AlpacaToMessages()
    with_input = t({"instruction": "Add", "input": "2 and 3", "output": "5"})
    assert with_input[0].content == ALPACA_PROMPT_WITH_INPUT.format(instruction="Add", input="2 and 3")
    assert "### Input:\n2 and 3\n\n### Response:\n" in with_input[0].content
    assert _view(with_input)[1] == ("assistant", "5", False)
    assert with_input[0].masked
    no_input = t({"instruction": "Say hi", "input": "", "output": "hi"})
    assert no_input[0].content == ALPACA_PROMPT_NO_INPUT.format(instruction="Say hi")
    assert no_input[0].content.startswith("Below is an instruction that describes a task. Write a response")
    # the input column may be missing entirely
    assert t({"instruction": "Say hi", "output": "hi"})[0].content == no_input[0].content


def test_alpaca_column_map_and_train_on_input():
    t = AlpacaToMessages(train_on_input=True, column_map={"instruction": "task", "output": "answer"})
    out = t({"task": "T", "answer": "A"})
    assert not out[0].masked and out[1].content == "A"
    assert t.required_columns == ["task", "answer"]


SHAREGPT = {
    "conversations": [
        {"from": "system", "value": "sys"},
        {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "hello"},
        {"from": "human", "value": "bye"},
        {"from": "gpt", "value": "ciao"},
    ]
}


@pytest.mark.parametrize("train_on_input", [False, True])
def test_sharegpt_roles_and_masking(train_on_input):
    out = ShareGPTToMessages(train_on_input=train_on_input)(SHAREGPT)
    assert _view(out) == [
        ("system", "sys", True),  # system is always masked
        ("user", "hi", not train_on_input),
        ("assistant", "hello", False),
        ("user", "bye", not train_on_input),
        ("assistant", "ciao", False),
    ]


def test_sharegpt_column_map_and_new_system_prompt_replaces_system():
    t = ShareGPTToMessages(column_map={"conversations": "conv"}, new_system_prompt="new")
    out = t({"conv": SHAREGPT["conversations"]})
    assert [m.role for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[0].content == "new"


def test_sharegpt_unknown_role_is_named():
    with pytest.raises(
        ValueError, match=r"conversations\[0\]: unknown 'from' value 'bot'; accepted values are"
    ):
        ShareGPTToMessages()({"conversations": [{"from": "bot", "value": "x"}]})


def test_openai_messages_with_text_parts_and_masking():
    record = {
        "chat": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
        ]
    }
    out = OpenAIToMessages(column_map={"messages": "chat"})(record)
    assert _view(out) == [("system", "sys", True), ("user", "ab", True), ("assistant", "c", False)]
    assert [m.masked for m in OpenAIToMessages(train_on_input=True)({"messages": record["chat"]})] == [
        True,
        False,
        False,
    ]


def test_openai_rejects_image_parts():
    record = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}
    with pytest.raises(ValueError, match=r"messages\[0\]: content part of type 'image_url' is not supported"):
        OpenAIToMessages()(record)


def test_openai_unknown_role_is_rejected_by_message():
    with pytest.raises(ValueError, match="Message role 'robot' is not supported"):
        OpenAIToMessages()({"messages": [{"role": "robot", "content": "x"}]})


def test_chosen_rejected_conversations():
    record = {
        "chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "good"}],
        "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "bad"}],
    }
    out = ChosenRejectedToMessages()(record)
    assert _view(out["chosen"]) == [("user", "q", True), ("assistant", "good", False)]
    assert _view(out["rejected"]) == [("user", "q", True), ("assistant", "bad", False)]


def test_chosen_rejected_strings_with_prompt_and_column_map():
    t = ChosenRejectedToMessages(
        train_on_input=True, column_map={"prompt": "p", "chosen": "c", "rejected": "r"}
    )
    out = t({"p": "q", "c": "good", "r": "bad"})
    assert _view(out["chosen"]) == [("user", "q", False), ("assistant", "good", False)]
    assert _view(out["rejected"]) == [("user", "q", False), ("assistant", "bad", False)]


def test_chosen_rejected_prompt_prepended_to_answer_only_conversations():
    record = {
        "prompt": "q",
        "chosen": [{"role": "assistant", "content": "good"}],
        "rejected": [{"role": "assistant", "content": "bad"}],
    }
    out = ChosenRejectedToMessages()(record)
    assert _view(out["chosen"]) == [("user", "q", True), ("assistant", "good", False)]


def test_chosen_rejected_string_without_prompt_is_explained():
    with pytest.raises(
        KeyError,
        match=r"'chosen' is a string, so a prompt column is needed, but column 'prompt' is not in the record",
    ):
        ChosenRejectedToMessages()({"chosen": "a", "rejected": "b"})


def test_message_defaults_unchanged():
    m = Message("user", "x")
    assert (m.masked, m.eot) == (False, True)
