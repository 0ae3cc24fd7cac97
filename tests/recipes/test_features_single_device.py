"""Every feature the registry declares for a single-device recipe, switched on, with its effect checked."""

import pytest
from features import CHECKS

from ftune import registry

RECIPES = {
    "full_finetune_single_device": "smollm2/135M_full",
    "lora_finetune_single_device": "smollm2/135M_lora",
}
CASES = [
    pytest.param(recipe, feature, marks=[pytest.mark.slow] if feature == "compile" else [])
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
