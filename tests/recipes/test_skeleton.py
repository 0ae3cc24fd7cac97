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
import sys
from pathlib import Path

import pytest
from tagged_lines import ANY_TAG, TAG, body, tagged

from ftune import registry

PARENT = registry.PARENT
APPROVED = Path(__file__).resolve().parent / "approved"
# The tags each recipe may use, what makes it differ from the parent: its registry entry's tags.
ALLOWED = {name: set(r.tags) for name, r in registry.TRAINING.items()}
SIBLINGS = sorted(set(ALLOWED) - {PARENT})


def skeleton(path: Path) -> list[str]:
    """The untagged lines, blank lines left out: the formatter puts blank lines around a recipe-local
    function a variant adds (GRPO's ``rollout_on``), and a blank line does nothing."""
    lines = body(path).splitlines()
    return [line for line, is_tagged in zip(lines, tagged(lines)) if not is_tagged and line.strip()]


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


def test_every_recipe_file_with_tagged_lines_is_a_training_recipe():
    """A recipe file built on the parent (it has tagged lines) is registered with its tags, and each
    recipe with tags has an approved diff: no table to update but the registry's entry."""
    tagged_files = {p.stem for p in registry.recipes_dir().glob("*.py") if TAG.search(body(p))}
    assert tagged_files == set(ALLOWED), (
        f"recipe files with tagged lines but no tags in ftune/registry/recipes.py: {sorted(tagged_files - set(ALLOWED))}; "
        f"registered with tags but without tagged lines: {sorted(set(ALLOWED) - tagged_files)}"
    )
    assert PARENT in ALLOWED
    approved = {p.stem for p in APPROVED.glob("*.diff")}
    assert approved == set(SIBLINGS), (
        f"approved diffs of no sibling: {sorted(approved - set(SIBLINGS))}; siblings without one: "
        f"{sorted(set(SIBLINGS) - approved)} (run python tests/recipes/test_skeleton.py --approve)"
    )


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
    used = {t for tag in ANY_TAG.findall(body(registry.RECIPES[recipe].file)) for t in tag.split("+")}
    assert used <= ALLOWED[recipe], (
        f"{recipe} uses tags {sorted(used - ALLOWED[recipe])} that its entry in ftune/registry/recipes.py does not "
        f"list (its tags: {sorted(ALLOWED[recipe])}): add the tag to its `tags=` or fix the comment"
    )
    assert used, f"{recipe} has no tagged line: every recipe of the family tags what makes it itself"


def test_qat_single_device_has_the_qat_lines_of_qat_distributed():
    """The two QAT recipes differ only in [dist] lines: the same [qat] lines, in the same order."""

    def qat_lines(recipe):
        return [line for line in body(registry.RECIPES[recipe].file).splitlines() if "# [qat]" in line]

    assert qat_lines("qat_single_device") == qat_lines("qat_distributed")


if __name__ == "__main__" and sys.argv[1:] == ["--approve"]:
    APPROVED.mkdir(exist_ok=True)
    for name in SIBLINGS:
        (APPROVED / f"{name}.diff").write_text(sibling_diff(name))
        print(f"approved {APPROVED.name}/{name}.diff")
    for stale in sorted(p for p in APPROVED.glob("*.diff") if p.stem not in SIBLINGS):
        stale.unlink()  # the diff of a recipe no longer registered with tags
        print(f"removed {APPROVED.name}/{stale.name}")
