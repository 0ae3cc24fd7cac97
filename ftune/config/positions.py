"""`tokenizer.max_seq_len` against the positions the model has, checked without torch.

A sample is cut to ``tokenizer.max_seq_len`` tokens; the model holds positions (its RoPE cache,
``model.max_seq_len``) for at most its own length, and was trained for the ``max_position_embeddings``
of its checkpoint's config.json. A longer limit cuts nothing and fails (or extrapolates) only when a
long sample arrives, mid-run. So a limit above the model's positions is refused, not clamped: as pip
and uv refuse a requirement they cannot meet rather than pick another, ftune names the model's
positions and the key, and the user sets the length they mean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _config_json_positions(data: dict[str, Any]) -> tuple[int, str] | None:
    """(max_position_embeddings, where) from the checkpoint's config.json, or None."""
    checkpointer = data.get("checkpointer")
    folder = checkpointer.get("checkpoint_dir") if isinstance(checkpointer, dict) else None
    if not isinstance(folder, str):
        return None
    path = Path(folder).expanduser() / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a missing or broken config.json is the checkpointer's to report
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    for node in (config, text if isinstance(text, dict) else {}):
        value = node.get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, f"max_position_embeddings in {path}"
    return None


def max_seq_len_problems(data: dict[str, Any]) -> list[str]:
    """``tokenizer.max_seq_len`` above the model's positions: ``model.max_seq_len`` when the config sets
    it (the positions the model is built with), else its checkpoint's config.json."""
    tokenizer = data.get("tokenizer")
    length = tokenizer.get("max_seq_len") if isinstance(tokenizer, dict) else None
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        return []  # null (no truncation) or a value the range check reports
    model = data.get("model")
    built = model.get("max_seq_len") if isinstance(model, dict) else None
    if isinstance(built, int) and not isinstance(built, bool) and built > 0:
        limit, where = built, "model.max_seq_len"
    else:
        found = _config_json_positions(data)
        if found is None:
            return []
        limit, where = found
    if length <= limit:
        return []
    return [
        f"tokenizer.max_seq_len: {length} tokens is more than the model's {limit} positions ({where}); "
        f"a longer sample would reach positions the model does not have. Set tokenizer.max_seq_len={limit} "
        "or less."
    ]
