"""lm-eval task names, checked before a model loads.

lm_eval's TaskManager indexes ~15,000 task YAMLs (seconds), and the eval recipe used to meet a
misspelt task name only after loading the model (19 s on the quickstart model). The names that
task YAMLs declare (``task:``, ``group:``, ``tag:``, as scalars, flow lists or block lists) are read
here as text, in a fraction of a second and without importing lm_eval. The scan is a pre-filter:
a name it finds is a task; a name it does not find may still be one (lm_eval generates some names
from templates), so only then is the authoritative TaskManager built, still before the model loads.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

_KEY = re.compile(r"^\s*-?\s*(?:task|group|tag):\s*(.*)$")
_ITEM = re.compile(r"^\s*-\s*([\w.\-]+)\s*$")


def builtin_tasks_folder() -> Path | None:
    """lm_eval's own task folder (found, not imported), or None when lm_eval is not installed."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def declared_names(folders: Iterable[Path]) -> set[str]:
    """Every task, group and tag name the YAML files under `folders` declare by name."""
    names: set[str] = set()
    for folder in folders:
        for path in folder.rglob("*.yaml"):
            lines = path.read_text(encoding="utf-8", errors="ignore").splitlines()
            for i, line in enumerate(lines):
                match = _KEY.match(line)
                if match is None:
                    continue
                value = match.group(1).split("#", 1)[0].strip()
                if value.startswith("["):
                    names.update(v.strip().strip("'\"") for v in value.strip("[]").split(","))
                elif value:
                    names.add(value.strip("'\""))
                else:  # a block list follows
                    for item in lines[i + 1 :]:
                        if (found := _ITEM.match(item)) is not None:
                            names.add(found.group(1))
                        elif item.strip():
                            break
    return names


def unknown_by_scan(tasks: Sequence[str], include_path: str | None, *, builtin_tasks: bool) -> list[str]:
    """The names of `tasks` that no scanned YAML declares (empty: all are tasks, nothing to import)."""
    folders = [Path(include_path).expanduser()] if include_path else []
    builtin = builtin_tasks_folder() if builtin_tasks else None
    folders += [builtin] if builtin is not None else []
    known = declared_names(f for f in folders if f.is_dir())
    return [t for t in tasks if t not in known]
