"""The docs cannot go stale silently: the recipe index, the recipe pages, their glossary links, their
key tables and their commands are checked against the registry (ftune/registry/), the settings classes and
the shipped configs."""

import dataclasses
import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftune import registry
from ftune.cli.run import split_args
from ftune.cli.validate import validate
from ftune.config.instantiate import resolve
from ftune.config.recipe_file import recipe_settings
from ftune.config.run_config import default_config, parse_recipe_args
from ftune.config.settings import describe
from ftune.registry import docs as registry_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = DOCS / "recipes"
INDEX = PAGES / "index.md"
# Pages whose ```bash blocks are checked: every recipe page plus the distributed guide.
COMMAND_PAGES = sorted([*(f"recipes/{name}.md" for name in registry.RECIPES), "distributed.md"])

MISSING = object()  # "—" in a table: the config does not set the key
REQUIRED = object()  # "required" in a table: the component has no default for it


def read(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """Level-2 heading -> the text under it (up to the next level-2 heading)."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


def page_sections(recipe: str) -> dict[str, str]:
    return sections(read(f"recipes/{recipe}.md"))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def glossary_anchors() -> set[str]:
    return {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", read("glossary.md"), flags=re.M)}


def raw_config(name: str) -> dict:
    """A shipped config as written (interpolations unresolved), to compare with the docs' tables."""
    return yaml.safe_load(registry.config_path(name).read_text(encoding="utf-8")) or {}


def lookup(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def settings_class(recipe: str) -> type:
    return recipe_settings(registry.RECIPES[recipe].file)


# --- (a) the generated index -------------------------------------------------------------------------


def test_index_holds_the_current_generated_block():
    text = INDEX.read_text(encoding="utf-8")
    block = registry_docs.extract_block(text)
    assert block is not None, (
        f"{INDEX.relative_to(ROOT)} lacks the markers {registry_docs.BEGIN!r} ... {registry_docs.END!r}."
    )
    assert block == registry_docs.recipes_index_markdown(), (
        f"{INDEX.relative_to(ROOT)} is out of date with the registry (ftune/registry/). Regenerate the block with "
        "`python -m ftune.registry.docs --write` (or print it with `python -m ftune.registry.docs` and "
        "paste it between the markers)."
    )


def test_generated_block_shows_every_recipe_feature_and_reason():
    block = registry_docs.recipes_index_markdown()
    for recipe in registry.RECIPES.values():
        assert f"[{recipe.name}]({recipe.name}.md)" in block
        assert f"`{recipe.default_config}`" in block
        for value in recipe.features.values():
            if value != registry.YES:
                assert registry.reason(value) in block, value
    for feature in registry.FEATURES:
        assert f"[{feature}](../glossary.md#{feature})" in block
    # One row per feature, one column per recipe (plus the feature column).
    rows = [line for line in block.splitlines() if line.startswith("| [") and "glossary.md" in line]
    assert len(rows) == len(registry.FEATURES)
    assert {row.count(" | ") for row in rows} == {len(registry.RECIPES)}
    cpu_offload = next(row for row in rows if row.startswith("| [cpu_offload]"))
    assert "GPU only" in cpu_offload and "✓" not in cpu_offload


def test_registry_docs_does_not_import_torch():
    code = "import sys, ftune.registry.docs as d; d.recipes_index_markdown(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_write_replaces_only_the_block(tmp_path):
    page = tmp_path / "index.md"
    page.write_text(f"# Title\n\nprose\n\n{registry_docs.BEGIN}\nstale\n{registry_docs.END}\n\nmore prose\n")
    assert registry_docs.main(["--write", "--path", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Title\n\nprose\n\n") and text.endswith("\n\nmore prose\n")
    assert registry_docs.extract_block(text) == registry_docs.recipes_index_markdown()


def test_write_without_markers_says_what_to_add(tmp_path):
    page = tmp_path / "index.md"
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="cannot find the markers .* add them where the recipe table"):
        registry_docs.replace_block(page.read_text())
    assert registry_docs.main(["--write", "--path", str(page)]) == 1
    assert page.read_text() == "# no markers\n"


# --- (b) a page per recipe ---------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", registry.RECIPES)
def test_every_recipe_has_a_page(recipe):
    page = PAGES / f"{recipe}.md"
    assert page.is_file(), (
        f"{recipe} has no page: write {page.relative_to(ROOT)} from docs/recipes/_template.md"
    )
    assert page.read_text(encoding="utf-8").startswith(f"# {recipe}\n")


# --- (c) features link to the glossary ---------------------------------------------------------------

GLOSSARY_LINK = re.compile(r"\]\((?:\.\./)?glossary\.md#([^)\s]+)\)")


@pytest.mark.parametrize("page", COMMAND_PAGES)
def test_glossary_links_point_to_existing_anchors(page):
    anchors = glossary_anchors()
    broken = sorted(set(GLOSSARY_LINK.findall(read(page))) - anchors)
    assert not broken, f"docs/{page} links to glossary anchors that do not exist: {broken}"


@pytest.mark.parametrize("recipe", registry.RECIPES)
def test_features_section_lists_exactly_the_supported_features(recipe):
    body = page_sections(recipe).get("Features")
    assert body is not None, f"docs/recipes/{recipe}.md has no '## Features' section"
    listed = set(GLOSSARY_LINK.findall(body))
    supported = {
        f
        for f, v in registry.RECIPES[recipe].features.items()
        if registry.state(v) in (registry.YES, registry.GPU_ONLY)
    }
    assert listed == supported, (
        f"docs/recipes/{recipe}.md lists features {sorted(listed)}, ftune/registry/recipes.py declares "
        f"{sorted(supported)}: add {sorted(supported - listed)}, remove {sorted(listed - supported)}."
    )


# --- (d) the keys tables -----------------------------------------------------------------------------


def keys_table(recipe: str) -> tuple[list[str], list[list[str]]]:
    body = page_sections(recipe).get("The keys that matter")
    assert body is not None, f"docs/recipes/{recipe}.md has no '## The keys that matter' section"
    lines = [line for line in body.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"docs/recipes/{recipe}.md: the keys section has no table"
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    return cells[0], [row for row in cells[2:]]


def key_problem(key: str, cls: type, config: dict) -> str | None:
    fields = {f.name for f in dataclasses.fields(cls)}
    head, _, rest = key.partition(".")
    if not rest:
        if key in fields or key in cls.COMPONENTS:
            return None
        return (
            f"{key!r} is neither a setting of {cls.__name__} nor one of its sections {sorted(cls.COMPONENTS)}"
        )
    if head not in cls.COMPONENTS:
        return f"{key!r}: {head!r} is not a section of {cls.__name__} ({sorted(cls.COMPONENTS)})"
    if lookup(config, key) is not MISSING:
        return None
    node = config.get(head)
    if isinstance(node, dict) and "_component_" in node and "." not in rest:
        if rest in inspect.signature(resolve(node["_component_"])).parameters:
            return None
    return f"{key!r} is neither in the default config nor an argument of {head}'s _component_"


def parse_cell(cell: str):
    if cell in ("—", "-"):
        return MISSING
    if cell == "required":
        return REQUIRED
    match = re.fullmatch(r"`([^`]*)`", cell)
    assert match, f"write the value {cell!r} as `yaml`, — (not set) or required"
    return yaml.safe_load(match.group(1))


def same(documented, actual) -> bool:
    if documented is actual or documented == actual:
        return True
    numeric = isinstance(actual, (int, float)) and not isinstance(actual, bool)
    if isinstance(documented, str) and numeric:  # YAML 1.1 reads `1e-3` as a string
        try:
            return float(documented) == actual
        except ValueError:
            return False
    return False


def real_default(key: str, cls: type, config: dict):
    head, _, rest = key.partition(".")
    if not rest:
        defaults = {name: default for name, _, default, _ in describe(cls)}
        return defaults.get(key, MISSING)
    params = inspect.signature(resolve(config[head]["_component_"])).parameters
    if rest not in params:
        return MISSING
    default = params[rest].default
    return REQUIRED if default is inspect.Parameter.empty else default


@pytest.mark.parametrize("recipe", registry.RECIPES)
def test_keys_table_names_only_real_keys(recipe):
    cls = settings_class(recipe)
    config = raw_config(registry.RECIPES[recipe].default_config)
    _, rows = keys_table(recipe)
    problems = []
    for row in rows:
        keys = re.findall(r"`([^`]+)`", row[0])
        assert keys, f"docs/recipes/{recipe}.md: a keys-table row names no `key`: {row}"
        problems += [p for key in keys if (p := key_problem(key, cls, config))]
    assert not problems, f"docs/recipes/{recipe}.md names keys that do not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize("recipe", registry.RECIPES)
def test_keys_table_values_match_the_code(recipe):
    """Pages whose table has a column for the default config's values have both value columns checked."""
    default_config = registry.RECIPES[recipe].default_config
    header, rows = keys_table(recipe)
    if len(header) != 4 or header[2] != f"`{default_config}`":
        pytest.skip(f"docs/recipes/{recipe}.md shows no `{default_config}` column")
    cls, config = settings_class(recipe), raw_config(default_config)
    wrong = []
    for row in rows:
        (key,) = re.findall(r"`([^`]+)`", row[0])
        expected = real_default(key, cls, config)
        if expected is not MISSING and not same(parse_cell(row[1]), expected):
            wrong.append(f"{key}: default says {row[1]}, the code has {expected!r}")
        actual = lookup(config, key)
        if not same(parse_cell(row[2]), actual):
            shown = "nothing" if actual is MISSING else repr(actual)
            wrong.append(f"{key}: the {default_config} column says {row[2]}, the YAML has {shown}")
    assert not wrong, f"docs/recipes/{recipe}.md is stale:\n" + "\n".join(wrong)


# --- links ------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")
ALL_PAGES = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


@pytest.mark.parametrize("page", ALL_PAGES)
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in LINK.findall(read(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = (DOCS / page).parent / path if path else DOCS / page
        if not file.exists():
            broken.append(f"{target}: no such file")
            continue
        if fragment and file.suffix == ".md":
            headings = re.findall(r"^#{1,6} (.+)$", file.read_text(encoding="utf-8"), flags=re.M)
            if fragment not in {anchor(h) for h in headings}:
                broken.append(f"{target}: no heading with anchor #{fragment}")
    assert not broken, f"docs/{page} has broken links:\n" + "\n".join(broken)


# --- configs sections and commands -------------------------------------------------------------------


@pytest.mark.parametrize("recipe", registry.RECIPES)
def test_configs_section_lists_the_registry_configs(recipe):
    body = page_sections(recipe).get("Configs")
    assert body is not None, f"docs/recipes/{recipe}.md has no '## Configs' section"
    named = {name for name in re.findall(r"`([^`\s]+)`", body) if name in registry.CONFIGS}
    expected = set(registry.RECIPES[recipe].configs)
    assert named == expected, (
        f"docs/recipes/{recipe}.md: add configs {sorted(expected - named)}, remove {sorted(named - expected)}"
    )


def run_commands(page: str) -> list[str]:
    """Every `ftune run ...` in the page's ```bash blocks (continuations joined, `&&` chains split)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", read(page), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                if part.strip().startswith("ftune run ") or part.strip().startswith("srun ftune run "):
                    commands.append(part.strip().removeprefix("srun "))
    return commands


@pytest.mark.parametrize("page", COMMAND_PAGES)
def test_documented_run_commands_validate(page):
    from torch.distributed.run import get_args_parser

    commands = run_commands(page)
    assert commands, f"docs/{page} shows no `ftune run` command"
    for command in commands:
        launcher, name, rest = split_args(shlex.split(command, comments=True)[2:])
        assert name is not None, command
        recipe = registry.RECIPES.get(name)
        assert recipe is not None or name.endswith(".py"), f"{command}: no recipe {name!r}"
        if launcher:
            get_args_parser().parse_args([*launcher, "recipe.py"])  # torchrun accepts the options
            assert recipe is None or recipe.distributed, f"{command}: {name} runs on one device only"
        config, overrides = parse_recipe_args(rest)  # as `ftune run` reads them
        config = config if config is not None else default_config(name)
        # `prompt="..."` stands for the user's text: validate it as some text
        overrides = [arg[:-3] + "text" if arg.endswith("=...") else arg for arg in overrides]
        assert config is not None, f"{command}: a copied recipe needs --config"
        validate(config, overrides, recipe.name if recipe else None, files=False)
