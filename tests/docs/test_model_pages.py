"""The model pages' tables (docs/models/*.md) are what scripts/make_model_pages.py generates."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_model_pages.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_model_pages", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_model_pages_hold_the_generated_tables(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().out


def test_every_family_with_a_page_is_generated():
    script = _script()
    pages = sorted(p.stem for p in script.PAGES.glob("*.md"))
    assert pages == sorted(script.FAMILIES)


def test_tables_list_every_builder_and_config():
    script = _script()
    for family in script.FAMILIES:
        text = (script.PAGES / f"{family}.md").read_text()
        for builder in [*script.builders(family), *script.builders(family, prefix="vision_")]:
            assert f"`{builder}`" in text
        for name in (n for n in script.registry.CONFIGS if n.startswith(family + "/")):
            assert f"`{name}`" in text
