"""Same tag, same line: a line tagged # [T] in any recipe is the line # [T] has in T's own recipe.

test_skeleton.py pins each sibling's whole diff against approved files, so a line that is wrong in
the same way in the approved diff (four distributed recipes once called init_distributed without the
dist_timeout_s they declare) passes there. Here the tagged lines of sibling recipes are compared with
one another: for each tag, the recipe that introduces the variant (`REFERENCE`) holds its lines, and
in every recipe that uses the tag
- each line tagged # [T] is one of the reference's # [T] lines, in the same order;
- each of the reference's # [T] lines is there, or its job (the name it assigns, the function it
  calls) is done by a line of another tag (QAT + LoRA saves adapters: its save line is # [lora]).
A line that exists only because two variants meet carries both tags (# [kd+dist]), in the one order of
`registry.TAG_ORDER` (# [grpo+full+dist], never # [full+grpo]); a combined tag is checked like a simple
one, against the first recipe (in the registry's order) that uses it. A block several recipe kinds share
carries one tag (the frozen reference copy: # [ref+full] in DPO and GRPO alike).
"""

from __future__ import annotations

import ast
import re

import pytest
from tagged_lines import job, tagged_statements

from ftune import registry

TRAINING = sorted(registry.TRAINING)


def _references() -> dict[str, str]:
    """Each tag, simple or combined, and the recipe whose lines define it: the registry's for a simple tag,
    the first recipe (registry order) using a combined one."""
    found = dict(registry.TAGS)
    for name in registry.TRAINING:
        for tag, _ in statements(name):
            found.setdefault(tag, name)
    return found


def statements(recipe: str) -> list[tuple[str, str]]:
    return tagged_statements(registry.RECIPES[recipe].file)


# The recipe whose tagged lines define each tag (combined ones included).
REFERENCE = _references()


def problems(recipe: str, read=statements) -> list[str]:
    """Every way `recipe`'s tagged lines differ from the references' (`read` gives a recipe's lines)."""

    def lines_of(name: str, tag: str) -> list[str]:
        return [code for t, code in read(name) if t == tag]

    mine, found = read(recipe), []
    jobs = {job(code) for _, code in mine}
    for tag in sorted({t for t, _ in mine}):
        ours, theirs = lines_of(recipe, tag), lines_of(REFERENCE[tag], tag)
        for code in ours:
            if code not in theirs:
                same_job = [c for c in theirs if job(c) == job(code)]
                found.append(
                    f"# [{tag}] line `{code}` differs from {REFERENCE[tag]}'s"
                    + (f" `{same_job[0]}`" if same_job else " (which has no line with that job)")
                )
        kept = [c for c in ours if c in theirs]
        if kept != [c for c in theirs if c in kept]:
            found.append(f"# [{tag}] lines are in another order than in {REFERENCE[tag]}")
        found += [
            f"{REFERENCE[tag]}'s # [{tag}] line `{code}` is missing (no line does its job)"
            for code in theirs
            if code not in ours and job(code) not in jobs
        ]
    return found


def test_every_tag_has_a_reference():
    """A simple tag's defining recipe has lines with it, alone or in a combination (# [ref] exists only
    combined: # [ref+full], # [ref+lora])."""
    for tag, recipe in REFERENCE.items():
        assert [c for t, c in statements(recipe) if tag in (t, *t.split("+"))], (
            f"{recipe} has no # [{tag}] line"
        )


def order_problems(tags: list[str]) -> list[str]:
    """Combined tags whose parts are not in `registry.TAG_ORDER`'s order (or are not in it)."""
    found = []
    for tag in tags:
        parts = tag.split("+")
        unknown = [p for p in parts if p not in registry.TAG_ORDER]
        canonical = "+".join(sorted(parts, key=registry.TAG_ORDER.index)) if not unknown else None
        if unknown:
            found.append(f"# [{tag}]: {unknown} not in registry.TAG_ORDER {registry.TAG_ORDER}")
        elif tag != canonical:
            found.append(f"# [{tag}] is written # [{canonical}] (registry.TAG_ORDER)")
    return found


