"""Record -> list[Message] transforms for the record shapes datasets come in.

Each transform is a callable taking one record (a dict, one row of a `datasets.Dataset`) and
returning the conversation as `list[Message]` (preference transforms return
`{"chosen": [...], "rejected": [...]}`). `column_map` maps the column name a transform expects
to the column name in your data, e.g. `column_map={"input": "question", "output": "answer"}`.

Masking (`Message.masked`): system messages are always masked; user (and tool) messages are
masked unless `train_on_input=True`; assistant messages are never masked. Masked tokens are
read by the model but get the ignore label, so the loss covers only what it should produce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ftune.config.record_checks import text_problem
from ftune.data.messages import Message

ALPACA_PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n"
)

SHAREGPT_ROLES: dict[str, str] = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}


def resolve_column_map(
    transform: str, expected: Sequence[str], column_map: Mapping[str, str] | None
) -> dict[str, str]:
    """Return {expected column: column in the data}, rejecting keys the transform does not use.

    Args:
        transform: name used in the error message.
        expected: the columns the transform reads.
        column_map: user mapping {expected column: column in the data}, or None.

    Raises:
        KeyError: a key of `column_map` is not one of `expected`.
    """
    column_map = dict(column_map or {})
    unknown = sorted(set(column_map) - set(expected))
    if unknown:
        raise KeyError(
            f"{transform}: column_map keys {unknown} are not columns this transform reads; "
            f"accepted keys are {list(expected)} (map each to the column name in your data, "
            f"e.g. column_map={{{expected[0]!r}: 'my_column'}})."
        )
    return {col: column_map.get(col, col) for col in expected}


def _get(record: Mapping[str, Any], transform: str, expected: str, actual: str) -> Any:
    try:
        return record[actual]
    except KeyError:
        raise KeyError(
            f"{transform}: column {actual!r} (for {expected!r}) is not in the record; the record has "
            f"columns {sorted(record)}. Set column_map={{{expected!r}: '<your column>'}} to point at "
            "the right one."
        ) from None


def column_text(value: Any, where: str) -> str:
    """A single-turn column's value as text: a string, or a number written as its text (CSV and
    parquet readers type a column of numbers as numbers). A null, a bool, a list or a mapping is refused.

    Raises:
        ValueError: naming `where` (the column), what it holds and the fix.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    problem = text_problem(value, where)
    if problem is not None:
        raise ValueError(problem)
    return value


def _with_system_prompt(messages: list[Message], new_system_prompt: str | None) -> list[Message]:
    if new_system_prompt is None:
        return messages
    kept = [m for m in messages if m.role != "system"]
    return [Message("system", new_system_prompt, masked=True), *kept]


class _ColumnTransform:
    """Shared column handling: `columns` maps each expected column to the data's column."""

    expected: tuple[str, ...] = ()

    def __init__(self, column_map: Mapping[str, str] | None) -> None:
        self.columns = resolve_column_map(type(self).__name__, self.expected, column_map)

    @property
    def required_columns(self) -> list[str]:
        """Column names (after `column_map`) a dataset must have for this transform."""
        return [self.columns[c] for c in self.expected]

    def _field(self, record: Mapping[str, Any], expected: str) -> Any:
        return _get(record, type(self).__name__, expected, self.columns[expected])

    def _text(self, record: Mapping[str, Any], expected: str) -> str:
        return column_text(self._field(record, expected), f"column {self.columns[expected]!r}")


class InputOutputToMessages(_ColumnTransform):
    """A single-turn record {"input": prompt, "output": answer} -> [user, assistant].

    Args:
        train_on_input: when False (default) the user message is masked.
        column_map: expected column ("input", "output") -> column in the data.
        new_system_prompt: when set, a masked system message with this text is prepended.
    """

    expected = ("input", "output")

    def __init__(
        self,
        *,
        train_on_input: bool = False,
        column_map: Mapping[str, str] | None = None,
        new_system_prompt: str | None = None,
    ) -> None:
        super().__init__(column_map)
        self.train_on_input = train_on_input
        self.new_system_prompt = new_system_prompt

    def __call__(self, record: Mapping[str, Any]) -> list[Message]:
        messages = [
            Message("user", self._text(record, "input"), masked=not self.train_on_input),
            Message("assistant", self._text(record, "output")),
        ]
        return _with_system_prompt(messages, self.new_system_prompt)


