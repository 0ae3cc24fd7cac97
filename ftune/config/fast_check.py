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
from ftune.config.recipe_kind import check_resume_folder, recipe_kind_problems
from ftune.config.run import default_config_for, parse_recipe_args
from ftune.config.settings import Settings, collect_problems

# Packages whose __init__ imports torch; their settings modules (and ftune.datasets.file_check) do not.
_HEAVY = (
    "ftune.training",
    "ftune.checkpointing",
    "ftune.evaluation",
    "ftune.generation",
    "ftune.quantization",
    "ftune.runtime",
    "ftune.datasets",
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
def _light_packages() -> Iterator[None]:
    """While the block runs, importing ``ftune.<heavy>.<module>`` skips the package's ``__init__`` (torch)."""
    before = set(sys.modules)
    stubs = []
    for heavy in _HEAVY:
        if heavy not in sys.modules:
            stub = types.ModuleType(heavy)
            stub.__path__ = [str(Path(__file__).resolve().parents[1] / heavy.split(".")[1])]
            sys.modules[heavy] = stub
            stubs.append(heavy)
    try:
        yield
    finally:
        for key in set(sys.modules) - before:
            if any(key == s or key.startswith(s + ".") for s in stubs):
                del sys.modules[key]
        for key in stubs:
            sys.modules.pop(key, None)


@contextmanager
def _settings_class(dotted: str) -> Iterator[type | None]:
    """The settings class, importable while the block runs (type hints resolve in its module)."""
    package, _, name = dotted.rpartition(".")
    if not package.startswith("ftune."):
        yield None
        return
    with _light_packages():
        try:
            cls = getattr(importlib.import_module(f"{package}.settings"), name, None)
        except ImportError:
            cls = None
        yield cls if isinstance(cls, type) and issubclass(cls, Settings) else None


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
        # A config or dataset of another kind of run first: it explains the key problems that follow.
        return recipe_kind_problems(cfg, recipe) + collect_problems(cfg, cls, signatures=False)


# A supervised .jsonl file up to this size has every line parsed before the recipe starts (about
# 0.5 s); a bigger one is parsed by `datasets` when it loads, which names a bad line only then.
_EVERY_LINE_MAX_BYTES = 64 << 20
# Dataset builders whose records are preference pairs read from `source` (ftune.datasets).
_PREFERENCE_BUILDERS = ("ftune.datasets.preference_dataset", "ftune.datasets.preference.preference_dataset")


def check_data_files(cfg) -> None:
    """Check the local data files of `dataset` / `dataset_val` (ftune.datasets builders), without torch.

    The checks the dataset makes when it loads, made before the recipe starts, so a bad file fails
    here and not after the model loads: a missing, empty, non-UTF-8 or unsupported file and a
    broken JSON line (`ftune.datasets.source.check_local_source`), and for preference data, a
    record without an answer or the prompt, or with one empty (ftune.datasets.file_check). Hub
    ids, folders and split slices are left to the dataset's own check.

    Raises:
        FileNotFoundError, ValueError: as the dataset would raise them (file:line where it applies).
    """
    data = cfg.to_dict()
    for section in ("dataset", "dataset_val"):
        node = data.get(section)
        component = node.get("_component_") if isinstance(node, dict) else None
        if not (isinstance(component, str) and component.startswith("ftune.datasets.")):
            continue
        if isinstance(node.get("source"), str):
            path = Path(node["source"]).expanduser()
            small = path.is_file() and path.stat().st_size <= _EVERY_LINE_MAX_BYTES
            with _light_packages():
                source = importlib.import_module("ftune.datasets.source")
                source.check_local_source(node["source"], node.get("data_files"), every_line=small)
        if component not in _PREFERENCE_BUILDERS:
            continue
        column_map = node.get("column_map") or {}
        path = Path(str(node.get("source", ""))).expanduser()
        if (
            not isinstance(column_map, dict)
            or node.get("data_files") is not None
            or node.get("split", "train") != "train"
            or path.suffix.lower() not in (".json", ".jsonl")
            or not path.is_file()
        ):
            continue  # the dataset's own load reports these (bad column_map keys included)
        with _light_packages():
            file_check = importlib.import_module("ftune.datasets.file_check")
            if set(column_map) - set(file_check.PREFERENCE_FIELDS):
                continue
            columns = {k: column_map.get(k, k) for k in file_check.PREFERENCE_FIELDS}
            lines = file_check.json_records(path)
            if lines is not None:
                rows = [(f"{path}:{number}", record) for number, record in lines]
                file_check.check_preference_rows(rows, columns, str(node["source"]))


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
    if problems is not None:
        check_data_files(cfg)
        check_resume_folder(cfg, recipe)
    return problems is not None
