"""What seed 000 asked of the docs: each recipe page says when to use it, the glossary covers every
feature of the matrix and the memory levers users look for, and docs/index.md walks the user journey."""

import re

import pytest
from doc_blocks import ROOT

from ftune import registry

DOCS = ROOT / "docs"
LEVERS = ("mixed precision", "learning-rate schedules", "activation offloading", "low-precision optimizers")


def sections(text: str, level: int) -> dict[str, str]:
    parts = re.split(rf"^{'#' * level} (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.parametrize("recipe", [*registry.RECIPES, "_template"])
def test_recipe_page_has_a_when_to_use_it_section_before_run_it(recipe):
    text = (DOCS / "recipes" / f"{recipe}.md").read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", text, flags=re.M)
    assert "When to use it" in titles, f"docs/recipes/{recipe}.md has no '## When to use it' section"
    assert titles.index("When to use it") < titles.index("Run it")
    assert len(sections(text, 2)["When to use it"].split()) >= 20


def test_glossary_covers_every_feature_and_the_memory_levers():
    text = (DOCS / "glossary.md").read_text(encoding="utf-8")
    assert set(registry.FEATURES) <= set(sections(text, 2)), "a feature of the matrix has no glossary section"
    levers = sections(text, 3)
    for lever in LEVERS:
        body = levers.get(lever)
        assert body is not None, f"docs/glossary.md lacks '### {lever}'"
        says_how_or_why = re.search(r"Turn on|Change it|not have it yet|Not a tested ftune feature yet", body)
        assert says_how_or_why, f"'### {lever}' says neither how to turn it on nor why ftune lacks it"


def test_index_walks_the_user_journey_in_order():
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    journey = sections(text, 2)["Your way through ftune"]
    steps = ["quickstart.md", "recipes/index.md", "data.md", "distributed.md"]
    positions = [journey.find(f"]({page})") for page in steps]
    assert -1 not in positions and positions == sorted(positions), dict(zip(steps, positions))
