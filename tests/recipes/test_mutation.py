"""Mutation test of the feature matrix: every ✓ of a training recipe is earned.

For each (recipe, feature) cell marked ✓ in the registry (ftune/registry/cells.py), each of the feature's mutants
(tests/recipes/mutants.py: its primitive replaced by a no-op or the plain alternative) must make
the feature's check fail. The single-device recipes run here, in-process; the distributed ones
run their mutants inside their one torchrun launch (tests/recipes/test_distributed.py).
"""

import pytest
from features import CHECKS
from mutants import MUTANTS, outcome

from ftune import registry

# The single-device training recipes, each with its default config (the distributed ones: test_distributed.py).
SINGLE = {name: r.default_config for name, r in registry.TRAINING.items() if not r.distributed}
TRAINING = list(registry.TRAINING)


def declared(recipe):
    return [f for f, v in registry.RECIPES[recipe].features.items() if v == registry.YES]


def test_every_yes_cell_of_every_training_recipe_has_a_check_and_a_mutant():
    assert registry.PARENT in SINGLE and set(SINGLE) < set(TRAINING), TRAINING
    # Every recipe with training methods is in the table (the table is the registry's, not a copy).
    assert TRAINING == [
        n for n, r in registry.RECIPES.items() if set(registry.TRAINING_METHODS) & set(r.methods)
    ]
    for recipe in TRAINING:
        missing = [f for f in declared(recipe) if f not in CHECKS or not MUTANTS.get(f)]
        assert not missing, f"{recipe} declares {missing} ✓ without a check and a mutant in tests/recipes"


def test_mutant_names_are_unique():
    names = [m.name for ms in MUTANTS.values() for m in ms]
    assert len(names) == len(set(names)), names


@pytest.mark.matrix
@pytest.mark.parametrize(
    "recipe, feature, mutant",
    [(r, f, m) for r in SINGLE for f in declared(r) for m in MUTANTS[f]],
    ids=lambda x: getattr(x, "name", x),
)
def test_mutant_is_killed(recipe, feature, mutant, run_recipe, tmp_path):
    def run(*overrides, output_dir):
        return run_recipe(recipe, SINGLE[recipe], *overrides, output_dir=output_dir)

    result = outcome(feature, mutant, run, tmp_path)
    assert result.startswith("killed"), (
        f"{feature} check under mutant {mutant.name} ({mutant.target}): {result}"
    )
