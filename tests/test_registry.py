import re
from pathlib import Path

import pytest

from ftune import registry
from ftune.cli import ls
from ftune.config import load_config
from ftune.config.recipe_file import recipe_settings
from ftune.config.settings import collect_problems
from ftune.registry import docs as registry_docs

CONFIGS_DIR = registry.configs_dir()
SHIPPED = sorted(str(p.relative_to(CONFIGS_DIR).with_suffix("")) for p in CONFIGS_DIR.rglob("*.yaml"))


def test_the_registry_lists_exactly_the_shipped_yaml_files_each_with_its_method():
    assert sorted(registry.CONFIGS) == SHIPPED
    no_method = [name for name, method in registry.CONFIGS.items() if method is None]
    assert not no_method, f"config names that end in no recipe's method: {no_method}"
    assert registry.CONFIGS["smollm2/135M_qat_full"] == "qat_full"
    assert registry.CONFIGS["smollm2/135M_qlora"] == "qlora"
    assert registry.method_of("my_copy_135M_dora.yaml") == "dora"
    assert registry.method_of("notes.yaml") is None


def test_every_config_method_has_a_recipe_and_an_entry_names_only_known_methods():
    accepted = {m for r in registry.RECIPES.values() for m in r.methods}
    assert set(registry.METHODS) == accepted, (
        f"METHODS in ftune/registry/configs.py that no recipe accepts: {set(registry.METHODS) - accepted}"
    )
    with pytest.raises(
        ValueError, match=r"recipe 'mine' .* lists config methods \['ful'\] .* Add a new method"
    ):
        registry.Recipe("mine", "a typo", False, "smollm2/135M_full", ("ful",))


def test_every_recipe_has_a_file_a_default_config_and_settings():
    for recipe in registry.RECIPES.values():
        assert recipe.file.is_file(), recipe.file
        assert recipe.default_config in recipe.configs, recipe.name
        assert recipe_settings(recipe.file)


def test_every_recipe_reads_the_settings_it_declares():
    for recipe in registry.RECIPES.values():
        assert "s = cfg.settings(SETTINGS)" in recipe.file.read_text(), (
            f"{recipe.file.name} must read its settings with cfg.settings(SETTINGS), the class it declares"
        )


def test_features_are_known_and_sibling_gaps_have_reasons():
    for recipe in registry.RECIPES.values():
        assert set(recipe.features) <= set(registry.FEATURES), recipe.name
        for value in recipe.features.values():
            assert registry.state(value) in (
                registry.YES,
                registry.NA,
                registry.GPU_ONLY,
                registry.UNCHECKED,
            ), value
            assert registry.state(value) == registry.YES or registry.reason(value), value
    sft = list(registry.TRAINING.values())
    union = set().union(*(r.features for r in sft))
    for recipe in sft:
        assert union <= set(recipe.features), (
            f"{recipe.name} must declare {sorted(union - set(recipe.features))}"
        )


def test_glossary_has_every_feature():
    glossary = (Path(__file__).parents[1] / "docs" / "glossary.md").read_text()
    headings = set(re.findall(r"^## `?([a-z0-9_]+)`?", glossary, flags=re.M))
    assert set(registry.FEATURES) <= headings, sorted(set(registry.FEATURES) - headings)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_validates(name):
    recipe = registry.recipe_for_config(name)
    assert recipe is not None, name
    cfg = load_config(name)
    assert collect_problems(cfg, recipe_settings(recipe.file)) == []


def test_shipped_fine_tuning_configs_match_their_generator():
    import subprocess
    import sys

    script = Path(__file__).parents[1] / "scripts" / "make_configs.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cpu_offload_is_gpu_only_not_yes():
    """On the CPU test machines FSDP2's CPU offload changes nothing, so it cannot be a checked ✓."""
    distributed = [name for name, r in registry.TRAINING.items() if r.distributed]
    assert "full_finetune_distributed" in distributed
    for name in distributed:
        value = registry.RECIPES[name].features["cpu_offload"]
        assert registry.state(value) == registry.GPU_ONLY, value
        assert "CPU" in registry.reason(value)


def test_cell_states_and_reasons():
    assert registry.state(registry.YES) == registry.YES
    assert registry.state(registry.na("why")) == registry.NA and registry.reason(registry.na("why")) == "why"
    assert registry.state(registry.gpu_only("x: y")) == registry.GPU_ONLY
    assert registry.reason(registry.gpu_only("x: y")) == "x: y"
    assert registry.state("") == "" and registry.reason(registry.YES) == ""
    assert registry.state(registry.unchecked("why")) == registry.UNCHECKED
    assert registry.reason(registry.unchecked("why")) == "why"


def test_not_checked_is_its_own_state_never_a_yes_nor_a_not_applicable():
    """ "runs but is not checked" is UNCHECKED, shown as such (never ✓), and never written as n/a."""
    cell = registry.unchecked("runs here, no check of it")
    assert registry.state(cell) not in (registry.YES, registry.NA)
    for recipe in registry.RECIPES.values():
        for feature, value in recipe.features.items():
            if "not checked" in registry.reason(value):
                assert registry.state(value) == registry.UNCHECKED, (recipe.name, feature)
    dpo = registry.RECIPES["lora_dpo_single_device"].features
    assert registry.state(dpo["compile"]) == registry.UNCHECKED
    assert registry.state(dpo["packing"]) == registry.NA  # cannot apply: pairs are whole rows

    names = list(registry.RECIPES)
    row = next(r for r in ls.feature_matrix() if r[0] == "compile")
    assert row[1 + names.index("lora_dpo_single_device")] == "not checked"
    line = next(x for x in registry_docs.feature_matrix().splitlines() if x.startswith("| [compile]"))
    assert line.split(" | ")[1 + names.index("lora_dpo_single_device")].startswith("not checked")


def test_the_training_recipes_are_those_with_tags():
    """The test tables (tests/recipes) are derived from `registry.TRAINING`: a recipe that takes a
    training method but was declared without tags would escape every one of them."""
    takes_training_configs = [
        n for n, r in registry.RECIPES.items() if set(registry.TRAINING_METHODS) & set(r.methods)
    ]
    assert takes_training_configs == list(registry.TRAINING)
    assert registry.PARENT in registry.TRAINING
    for name, recipe in registry.TRAINING.items():
        assert all(re.fullmatch(r"[a-z]+", t) for t in recipe.tags), (name, recipe.tags)
        assert recipe.tags <= set(registry.TAGS), name
    for name, recipe in registry.RECIPES.items():
        if recipe.same_losses_as is not None:
            other = registry.TRAINING.get(recipe.same_losses_as)
            assert recipe.distributed and other is not None and not other.distributed, name


def test_each_tag_is_defined_by_the_first_recipe_declared_with_it():
    assert registry.TAGS["lora"] == "lora_finetune_single_device"
    assert registry.TAGS["dist"] == "full_finetune_distributed"
    assert set(registry.TAGS) == set().union(*(r.tags for r in registry.TRAINING.values()))
