"""Every recipe, its configs and the features it supports: the one source of truth.

`ftune ls`, the docs' feature matrix (docs/recipes/index.md), the config generator and the tests
read it as ``from ftune import registry`` (``registry.RECIPES``, ``registry.CONFIGS``, ...). Where
each part is declared:

- `recipes`: one `Recipe` entry a recipe (a new recipe goes there), and the tables derived from
  them (`RECIPES`, `TRAINING`, `TAGS`);
- `cells`: every cell of the feature matrix, in the groups the entries are unions of;
- `features`: the matrix's rows, one a feature; `states`: what a cell can say (`YES`, `na(...)`);
- `configs`: the shipped configs under recipes/configs/ and the method each name gives;
- `recipe`: the `Recipe` class; `docs`: the matrix rendered into docs/recipes/index.md.

It imports nothing heavy (no torch), so `ftune ls` starts fast.
"""

from ftune.registry.configs import (
    CONFIGS,
    METHODS,
    all_config_names,
    config_path,
    configs_dir,
    method_of,
    method_of_name,
    recipes_dir,
)
from ftune.registry.features import FEATURES
from ftune.registry.recipe import Recipe
from ftune.registry.recipes import (
    PARENT,
    RECIPES,
    TAG_ORDER,
    TAGS,
    TRAINING,
    TRAINING_METHODS,
    recipe_for_config,
)
from ftune.registry.states import (
    GPU_ONLY,
    NA,
    UNCHECKED,
    YES,
    gpu_only,
    na,
    reason,
    state,
    unchecked,
)

__all__ = [
    "CONFIGS",
    "FEATURES",
    "GPU_ONLY",
    "METHODS",
    "NA",
    "PARENT",
    "RECIPES",
    "TAG_ORDER",
    "TAGS",
    "TRAINING",
    "TRAINING_METHODS",
    "UNCHECKED",
    "YES",
    "Recipe",
    "all_config_names",
    "config_path",
    "configs_dir",
    "gpu_only",
    "method_of",
    "method_of_name",
    "na",
    "reason",
    "recipe_for_config",
    "recipes_dir",
    "state",
    "unchecked",
]