class AlpacaToMessages(_ColumnTransform):
    """An alpaca record {"instruction", "input", "output"} -> [user (alpaca prompt), assistant].

    The user message is the alpaca prompt text (`ALPACA_PROMPT_WITH_INPUT`, or
    `ALPACA_PROMPT_NO_INPUT` when "input" is empty or missing from the record).

    Args:
        train_on_input: when False (default) the prompt message is masked.
        column_map: expected column ("instruction", "input", "output") -> column in the data.
    """

    expected = ("instruction", "input", "output")

    def __init__(self, *, train_on_input: bool = False, column_map: Mapping[str, str] | None = None) -> None:
        super().__init__(column_map)
        self.train_on_input = train_on_input

    @property
    def required_columns(self) -> list[str]:
        """Columns a dataset must have; "input" is optional for alpaca."""
        return [self.columns["instruction"], self.columns["output"]]

    def __call__(self, record: Mapping[str, Any]) -> list[Message]:
        instruction = self._text(record, "instruction")
        extra = record.get(self.columns["input"])
        extra = "" if extra is None else column_text(extra, f"column {self.columns['input']!r}")
        if extra:
            prompt = ALPACA_PROMPT_WITH_INPUT.format(instruction=instruction, input=extra)
        else:
            prompt = ALPACA_PROMPT_NO_INPUT.format(instruction=instruction)
        return [
            Message("user", prompt, masked=not self.train_on_input),
            Message("assistant", self._text(record, "output")),
        ]


def _mask_for(role: str, train_on_input: bool) -> bool:
    if role == "system":
        return True
    return role != "assistant" and not train_on_input


