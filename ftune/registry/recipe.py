"""What a recipe's entry in the registry says: `Recipe`. The entries are `ftune.registry.recipes`.

Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ftune.registry.configs import CONFIGS, METHODS, recipes_dir


@dataclass(frozen=True)
class Recipe:
    """One recipe: its file, what it does, how it launches, its configs and its features."""

    name: str
    description: str
    distributed: bool
    default_config: str
    methods: tuple[str, ...]  # config methods it accepts, e.g. ("lora", "qlora", "dora")
    features: dict[str, str] = field(default_factory=dict)  # feature -> cell (ftune.registry.cells)
    extra_configs: tuple[str, ...] = ()
    # A training recipe: the tags its lines may use, what makes it differ from PARENT (PARENT's own
    # included). The first recipe declared with a tag defines that tag's lines (`TAGS`). Empty: a
    # recipe not built on PARENT (generate, eval, ...).
    tags: frozenset[str] = frozenset()
    # A distributed training recipe: the one-device recipe whose losses it gives at world size 2 (a
    # QAT recipe: with fake quantization off). None: its own run as a world of one.
    same_losses_as: str | None = None

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(
                f"recipe {self.name!r} (ftune/registry/recipes.py) lists config methods {unknown} that "
                f"ftune/registry/configs.py does not know; known: {list(METHODS)}. Add a new method to "
                "METHODS there, or fix the spelling."
            )

    @property
    def file(self) -> Path:
        return recipes_dir() / f"{self.name}.py"

    @property
    def configs(self) -> list[str]:
        names = [n for n, m in CONFIGS.items() if m in self.methods]
        return sorted(set(names) | set(self.extra_configs))
