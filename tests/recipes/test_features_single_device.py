"""Every feature the registry declares for a single-device recipe, switched on, with its effect checked."""

import pytest
from features import CHECKS, compile

from ftune import registry

# The single-device training recipes, each with its default config.
RECIPES = {name: r.default_config for name, r in registry.TRAINING.items() if not r.distributed}
CASES = [
    (recipe, feature)
    for recipe in RECIPES
    for feature, support in registry.RECIPES[recipe].features.items()
    if support == registry.YES
]


def test_every_declared_feature_has_a_check():
    declared = {f for r in RECIPES for f, v in registry.RECIPES[r].features.items() if v == registry.YES}
    assert declared <= set(CHECKS), f"features without a check: {sorted(declared - set(CHECKS))}"


@pytest.mark.parametrize("recipe, feature", CASES)
def test_feature(recipe, feature, run_recipe, tmp_path):
    def run(*overrides, output_dir):
        return run_recipe(recipe, RECIPES[recipe], *overrides, output_dir=output_dir)

    CHECKS[feature](run, tmp_path)


@pytest.mark.slow
def test_compile_with_inductor(run_recipe, tmp_path):
    """The compile check with torch.compile's default backend (C++ code generation: minutes on 2 cores)."""

    def run(*overrides, output_dir):
        return run_recipe(registry.PARENT, RECIPES[registry.PARENT], *overrides, output_dir=output_dir)

    compile(run, tmp_path, backend="inductor")
