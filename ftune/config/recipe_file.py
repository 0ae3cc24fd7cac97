"""A recipe file as a module, and the settings class it declares at its top (``SETTINGS = ...``).

`ftune run`, `ftune validate` and ``<recipe> --help`` read the settings from the recipe file itself,
so a copied recipe that declares its own settings (a dataclass with a new key) is checked
against them, not against the shipped recipe's. A config names its recipe in its header comment
(`# Run: ftune run <recipe> --config <this file>`, as `ftune convert` writes and the shipped configs
have): `recipe_in_header` reads it, for `ftune validate` without `--recipe`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from ftune import registry
from ftune.config.errors import ConfigError
from ftune.config.settings import Settings


def load_recipe_module(path: str | Path) -> ModuleType:
    """Import a recipe file (its ``main`` is not called: recipes run only under ``__main__``).

    The file's folder goes first on ``sys.path`` (as when Python runs it), so modules next to a
    copied recipe import.

    Raises:
        ConfigError: if the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"recipe file {str(path)!r} does not exist."])
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"ftune_recipe_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settings_of(module: ModuleType) -> type:
    """The settings dataclass a recipe module declares as ``SETTINGS``.

    Raises:
        ConfigError: if the module has no ``SETTINGS``, or it is not a ``Settings`` dataclass.
    """
    where = getattr(module, "__file__", module.__name__)
    if "SETTINGS" not in vars(module):
        raise ConfigError(
            [
                f"{where}: the recipe declares no SETTINGS. Add `SETTINGS = training.FullSettings` (or the "
                "dataclass of the settings it reads) at the top of the file, and read them with "
                "`s = cfg.settings(SETTINGS)`."
            ]
        )
    cls = module.SETTINGS
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and issubclass(cls, Settings)):
        raise ConfigError(
            [
                f"{where}: SETTINGS is {cls!r}; it must be a dataclass subclassing ftune.config.Settings "
                "(e.g. `@dataclass class MySettings(training.LoRASettings): ...`)."
            ]
        )
    return cls


def recipe_settings(path: str | Path) -> type:
    """The settings class declared by the recipe file at `path`."""
    return settings_of(load_recipe_module(path))


# `ftune run [--nproc_per_node N] <recipe>` in a comment line of a config's header.
_RUN = re.compile(r"^#.*?\bftune run\s+(?:--nproc_per_node[ =]\S+\s+)?([A-Za-z0-9_]+)\b")


def recipe_in_header(path: str | Path) -> str | None:
    """The shipped recipe a config file names in its header: the first `ftune run <recipe>` of the
    comment lines it starts with (None: no such line, or no shipped recipe of that name)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        if not line.startswith("#"):
            if line.strip():
                return None  # the header ends at the first key
            continue
        if (m := _RUN.match(line)) and m.group(1) in registry.RECIPES:
            return m.group(1)
    return None
