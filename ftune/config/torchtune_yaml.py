"""Reading torchtune YAML as torchtune does, and writing a converted config with its report as comments."""

from __future__ import annotations

from typing import Any

from ftune.config.torchtune_config import Conversion


def load_torchtune_yaml(text: str) -> dict[str, Any]:
    """Parse a torchtune YAML as torchtune does (OmegaConf: `3e-4` is a float, `${...}` kept unresolved)."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    if not isinstance(data, dict):
        raise ValueError(f"a torchtune config is a YAML mapping, got {type(data).__name__}.")
    return data


def leaf_keys(tt: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a torchtune config as a dotted path (the report has one entry for each)."""
    keys = []
    for key, value in tt.items():
        path = f"{prefix}{key}"
        keys += leaf_keys(value, path + ".") if isinstance(value, dict) else [path]
    return keys


def render_yaml(conversion: Conversion, source: str) -> str:
    """The converted config as YAML, headed by comments: where it came from, how to run it, every unmapped key."""
    import yaml

    head = [
        f"# Converted from the torchtune config {source} by `ftune convert torchtune-config`.",
        f"# Run: ftune run {conversion.recipe} --config <this file>",
    ]
    for r in conversion.report:
        if r.status != "mapped":
            head.append(f"# {r.status}: {r.key}: {r.detail}")
    return "\n".join(head) + "\n" + yaml.safe_dump(conversion.config, sort_keys=False, width=110)
