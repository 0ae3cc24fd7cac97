"""The shipped configs and their methods: ``recipes/configs/<family>/<size>_<method>.yaml``.

A config's method is the end of its file name (``135M_qlora`` -> "qlora", ``eval`` -> "eval"); a
recipe accepts the methods its entry lists (`ftune.registry.recipes`). The YAML files are the one
list of configs: scripts/make_configs.py writes the fine-tuning ones, the rest are written by hand.
Pure Python, no torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Every config method, the ends of config file names. A recipe entry may list only these (`Recipe`
# refuses any other): a new method goes here, and tests/test_registry.py checks each has a recipe.
METHODS: tuple[str, ...] = (
    "full",
    "lora",
    "qlora",
    "dora",
    "qat_full",
    "qat_lora",
    "lora_dpo",
    "full_dpo",
    "lora_orpo",
    "lora_kto",
    "full_rm",
    "lora_rm",
    "lora_grpo",
    "lora_grpo_agent",
    "full_grpo",
    "ppo",
    "kd",
    "kd_lora",
    "generation",
    "quantization",
    "eval",
    "dist_check",
)


def recipes_dir() -> Path:
    """The folder holding the recipe files: ``recipes/`` in a checkout, ``ftune/_recipes`` when installed."""
    spec = importlib.util.find_spec("ftune._recipes")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parents[2] / "recipes"


def configs_dir() -> Path:
    return recipes_dir() / "configs"


def method_of_name(stem: str) -> str | None:
    """The method a config file name ends with (``135M_qlora`` -> "qlora", ``eval`` -> "eval"), or None."""
    for method in sorted(METHODS, key=len, reverse=True):  # qat_full before full
        if stem == method or stem.endswith("_" + method):
            return method
    return None


def _shipped_configs() -> dict[str, str | None]:
    # A file whose name ends in no method maps to None (tests/test_registry.py fails).
    root = configs_dir()
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))
    return {name: method_of_name(Path(name).name) for name in names}


# Every shipped config name (e.g. "smollm2/135M_lora") and its method, read from recipes/configs/.
CONFIGS: dict[str, str | None] = _shipped_configs()


def config_path(name: str) -> Path | None:
    """The YAML file of a shipped config name, or None."""
    if name not in CONFIGS:
        return None
    return configs_dir() / f"{name}.yaml"


def all_config_names() -> list[str]:
    return sorted(CONFIGS)


def method_of(config: str) -> str | None:
    """The method of a config name or file (``smollm2/135M_lora`` or ``my_135M_lora.yaml`` -> "lora")."""
    if config in CONFIGS:
        return CONFIGS[config]
    return method_of_name(Path(config).stem)
