"""Held-out chat records as exact-match samples: the conversation up to the last assistant turn is
the prompt, that turn's content is the reference.

A record is a JSONL line in OpenAI's `messages` layout, as the demo task writes it:

    {"messages": [{"role": "user", "content": "Rewrite the date ..."}, {"role": "assistant", "content": "14/07/2023"}]}

A system message, or earlier turns, stay in the prompt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ftune.data.messages import ROLES, Message

Sample = tuple[list[Message], str]


def _record(line: str, where: str) -> Sample:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg}); each line must be one JSON record.") from None
    messages = record.get("messages") if isinstance(record, dict) else None
    ok = (
        isinstance(messages, list)
        and len(messages) >= 2
        and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            for m in messages
        )
    )
    if not ok or messages[-1]["role"] != "assistant":
        raise ValueError(
            f'{where}: expected {{"messages": [..., {{"role": "user", "content": ...}}, '
            f'{{"role": "assistant", "content": <reference>}}]}}, got {line.strip()[:120]!r}. The last '
            "message is the reference answer, the ones before it the prompt."
        )
    prompt = [Message(m["role"], m["content"]) for m in messages[:-1]]
    return prompt, messages[-1]["content"]


def read_chat_samples(path: str | os.PathLike, *, limit: int | None = None) -> list[Sample]:
    """Read (prompt messages, reference) pairs from a JSONL file of chat records.

    Args:
        path: the JSONL file (e.g. the demo's heldout.jsonl).
        limit: read at most this many records (None: all).

    Returns:
        The samples in file order.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: a line that is not a chat record ending with an assistant message (file:line named),
            or a file without records.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"heldout_file {str(path)!r} does not exist; pass a JSONL of chat records "
            '({"messages": [...user..., ...assistant...]}) or heldout_file=null to skip exact match.'
        )
    samples: list[Sample] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if limit is not None and len(samples) >= limit:
                break
            if line.strip():
                samples.append(_record(line, f"{path}:{number}"))
    if not samples:
        raise ValueError(f"heldout_file {str(path)!r} holds no records; write one chat record per line.")
    return samples
