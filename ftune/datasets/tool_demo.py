"""The agent demo's task: word problems of several-digit arithmetic, solved by calling the calculator tool.

A small model cannot multiply 47 by 86 in its head; with the calculator tool it only has to turn the
question into an expression, call the tool, and copy its answer. Each question comes from one of four
templates with numbers drawn from a seed, and has one exact answer:

    A box holds 47 pens. How many pens are in 86 boxes and 312 loose pens? Answer with the number only.
      -> calculator("47 * 86 + 312") -> 4354

``write_tool_demo_data`` writes the three files the demo (benchmarks/agent_demo.py) trains and measures on:

- ``sft.jsonl``: traces that teach the tool-call format (``{"messages": [...]}`` for ``chat_dataset``):
  the question, the assistant's call written in the family's format (``ftune.agents.tool_formats``), the
  tool's answer (role ``tool``, as ``ToolEnvironment`` answers it) and the assistant's final answer;
- ``train_prompts.jsonl`` and ``heldout.jsonl``: questions with their answers (``prompt``, ``answer``) for
  ``prompt_dataset``: GRPO's prompts and the held-out exact match. Train and held-out questions never
  share their numbers.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from ftune.agents.environment import Message, ToolCall
from ftune.agents.tool_formats import FORMATS

SYSTEM_PROMPT = (
    'You can use a calculator: write <tool_call>\n{"name": "calculator", "arguments": {"expression": "..."}}'
    "\n</tool_call> and you get its result. Then answer with the number only."
)
SFT_FILE, TRAIN_FILE, HELDOUT_FILE = "sft.jsonl", "train_prompts.jsonl", "heldout.jsonl"
SUFFIX = " Answer with the number only."
# (question, expression) templates; a, b, c, d are drawn per question (see `_numbers`).
TEMPLATES = (
    ("A box holds {a} pens. How many pens are in {b} boxes and {c} loose pens?", "{a} * {b} + {c}"),
    (
        "A ticket costs {a} dollars. What do {b} tickets cost with a discount of {c} dollars?",
        "{a} * {b} - {c}",
    ),
    (
        "A farm has {a} rows of {b} trees and {c} rows of {d} trees. How many trees does it have?",
        "{a} * {b} + {c} * {d}",
    ),
    (
        "A truck carries {a} crates of {b} kg each, then unloads {c} kg. How many kg are left?",
        "{a} * {b} - {c}",
    ),
)


@dataclass(frozen=True)
class ToolTask:
    """One question: the user prompt, the expression that solves it and its exact answer."""

    prompt: str
    expression: str
    answer: str


def _numbers(rng: random.Random, template: int) -> dict[str, int]:
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    if template in (1, 3):  # a subtraction: keep the result positive
        return {"a": a, "b": b, "c": rng.randint(10, a * b - 1)}
    return {"a": a, "b": b, "c": rng.randint(10, 999) if template == 0 else rng.randint(12, 99),
            "d": rng.randint(12, 99)}  # fmt: skip


def generate_tool_tasks(n: int, *, seed: int = 0, exclude: frozenset[str] = frozenset()) -> list[ToolTask]:
    """`n` distinct questions, the templates in turn, numbers from `seed`; none whose expression is in `exclude`."""
    rng, tasks, seen = random.Random(seed), [], set(exclude)
    while len(tasks) < n:
        template = len(tasks) % len(TEMPLATES)
        question, expression = TEMPLATES[template]
        numbers = _numbers(rng, template)
        expr = expression.format(**numbers)
        if expr in seen:
            continue
        seen.add(expr)
        value = eval(expr, {"__builtins__": {}})  # noqa: S307 - our own template of integer literals
        tasks.append(ToolTask(question.format(**numbers) + SUFFIX, expr, str(value)))
    return tasks


def tool_trace(task: ToolTask, *, tool_format: str = "hermes") -> list[Message]:
    """The conversation that solves `task` with one calculator call, as the demo teaches it (see the module
    docstring); the call is written by `tool_format` (a name of ``ftune.agents.tool_formats.FORMATS``)."""
    calculator = ToolCall(name="calculator", arguments={"expression": task.expression}, id=None)
    call = FORMATS[tool_format].render([calculator])
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": task.answer},
        {"role": "assistant", "content": task.answer},
    ]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_tool_demo_data(
    data_dir: str | os.PathLike, *, n_sft: int = 400, n_train: int = 400, n_heldout: int = 100, seed: int = 0
) -> Path:
    """Write ``sft.jsonl``, ``train_prompts.jsonl`` and ``heldout.jsonl`` into `data_dir` (created); returns it.

    The held-out questions are drawn first (from `seed`), the SFT traces and the GRPO prompts after them from
    other seeds and never with a held-out expression.
    """
    out = Path(data_dir)
    out.mkdir(parents=True, exist_ok=True)
    heldout = generate_tool_tasks(n_heldout, seed=seed)
    taken = frozenset(t.expression for t in heldout)
    sft = generate_tool_tasks(n_sft, seed=seed + 1, exclude=taken)
    train = generate_tool_tasks(n_train, seed=seed + 2, exclude=taken)
    _write(out / SFT_FILE, [{"messages": tool_trace(t)} for t in sft])
    _write(out / TRAIN_FILE, [{"prompt": t.prompt, "answer": t.answer} for t in train])
    _write(out / HELDOUT_FILE, [{"prompt": t.prompt, "answer": t.answer} for t in heldout])
    return out
