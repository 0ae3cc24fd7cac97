"""No drift, by construction: sibling recipes are their parent plus tagged lines, and those lines are approved.

Two checks per sibling recipe:
- with its tagged lines (``# [lora]``, ``# [dist]``, ``# [qat]``, ``# [full]``) removed, it equals the
  parent with its tagged lines removed: an untagged difference is drift;
- its whole diff against the parent equals the checked-in tests/recipes/approved/<recipe>.diff: adding,
  changing or moving a tagged line fails until that file is updated in the same commit, so a reviewer
  sees every change to what a sibling does differently. To approve a deliberate change, run
  ``python tests/recipes/test_skeleton.py --approve`` and commit the updated .diff files.
"""

import difflib
import re
import sys
from pathlib import Path

import pytest
from tagged_lines import TAG, TAG_COMMENT, body, tagged

from ftune import registry

PARENT = "full_finetune_single_device"
APPROVED = Path(__file__).resolve().parent / "approved"
# The tags each recipe may use: what makes it differ from the parent.
ALLOWED = {
    "full_finetune_single_device": {"full", "sft"},
    "lora_finetune_single_device": {"lora", "sft"},
    "full_finetune_distributed": {"full", "dist", "sft"},
    "lora_finetune_distributed": {"lora", "dist", "sft"},
    "qat_distributed": {"qat", "dist", "sft"},
    "knowledge_distillation_single_device": {"kd", "sft"},
    "knowledge_distillation_distributed": {"kd", "dist", "sft"},
    "qat_single_device": {"qat", "sft"},
    "qat_lora_finetune_distributed": {"lora", "qat", "dist", "sft"},
    # Preference tuning replaces the supervised lines (# [sft]: collate, step loss, batch loss, validation).
    "lora_dpo_single_device": {"lora", "dpo"},
    "lora_dpo_distributed": {"lora", "dpo", "dist"},
    "full_dpo_distributed": {"full", "dpo", "dist"},
}
SIBLINGS = sorted(set(ALLOWED) - {PARENT})


def skeleton(path: Path) -> list[str]:
    lines = body(path).splitlines()
    return [line for line, is_tagged in zip(lines, tagged(lines)) if not is_tagged]


def sibling_diff(recipe: str) -> str:
    """The sibling's body against the parent's, with context, hunk positions left out (the parent may grow)."""
    lines = difflib.unified_diff(
        body(registry.RECIPES[PARENT].file).splitlines(),
        body(registry.RECIPES[recipe].file).splitlines(),
        f"recipes/{PARENT}.py",
        f"recipes/{recipe}.py",
        lineterm="",
        n=2,
    )
    return "\n".join("@@" if line.startswith("@@") else line for line in lines) + "\n"


def test_every_training_recipe_is_covered():
    training = {n for n, r in registry.RECIPES.items() if set(registry.TRAINING_METHODS) & set(r.methods)}
    assert training == set(ALLOWED)


@pytest.mark.parametrize("recipe", SIBLINGS)
def test_recipe_matches_skeleton(recipe):
    path = registry.RECIPES[recipe].file
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


@pytest.mark.parametrize("recipe", SIBLINGS)
def test_sibling_diff_is_approved(recipe):
    approved = APPROVED / f"{recipe}.diff"
    assert approved.is_file(), f"no approved diff for {recipe}: run python {__file__} --approve"
    got = sibling_diff(recipe)
    change = "\n".join(difflib.unified_diff(approved.read_text().splitlines(), got.splitlines(), lineterm=""))
    assert got == approved.read_text(), (
        f"{recipe}'s tagged lines changed against tests/recipes/approved/{recipe}.diff. If the change is "
        f"deliberate, run `python tests/recipes/test_skeleton.py --approve` and commit the .diff files "
        f"with it. Change to the approved diff:\n{change}"
    )


@pytest.mark.parametrize("recipe", sorted(ALLOWED))
def test_recipe_uses_only_its_own_tags(recipe):
    used = {t for tag in TAG.findall(body(registry.RECIPES[recipe].file)) for t in tag.split("+")}
    assert used <= ALLOWED[recipe], (
        f"{recipe} uses tags {sorted(used - ALLOWED[recipe])} that belong to other recipes"
    )
    assert used, f"{recipe} has no tagged line: every recipe of the family tags what makes it itself"


def test_qat_single_device_has_the_qat_lines_of_qat_distributed():
    """The two QAT recipes differ only in [dist] lines: the same [qat] lines, in the same order."""

    def qat_lines(recipe):
        return [line for line in body(registry.RECIPES[recipe].file).splitlines() if "# [qat]" in line]

    assert qat_lines("qat_single_device") == qat_lines("qat_distributed")


def test_the_unit_tests_step_is_the_recipes_step():
    """tests/training/recipe_step.py drives the step helpers with the recipe's own lines."""
    copy = (Path(__file__).parents[1] / "training" / "recipe_step.py").read_text()
    start = copy.index("    step_loss = ")
    copied = [
        TAG_COMMENT.sub("", line).strip()
        for line in copy[start : copy.index("    return stats")].splitlines()
    ]
    recipe = [line.strip() for line in body(registry.RECIPES[PARENT].file).splitlines()]
    recipe = [
        re.sub(r"\bs\.clip_grad_norm\b", "clip_grad_norm", TAG_COMMENT.sub("", line)).replace(
            "step + 1", "step"
        )
        for line in recipe
    ]
    first = recipe.index(copied[0])
    assert recipe[first : first + len(copied)] == copied


if __name__ == "__main__" and sys.argv[1:] == ["--approve"]:
    APPROVED.mkdir(exist_ok=True)
    for name in SIBLINGS:
        (APPROVED / f"{name}.diff").write_text(sibling_diff(name))
        print(f"approved {APPROVED.name}/{name}.diff")
