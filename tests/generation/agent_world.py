"""A scripted tool world for the multi-turn tests: a character tokenizer with a ChatML-like template, a
calculator episode in plain Python, and a minimal tool-call parser (the families' formats are
ftune.agents'; these tests need only one that a random model sometimes writes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ftune.agents import EnvStep, ToolCall, Turn

SPECIALS = ["<pad>", "<s>", "<end>", "<start>"]  # ids 0..3
CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 \n+*=():,.-{}\"'?!ABCDEFGHIJKLMNOP")[: 64 - len(SPECIALS)]
VOCAB = SPECIALS + CHARS  # 64 ids, one a character: every text has one tokenization
PAD, END = 0, 2


class CharTokenizer:
    """Characters and the four special tokens; `render` is the template <start>role\\ncontent<end>\\n."""

    pad_id, stop_tokens = PAD, [END]

    def __init__(self, merges: tuple[str, ...] = ()) -> None:
        self.pieces = VOCAB + list(merges)  # a merge ("ab") makes a second tokenization of its text
        self.vocab_size = len(self.pieces)

    def render(self, messages, *, add_generation_prompt: bool = False) -> str:
        text = "".join(f"<start>{m.role}\n{m.content}<end>\n" for m in messages)
        return text + ("<start>assistant\n" if add_generation_prompt else "")

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        ids, at = [], 0
        by_length = sorted(range(len(self.pieces)), key=lambda i: -len(self.pieces[i]))
        while at < len(text):
            i = next((i for i in by_length if text.startswith(self.pieces[i], at)), None)
            if i is None:
                raise ValueError(f"CharTokenizer: no token for {text[at]!r}")
            ids.append(i)
            at += len(self.pieces[i])
        return ([1] if add_bos else []) + ids + ([END] if add_eos else [])

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join("" if skip_special_tokens and i < 4 else self.pieces[i] for i in ids)


CALL = re.compile(r"calc\(([^()]*)\)")


def parse(text: str) -> Turn:
    """`calc(<digits and + *>)` anywhere in the text is a call; anything else in the brackets is an error."""
    calls, error = [], None
    for m in CALL.finditer(text):
        if re.fullmatch(r"[0-9+* ]+", m.group(1)):
            calls.append(ToolCall("calc", {"expression": m.group(1)}, None))
        else:
            error = f"calc takes digits, + and *; got {m.group(1)!r}"
    return Turn(text, CALL.sub("", text), tuple(calls), error)


class CalculatorEpisode:
    """Answers every turn with a tool message for `turns - 1` turns, then ends; reward 0.5 a call, 1 for the answer."""

    def __init__(self, question: str, answer: str, turns: int) -> None:
        self.answer, self.left = answer, turns

    def step(self, turn: Turn) -> EnvStep:
        self.left -= 1
        if self.left <= 0:
            return EnvStep([], 1.0 if self.answer in turn.content else 0.0, True)
        if turn.error:
            return EnvStep([{"role": "tool", "content": f"error: {turn.error}"}], 0.0, False)
        if turn.tool_calls:
            expression = turn.tool_calls[0].arguments["expression"]
            return EnvStep([{"role": "tool", "content": str(eval(expression))}], 0.5, False)  # noqa: S307 - digits, + and *
        return EnvStep([{"role": "user", "content": "use calc(...) please"}], 0.0, False)


class CalculatorEnvironment:
    """Episodes of a record {"question", "answer", "turns"}: a system and a user message, then the calculator."""

    tools: list[dict[str, Any]] = []

    def start(self, record: Mapping[str, Any]):
        messages = [
            {"role": "system", "content": "write calc(1+2) to add"},
            {"role": "user", "content": record["question"]},
        ]
        return messages, CalculatorEpisode(record["question"], record["answer"], record["turns"])


RECORDS = [
    {"question": "2+3?", "answer": "5", "turns": 3},
    {"question": "4*6?", "answer": "24", "turns": 1},
    {"question": "7+8*2?", "answer": "23", "turns": 4},
]
