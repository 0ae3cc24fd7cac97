"""Types of the values a record gives the model and the rewards, checked without torch or `datasets`.

A prompt or a message's content must be text: a number, a null or a mapping would reach the chat
template (a traceback inside Jinja) or be trained on as its repr. A reference answer a reward
compares against must be a string or a number: a null would be compared as the text "None".

The datasets (`ftune.datasets`) and the built-in rewards (`ftune.rewards`) call these on every record
they use; `ftune run` and `ftune validate` call `check_prompt_rows` on a local prompt file before the
model loads (ftune.cli.fast_check), so the message names file:line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_SHOWN = 5  # bad records quoted in one message; the rest are counted
# The built-in rewards that compare a completion with a sample's field (their `field` argument).
REFERENCE_REWARDS = (
    "ftune.rewards.ExactMatch",
    "ftune.rewards.builtins.ExactMatch",
    "ftune.rewards.NumericAnswer",
    "ftune.rewards.builtins.NumericAnswer",
)


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({' '.join(repr(value).split())[:60]})"


def text_problem(value: Any, what: str) -> str | None:
    """Why `value` cannot be the text of `what` (a prompt, a message's content), or None for a string."""
    if isinstance(value, str):
        return None
    return f"{what} is {_shown(value)}, not text; write it as a JSON string (in quotes) or fix the column it comes from"


def reference_problem(value: Any, field: str) -> str | None:
    """Why `value` cannot be a reference answer (None when it can: a string, or a number as its text).

    A null would be compared as the text "None" and a list or a mapping as its repr, so a completion
    "None" would score 1: refused instead.
    """
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None
    return (
        f"the sample's {field!r} is {_shown(value)}, not a reference answer (a string or a number); write "
        "the answer in the data or delete the record"
    )


def prompt_problem(prompt: Any, column: str) -> str | None:
    """Why a prompt record's `column` value cannot be a prompt: a non-empty string, or a non-empty list
    of {"role", "content"} messages whose contents are strings. None when it can."""
    if isinstance(prompt, str):
        return (
            None
            if prompt.strip()
            else f"the prompt {column!r} is empty; write the prompt or delete the record"
        )
    if not isinstance(prompt, list) or not prompt:
        return (
            f"the prompt {column!r} is {_shown(prompt)}; it must be a non-empty string or a list of "
            '{"role": ..., "content": ...} messages (or point column_map at the prompt column)'
        )
    for i, message in enumerate(prompt):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            return f"{column}[{i}] is {_shown(message)}; each message must be an object with 'role' and 'content'"
        problem = text_problem(message["content"], f"{column}[{i}].content")
        if problem is not None:
            return problem
    return None


def check_prompt_rows(
    rows: Iterable[tuple[str, Any]], column: str, reference_fields: Mapping[str, str], source: str
) -> None:
    """Refuse prompt records whose prompt is not text, or whose reference field a reward reads is unusable.

    Args:
        rows: (where, record) pairs; `where` is ``file:line`` or ``<source> row N``.
        column: the prompt column (the column map applied).
        reference_fields: reward name -> the sample field it compares against (ExactMatch, NumericAnswer).
        source: the dataset source, for the message.

    Raises:
        ValueError: every bad record (the first few quoted, the rest counted), with the fix.
    """
    bad = []
    for where, record in rows:
        if not isinstance(record, Mapping):
            bad.append(f"{where}: {_shown(record)}, not an object with {column!r}.")
            continue
        problem = prompt_problem(record.get(column), column)
        for reward, field in reference_fields.items():
            if problem is None and field not in record:
                problem = (
                    f"the reward {reward!r} reads the field {field!r}, which this record does not have (its "
                    f"keys: {sorted(record)}); add it, or set rewards.rewards.{reward}.field to one of them"
                )
            elif problem is None:
                found = reference_problem(record[field], field)
                problem = f"{found} (read by the reward {reward!r})" if found else None
        if problem is not None:
            bad.append(f"{where}: {problem}.")
    if bad:
        more = f"\n  ... and {len(bad) - _SHOWN} more record(s) like these" if len(bad) > _SHOWN else ""
        raise ValueError(
            f"Prompt dataset {source}: {len(bad)} record(s) cannot be used:\n  "
            + "\n  ".join(bad[:_SHOWN])
            + more
        )


def reference_fields_of(rewards_node: Any) -> dict[str, str]:
    """Reward name -> `field`, for the built-in rewards of a config's ``rewards`` section that compare
    a completion with a sample field (a reward of your own is not read)."""
    inner = rewards_node.get("rewards") if isinstance(rewards_node, Mapping) else None
    if not isinstance(inner, Mapping):
        return {}
    return {
        str(name): node["field"]
        for name, node in inner.items()
        if isinstance(node, Mapping)
        and node.get("_component_") in REFERENCE_REWARDS
        and isinstance(node.get("field"), str)
    }


KTO_FIELDS = ("prompt", "completion", "label")


def kto_record_problem(record: Any, columns: Mapping[str, str]) -> str | None:
    """Why one KTO record cannot train (a prompt, a non-empty completion, a true/false label), or None.

    Args:
        record: one row: {prompt, completion, label}; prompt and completion as text or messages.
        columns: "prompt", "completion", "label" -> the data's column names (the column map applied).
    """
    if not isinstance(record, Mapping):
        return f"{_shown(record)}, not an object with {', '.join(repr(c) for c in columns.values())}"
    problem = prompt_problem(record.get(columns["prompt"]), columns["prompt"])
    if problem is not None:
        return problem
    completion = record.get(columns["completion"])
    empty = isinstance(completion, str) and not completion.strip()
    if not isinstance(completion, (str, list)) or empty or not completion:
        return (
            f"the completion {columns['completion']!r} is {_shown(completion)}; it must be a non-empty string "
            "or a list of assistant messages: write the answer or delete the record"
        )
    label = record.get(columns["label"])
    if not isinstance(label, bool):
        return (
            f"the label {columns['label']!r} is {_shown(label)}; it must be true (a desirable answer) or false "
            "(an undesirable one), unquoted"
        )
    return None


def check_kto_rows(rows: Iterable[tuple[str, Any]], columns: Mapping[str, str], source: str) -> None:
    """Refuse KTO records that cannot train, and a set whose labels are all of one value.

    KTO weighs desirable answers against undesirable ones through a shared KL estimate; with one kind
    only, half of its loss never applies (and TRL's weight advice divides by the missing count).

    Args:
        rows: (where, record) pairs; `where` is ``file:line`` or ``row N``.
        columns: "prompt", "completion", "label" -> the data's column names.
        source: the dataset source, for the message.

    Raises:
        ValueError: every unusable record (the first few quoted, the rest counted), or the counts of a
            one-label set, with the fix.
    """
    bad, counts = [], {True: 0, False: 0}
    for where, record in rows:
        problem = kto_record_problem(record, columns)
        if problem is not None:
            bad.append(f"{where}: {problem}.")
        else:
            counts[record[columns["label"]]] += 1
    if bad:
        more = f"\n  ... and {len(bad) - _SHOWN} more record(s) like these" if len(bad) > _SHOWN else ""
        raise ValueError(
            f"KTO dataset {source}: {len(bad)} record(s) cannot train (each needs a prompt, a non-empty "
            "completion and a true/false label):\n  " + "\n  ".join(bad[:_SHOWN]) + more
        )
    if not counts[True] or not counts[False]:
        raise ValueError(
            f"KTO dataset {source} ({columns['label']!r}): {counts[True]} desirable (true) and {counts[False]} "
            "undesirable (false) record(s); KTO needs both kinds. Add records of the missing kind, or train "
            "on the desirable answers alone with an SFT recipe."
        )


def answer_problem(value: Any, column: str) -> str | None:
    """Why `value` cannot be a preference pair's answer in `column` (a non-empty string, content parts,
    or a list of assistant turns), or None."""
    if (isinstance(value, str) and value.strip()) or (isinstance(value, list) and value):
        return None
    return (
        f"the answer {column!r} is {_shown(value)}; it must be a non-empty string, a list of content parts or a "
        "list of {'role': 'assistant', 'content': ...} turns: write the answer or delete the record"
    )


def check_answer_rows(rows: Iterable[tuple[str, Any]], columns: Iterable[str], source: str) -> None:
    """Refuse preference records with an answer missing or empty (image-grounded pairs).

    Args:
        rows: (where, record) pairs; `where` is ``file:line`` or ``row N``.
        columns: the answers' column names (chosen, rejected; the column map applied).
        source: the dataset source, for the message.

    Raises:
        ValueError: every unusable record (the first few quoted, the rest counted), with the fix.
    """
    columns = list(columns)
    bad = []
    for where, record in rows:
        for column in columns:
            value = record.get(column) if isinstance(record, Mapping) else None
            if (problem := answer_problem(value, column)) is not None:
                bad.append(f"{where}: {problem}.")
                break
    if bad:
        more = f"\n  ... and {len(bad) - _SHOWN} more record(s) like these" if len(bad) > _SHOWN else ""
        raise ValueError(
            f"preference dataset {source}: {len(bad)} record(s) cannot train (each needs both answers, "
            f"{' and '.join(repr(c) for c in columns)}; dataset.column_map names other columns):\n  "
            + "\n  ".join(bad[:_SHOWN])
            + more
        )