def _text_content(content: Any, where: str) -> str:
    """OpenAI content is a string or a list of parts; only text parts are supported."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(
                    f"{where}: content part of type {kind!r} is not supported; only text parts "
                    "({'type': 'text', 'text': ...}) or plain string content are accepted."
                )
            problem = text_problem(part.get("text"), f"{where}: a content part's 'text'")
            if problem is not None:
                raise ValueError(problem)
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"{text_problem(content, f'{where}.content')} (or a list of text parts)")


class ShareGPTToMessages(_ColumnTransform):
    """A ShareGPT record {"conversations": [{"from": ..., "value": ...}, ...]} -> messages.

    Roles: "system", "human" (or "user"), "gpt" (or "assistant"), "tool".

    Args:
        train_on_input: when False (default) user and tool messages are masked.
        column_map: expected column ("conversations") -> column in the data.
        new_system_prompt: when set, replaces any system message in the record.
    """

    expected = ("conversations",)

    def __init__(
        self,
        *,
        train_on_input: bool = False,
        column_map: Mapping[str, str] | None = None,
        new_system_prompt: str | None = None,
    ) -> None:
        super().__init__(column_map)
        self.train_on_input = train_on_input
        self.new_system_prompt = new_system_prompt

    def __call__(self, record: Mapping[str, Any]) -> list[Message]:
        messages = []
        for i, turn in enumerate(self._field(record, "conversations")):
            where = f"ShareGPTToMessages: {self.columns['conversations']}[{i}]"
            if not isinstance(turn, Mapping) or "from" not in turn or "value" not in turn:
                raise ValueError(f"{where}: expected a dict with keys 'from' and 'value', got {turn!r}.")
            role = SHAREGPT_ROLES.get(turn["from"])
            if role is None:
                raise ValueError(
                    f"{where}: unknown 'from' value {turn['from']!r}; accepted values are "
                    f"{sorted(SHAREGPT_ROLES)}."
                )
            problem = text_problem(turn["value"], f"{self.columns['conversations']}[{i}].value")
            if problem is not None:
                raise ValueError(f"ShareGPTToMessages: {problem}")
            messages.append(Message(role, turn["value"], masked=_mask_for(role, self.train_on_input)))
        return _with_system_prompt(messages, self.new_system_prompt)


def openai_messages(
    raw: Sequence[Mapping[str, Any]], *, train_on_input: bool, where: str = "messages"
) -> list[Message]:
    """Convert OpenAI-style dicts [{"role": ..., "content": ...}] to `Message`s with masking.

    Args:
        raw: the list of role/content dicts.
        train_on_input: when False, user and tool messages are masked.
        where: names the column in error messages.

    Returns:
        The messages, system always masked, assistant never masked.

    Raises:
        ValueError: a turn is not a role/content dict, or its content is not text.
    """
    messages = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, Mapping) or "role" not in turn:
            raise ValueError(f"{where}[{i}]: expected a dict with keys 'role' and 'content', got {turn!r}.")
        role = turn["role"]
        content = _text_content(turn.get("content"), f"{where}[{i}]")
        messages.append(Message(role, content, masked=_mask_for(role, train_on_input)))
    return messages


class OpenAIToMessages(_ColumnTransform):
    """An OpenAI record {"messages": [{"role": ..., "content": ...}, ...]} -> messages.

    Args:
        train_on_input: when False (default) user and tool messages are masked.
        column_map: expected column ("messages") -> column in the data.
        new_system_prompt: when set, replaces any system message in the record.
    """

    expected = ("messages",)

    def __init__(
        self,
        *,
        train_on_input: bool = False,
        column_map: Mapping[str, str] | None = None,
        new_system_prompt: str | None = None,
    ) -> None:
        super().__init__(column_map)
        self.train_on_input = train_on_input
        self.new_system_prompt = new_system_prompt

    def __call__(self, record: Mapping[str, Any]) -> list[Message]:
        raw = self._field(record, "messages")
        messages = openai_messages(raw, train_on_input=self.train_on_input, where=self.columns["messages"])
        return _with_system_prompt(messages, self.new_system_prompt)


class ChosenRejectedToMessages(_ColumnTransform):
    """A preference record -> {"chosen": list[Message], "rejected": list[Message]}.

    Two shapes are accepted:
      - "chosen" and "rejected" are full conversations (lists of role/content dicts), as in
        Anthropic HH-RLHF style data; a string "prompt" column, when present and the
        conversation has no user turn, is prepended as the user message;
      - "chosen" and "rejected" are answer strings and "prompt" is the user prompt.

    Args:
        train_on_input: when False (default) the prompt messages are masked.
        column_map: expected column ("prompt", "chosen", "rejected") -> column in the data.
        new_system_prompt: when set, replaces any system message in both conversations.
    """

    expected = ("prompt", "chosen", "rejected")

    def __init__(
        self,
        *,
        train_on_input: bool = False,
        column_map: Mapping[str, str] | None = None,
        new_system_prompt: str | None = None,
    ) -> None:
        super().__init__(column_map)
        self.train_on_input = train_on_input
        self.new_system_prompt = new_system_prompt

    @property
    def required_columns(self) -> list[str]:
        """Columns a dataset must have; "prompt" is needed only when answers are strings."""
        return [self.columns["chosen"], self.columns["rejected"]]

    def _side(self, record: Mapping[str, Any], side: str) -> list[Message]:
        value = self._field(record, side)
        prompt = record.get(self.columns["prompt"])
        where = f"column {self.columns['prompt']!r}"
        user = (
            Message("user", column_text(prompt, where), masked=not self.train_on_input)
            if prompt is not None
            else None
        )
        if isinstance(value, str):
            if user is None:
                raise KeyError(
                    f"ChosenRejectedToMessages: {side!r} is a string, so a prompt column is needed, but "
                    f"column {self.columns['prompt']!r} is not in the record (columns: {sorted(record)}). "
                    "Set column_map={'prompt': '<your column>'}."
                )
            messages = [user, Message("assistant", value)]
        else:
            messages = openai_messages(value, train_on_input=self.train_on_input, where=self.columns[side])
            if user is not None and not any(m.role == "user" for m in messages):
                messages.insert(0, user)
        return _with_system_prompt(messages, self.new_system_prompt)

    def __call__(self, record: Mapping[str, Any]) -> dict[str, list[Message]]:
        return {"chosen": self._side(record, "chosen"), "rejected": self._side(record, "rejected")}
