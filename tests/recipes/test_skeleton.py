"""No drift, by construction: sibling recipes equal their parent once their tagged lines are removed."""

import difflib
import re
from pathlib import Path

import pytest

from ftune import registry

TAG = re.compile(r"#\s*\[(full|lora|qat|single|dist)\]")
PARENT = "full_finetune_single_device"
# The tags each recipe may use: what makes it differ from the parent.
ALLOWED = {
    "full_finetune_single_device": {"full", "single"},
    "lora_finetune_single_device": {"lora", "single"},
    "full_finetune_distributed": {"full", "dist"},
    "lora_finetune_distributed": {"lora", "dist"},
    "qat_distributed": {"qat", "dist"},
}


def body(path: Path) -> str:
    return re.sub(r'\A""".*?"""\n', "", path.read_text(), flags=re.S)  # the docstring may differ


def skeleton(path: Path) -> list[str]:
    return [line for line in body(path).splitlines() if not TAG.search(line)]


def test_every_training_recipe_is_covered():
    training = {n for n, r in registry.RECIPES.items() if {"full", "lora", "qat_full"} & set(r.methods)}
    assert training == set(ALLOWED)


@pytest.mark.parametrize("recipe", sorted(set(ALLOWED) - {PARENT}))
def test_recipe_matches_skeleton(recipe):
    path = registry.RECIPES[recipe].file
    if not path.is_file():
        pytest.skip(f"{recipe} not written yet")
    diff = "\n".join(
        difflib.unified_diff(
            skeleton(registry.RECIPES[PARENT].file), skeleton(path), PARENT, recipe, lineterm=""
        )
    )
    assert not diff, (
        f"{recipe} diverges from the shared skeleton of {PARENT}. Tag the line "
        f"(# [{'] / # ['.join(sorted(ALLOWED[recipe]))}]) if it is a deliberate difference, "
        f"or move the logic into ftune.training so that every recipe calls it the same way:\n{diff}"
    )


@pytest.mark.parametrize("recipe", sorted(ALLOWED))
def test_recipe_uses_only_its_own_tags(recipe):
    path = registry.RECIPES[recipe].file
    if not path.is_file():
        pytest.skip(f"{recipe} not written yet")
    used = set(TAG.findall(body(path)))
    assert used <= ALLOWED[recipe], (
        f"{recipe} uses tags {sorted(used - ALLOWED[recipe])} that belong to other recipes"
    )
