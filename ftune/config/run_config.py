"""Which config a run reads: the one place a recipe's default config is resolved.

A run names its config with ``--config <name|path>``; without it, a shipped recipe's own file runs
its registry default (``Recipe.default_config``), and any other recipe file (a copy, wherever it
is and whatever its name) has none: it says so rather than guess. `ftune run` (before torch, and
before torchrun starts a rank), the recipes' own entry (``config.run``, in every rank), ``--help``,
`ftune validate --recipe` and `ftune cp` all ask `default_config` (`ftune ls` shows the registry's
field: it imports nothing of ftune.config, to start in a fraction of a second).
"""

from __future__ import annotations

from pathlib import Path

from ftune import registry
from ftune.config.errors import ConfigError
from ftune.config.loading import Config, load_config, resolve_config_path


def shipped_recipe(recipe: str | Path | None) -> registry.Recipe | None:
    """The registry entry of a shipped recipe, given its name or its own file; None for any other file.

    A copy of a shipped recipe is not it, even under the same name: it is the user's to change.
    """
    if recipe is None:
        return None
    if isinstance(recipe, str) and recipe in registry.RECIPES:
        return registry.RECIPES[recipe]
    path = Path(recipe)
    found = registry.RECIPES.get(path.stem)
    return found if found is not None and found.file.resolve() == path.resolve() else None


def default_config(recipe: str | Path | None) -> str | None:
    """The config a run of `recipe` (a shipped recipe's name or a recipe file) reads without ``--config``."""
    shipped = shipped_recipe(recipe)
    return shipped.default_config if shipped is not None else None


def config_to_read(recipe: str | Path | None, given: str | None) -> Path | None:
    """The YAML file a run of `recipe` reads: `given` (a config name or path), else its default config.

    Returns:
        The file, or None when no config was given and the recipe has no default (a copied recipe).

    Raises:
        ConfigError: `given` names no file and no shipped config.
    """
    name = given if given is not None else default_config(recipe)
    return resolve_config_path(name) if name is not None else None


def parse_recipe_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """Split a recipe's command line into (config name or path, overrides); drops ``--debug``."""
    config: str | None = None
    overrides: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--debug":
            continue
        if arg == "--config":
            config = next(it, None)
            if config is None:
                raise ConfigError(
                    ["--config needs a value: a shipped config name or a path to a .yaml file."]
                )
        elif arg.startswith("--config="):
            config = arg.split("=", 1)[1]
        elif arg.startswith("--"):
            raise ConfigError(
                [f"unknown option {arg!r}: a recipe takes --config <name|path> and key=value overrides."]
            )
        else:
            overrides.append(arg)
    return config, overrides


def load_run_config(recipe: str | Path | None, argv: list[str]) -> Config | None:
    """Load the config a run of `recipe` reads, from its command line (``--config``, overrides).

    The one way a run gets its config: `ftune run` calls it once before torch is imported (and
    before torchrun starts any rank), and the recipe's entry calls it when nothing loaded it yet.

    Returns:
        The loaded config, or None when no config was given and the recipe has no default.

    Raises:
        ConfigError: a bad option, an unknown config, or a config that does not load.
    """
    given, overrides = parse_recipe_args(argv)
    path = config_to_read(recipe, given)
    return load_config(path, overrides) if path is not None else None
