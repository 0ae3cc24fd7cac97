"""Check a config against a recipe's settings before torch is imported: common mistakes in under a second.

`ftune run` calls `fast_check` first, `ftune validate` `fast_problems`. It reads the recipe file's
``SETTINGS = ...`` line with `ast` (the file is not run, so its ``import torch`` is not either),
imports only the `settings` module of the package the class comes from (``from ftune import
training`` + ``training.LoRASettings`` -> ``ftune.training.settings``) with that package's
``__init__`` (which imports torch) skipped, and checks the loaded config: unknown keys, types,
ranges, sections, trusted components. Component signatures need the targets imported, so they are
checked afterwards, by the recipe itself or `ftune validate`.

The package ``__init__`` is skipped by a placeholder package in `sys.modules` while the settings
module loads; the placeholder and every module loaded under it are removed afterwards, so the real
import later is untouched. A recipe whose SETTINGS is defined in the file itself (a copied recipe
with its own dataclass) has no fast check: the recipe's own check reports the same problems.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ftune.config.errors import ConfigError
from ftune.config.loading import load_config
from ftune.config.run import default_config_for, parse_recipe_args
from ftune.config.settings import Settings, collect_problems

# Packages whose __init__ imports torch; their settings modules do not.
_HEAVY = (
    "ftune.training",
    "ftune.checkpointing",
    "ftune.evaluation",
    "ftune.generation",
    "ftune.quantization",
    "ftune.runtime",
)


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and (base := _dotted(expr.value)):
        return f"{base}.{expr.attr}"
    return None


def settings_path(recipe: Path) -> str | None:
    """The full dotted name of the recipe file's SETTINGS (e.g. ``ftune.training.LoRASettings``), or None."""
    try:
        tree = ast.parse(recipe.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None  # the recipe's own import reports it
    names: dict[str, str] = {}
    target: str | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            names.update(
                {
                    a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                    for a in node.names
                }
            )
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SETTINGS" for t in node.targets
        ):
            target = _dotted(node.value)
    if target is None:
        return None
    head, _, rest = target.partition(".")
    if head not in names:
        return None  # defined in the recipe file itself
    return names[head] + (f".{rest}" if rest else "")


@contextmanager
def _settings_class(dotted: str) -> Iterator[type | None]:
    """The settings class, importable while the block runs (type hints resolve in its module)."""
    package, _, name = dotted.rpartition(".")
    if not package.startswith("ftune."):
        yield None
        return
    before = set(sys.modules)
    stubs = []
    for heavy in _HEAVY:
        if heavy not in sys.modules:
            stub = types.ModuleType(heavy)
            stub.__path__ = [str(Path(__file__).resolve().parents[1] / heavy.split(".")[1])]
            sys.modules[heavy] = stub
            stubs.append(heavy)
    try:
        try:
            cls = getattr(importlib.import_module(f"{package}.settings"), name, None)
        except ImportError:
            cls = None
        yield cls if isinstance(cls, type) and issubclass(cls, Settings) else None
    finally:
        for key in set(sys.modules) - before:
            if any(key == s or key.startswith(s + ".") for s in stubs):
                del sys.modules[key]
        for key in stubs:
            sys.modules.pop(key, None)


def fast_problems(cfg, recipe: Path) -> list[str] | None:
    """The problems of `cfg` against the recipe file's settings, found without importing torch.

    Returns:
        The problems (empty: none), or None when the settings class cannot be had without running
        the recipe (SETTINGS defined in the file itself, or outside ftune).
    """
    dotted = settings_path(recipe)
    if dotted is None:
        return None
    with _settings_class(dotted) as cls:
        if cls is None:
            return None
        return collect_problems(cfg, cls, signatures=False)


def fast_check(recipe: Path, recipe_args: list[str]) -> bool:
    """Load the config a recipe would load and check it against the recipe's settings, without torch.

    Returns:
        True when the settings were checked, False when only the config file and overrides were
        (no SETTINGS found without running the recipe, or no config named).

    Raises:
        ConfigError: every problem found.
    """
    config, overrides = parse_recipe_args(recipe_args)
    config = config or default_config_for(str(recipe))
    if config is None:
        return False
    cfg = load_config(config, overrides)
    problems = fast_problems(cfg, recipe)
    if problems:
        raise ConfigError(problems, cfg.source)
    return problems is not None
