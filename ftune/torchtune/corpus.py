"""The configs shipped in a torchtune wheel, with the recipe each is registered for.

torchtune's YAML configs do not name their recipe: its `_recipe_registry.py` does. That file is
read here with `ast` (never executed), so a downloaded wheel runs no code.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ftune.torchtune.yaml_io import load_torchtune_yaml

CONFIGS_PREFIX = "recipes/configs/"
REGISTRY_FILE = "torchtune/_recipe_registry.py"


@dataclass(frozen=True)
class TorchtuneConfig:
    """One config file of the wheel: its path under recipes/configs, its recipe (None: unregistered), its YAML."""

    path: str
    recipe: str | None
    data: dict

    @property
    def family(self) -> str | None:
        """The model family: the config's folder, or the model builder's module for top-level files."""
        if "/" in self.path:
            return self.path.split("/", 1)[0]
        component = str((self.data.get("model") or {}).get("_component_", ""))
        parts = component.split(".")
        return parts[2] if len(parts) == 4 and parts[:2] == ["torchtune", "models"] else None


def _recipes_of(source: str) -> dict[str, str]:
    """config file path -> recipe name, from the `Recipe(name=..., configs=[Config(file_path=...)])` calls."""
    recipes: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Recipe"):
            continue
        kwargs = {k.arg: k.value for k in node.keywords}
        name = ast.literal_eval(kwargs["name"])
        for cfg in ast.walk(kwargs["configs"]):
            if isinstance(cfg, ast.Call) and getattr(cfg.func, "id", None) == "Config":
                path = {k.arg: k.value for k in cfg.keywords}["file_path"]
                recipes[ast.literal_eval(path)] = name
    return recipes


def read_wheel_configs(wheel: str | Path) -> list[TorchtuneConfig]:
    """Every YAML config in a torchtune wheel, sorted by path.

    Raises:
        ValueError: the file is not a torchtune wheel (no recipe registry or no configs in it).
    """
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        if REGISTRY_FILE not in names:
            raise ValueError(f"{wheel} holds no {REGISTRY_FILE}: not a torchtune wheel.")
        recipes = _recipes_of(z.read(REGISTRY_FILE).decode())
        configs = [
            TorchtuneConfig(n.removeprefix(CONFIGS_PREFIX), None, load_torchtune_yaml(z.read(n).decode()))
            for n in sorted(names)
            if n.startswith(CONFIGS_PREFIX) and n.endswith(".yaml")
        ]
    if not configs:
        raise ValueError(f"{wheel} holds no {CONFIGS_PREFIX}*.yaml.")
    return [TorchtuneConfig(c.path, recipes.get(c.path), c.data) for c in configs]