@pytest.mark.parametrize("recipe", TRAINING)
def test_combined_tags_are_written_in_the_one_order(recipe):
    found = order_problems([t for t, _ in statements(recipe)])
    assert not found, f"{recipe}:\n" + "\n".join(found)


def test_the_order_check_fails_on_the_two_spellings_of_one_combination():
    """Before the fix the GRPO recipes wrote # [full+grpo] and # [grpo+full] for the one combination."""
    assert order_problems(["full+grpo"]) == ["# [full+grpo] is written # [grpo+full] (registry.TAG_ORDER)"]
    assert order_problems(["grpo+full", "grpo+full+dist", "ref+lora", "kd+dist", "qat+lora"]) == []
    assert set(registry.TAGS) <= set(registry.TAG_ORDER)


def test_a_combined_tag_is_checked_like_a_simple_one():
    """A # [ref+full] line that differs between the DPO and the GRPO recipes fails, as a simple tag's would."""
    real = statements("full_grpo_single_device")
    changed = [
        (t, c.replace("ckpt.load_base_model()", "loaded.model") if t == "ref+full" else c) for t, c in real
    ]

    def reading(name):
        return changed if name == "full_grpo_single_device" else statements(name)

    assert problems("full_grpo_single_device") == []
    assert any(
        "# [ref+full] line" in p and "differs" in p for p in problems("full_grpo_single_device", reading)
    )


@pytest.mark.parametrize("recipe", TRAINING)
def test_tagged_lines_equal_the_references(recipe):
    found = problems(recipe)
    assert not found, (
        f"{recipe}: a tagged line must be the same line in every recipe that uses the tag. Copy the "
        f"reference's line, or tag a line that exists because two variants meet with both (# [a+b]):\n"
        + "\n".join(found)
    )


def test_the_check_finds_a_changed_a_missing_and_an_extra_line():
    """The check fails on the drift it is for: a changed [dist] line (the dist_timeout_s omission),
    a dropped one, one added."""
    real = statements("lora_finetune_distributed")

    def reading(lines):
        return lambda name: lines if name == "lora_finetune_distributed" else statements(name)

    changed = [(t, c.replace(", timeout_s=s.dist_timeout_s", "")) for t, c in real]
    dropped = [(t, c) for t, c in real if "destroy_distributed" not in c]
    extra = [*real, ("dist", "training.barrier()")]
    assert problems("lora_finetune_distributed") == []
    assert (
        "# [dist] line `info = training.init_distributed(device)` differs"
        in problems("lora_finetune_distributed", reading(changed))[0]
    )
    assert (
        "`training.destroy_distributed()` is missing"
        in problems("lora_finetune_distributed", reading(dropped))[0]
    )
    assert "`training.barrier()` differs" in problems("lora_finetune_distributed", reading(extra))[0]


RECIPE_NAME = re.compile(r"(?<![/\w])[a-z][a-z0-9]*(?:_[a-z0-9]+)*_(?:single_device|distributed)\b(?!\.py)")


@pytest.mark.parametrize("recipe", sorted(registry.RECIPES))
def test_docstrings_name_only_registered_recipes(recipe):
    """A docstring names other recipes that exist (the registry's names), and itself only in its run
    command: no sibling list to fall out of date, no recipe named as its own sibling."""
    doc = ast.get_docstring(ast.parse(registry.RECIPES[recipe].file.read_text())) or ""
    first, _, rest = doc.partition("\n")
    named = set(RECIPE_NAME.findall(rest))
    assert named <= set(registry.RECIPES), (
        f"{recipe}'s docstring names {sorted(named - set(registry.RECIPES))}"
    )
    assert recipe not in named, f"{recipe}'s docstring names itself after its run command"
    assert "ftune run" not in first or recipe in first
