"""Reading torchtune YAML as torchtune does, and writing a converted config with its report as comments."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from ftune import registry
from ftune.config.errors import ConfigError
from ftune.config.loading import load_config
from ftune.config.recipe_file import recipe_settings
from ftune.config.settings import collect_problems
from ftune.torchtune.conversion import Conversion


def load_torchtune_yaml(text: str) -> dict[str, Any]:
    """Parse a torchtune YAML as torchtune does (OmegaConf: `3e-4` is a float, `${...}` kept unresolved)."""
    data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    if not isinstance(data, dict):
        raise ValueError(f"a torchtune config is a YAML mapping, got {type(data).__name__}.")
    return data


def leaf_keys(tt: dict[str, Any]) -> list[str]:
    """Every key the report covers: top-level keys, and the keys of each top-level section (dotted).

    A section's argument is one key even when its value is a mapping (checkpoint_files can be one).
    """
    keys = []
    for key, value in tt.items():
        keys += [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]
    return keys


def render_yaml(conversion: Conversion, source: str) -> str:
    """The converted config as YAML, headed by comments: where it came from, how to run it, every unmapped key."""
    head = [
        f"# Converted from the torchtune config {source} by `ftune convert torchtune-config`.",
        f"# Run: ftune run {conversion.recipe} --config <this file>",
    ]
    for r in conversion.report:
        if r.status != "mapped":
            head.append(f"# {r.status}: {r.key}: {r.detail}")
    return "\n".join(head) + "\n" + yaml.safe_dump(conversion.config, sort_keys=False, width=110)


def conversion_problems(conversion: Conversion, source: str = "converted.yaml") -> list[str]:
    """What `ftune validate` would report for the converted config against its recipe (empty: valid).

    The config is written to a temporary file and loaded the way `ftune validate` loads it, so
    `${...}` interpolations and the file-based checks are the same; weights and tokenizer files
    need not exist (validation builds nothing).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(source).name
        path.write_text(render_yaml(conversion, source))
        try:
            cfg = load_config(path)
        except ConfigError as e:
            return list(e.problems)
        return collect_problems(cfg, recipe_settings(registry.RECIPES[conversion.recipe].file))
