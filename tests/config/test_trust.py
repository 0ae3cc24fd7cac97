"""The trust model: a `_component_` outside the trusted packages is refused at load time, before any import."""

import sys

import pytest

from ftune.cli.main import main
from ftune.config import ConfigError, instantiate, load_config, trust_grants

MARKER_MODULE = """
from pathlib import Path
Path({marker!r}).write_text("imported")

def touch(path):
    Path(path).write_text("called")
    return path
"""


@pytest.fixture(autouse=True)
def fresh_trust(monkeypatch):
    # Trust granted by one test (--trust, a config, a folder) must not leak into the next.
    # The conftest's own grant (ftune_test_targets) stays.
    monkeypatch.setattr(trust_grants, "_packages", {"ftune_test_targets"})
    monkeypatch.setattr(trust_grants, "_folders", set())
    monkeypatch.setenv("FTUNE_TRUST", "")


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """A module `evil_<test>` on sys.path that leaves a marker file when imported."""
    name = f"evil_{abs(hash(str(tmp_path))) % 10**8}"
    folder = tmp_path / "site"
    folder.mkdir()
    marker = tmp_path / "imported"
    (folder / f"{name}.py").write_text(MARKER_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(folder))
    yield name, marker
    sys.modules.pop(name, None)


def test_untrusted_component_refused_at_load_time_naming_key_where_and_fix(evil, tmp_path):
    name, marker = evil
    with pytest.raises(ConfigError) as info:
        load_config("smollm2/135M_lora", [f"model={name}.touch", f"model.path={tmp_path / 'x'}"])
    text = str(info.value)
    assert (
        f"model._component_: refusing to import '{name}.touch' (set on the command line): '{name}' is not a "
        "trusted package (trusted: ftune, ftune_test_targets, torch, torchao)"
    ) in text
    assert f"pass --trust {name} to ftune run / ftune validate, or set FTUNE_TRUST={name}" in text
    assert "a config file cannot grant trust itself" in text and "trusted_modules" not in text
    assert not marker.exists(), "the untrusted module was imported"


def test_the_shell_command_of_the_issue_is_refused_and_validate_says_so(tmp_path, capsys):
    target = tmp_path / "FILE"
    rc = main(["validate", "smollm2/135M_lora", "model=subprocess.getoutput", f"model.cmd=touch {target}"])
    assert rc == 1 and not target.exists()
    err = capsys.readouterr().err
    assert "refusing to import 'subprocess.getoutput'" in err and "Traceback" not in err


def test_entry_points_that_load_code_are_refused_inside_torch():
    with pytest.raises(ConfigError, match=r"torch\.hub can load or compile code, so it is not trusted"):
        load_config("smollm2/135M_lora", ["model=torch.hub.load"])
    with pytest.raises(ConfigError, match=r"refusing to import 'torch.load'"):
        instantiate({"_component_": "torch.load", "f": "x"})


def test_resolve_refuses_before_importing(evil):
    name, marker = evil
    with pytest.raises(ConfigError, match=rf"model\._component_: refusing to import '{name}\.touch'"):
        instantiate({"_component_": f"{name}.touch", "path": "x"}, _path="model")
    assert not marker.exists()


def test_only_the_users_command_grants_trust_a_config_only_asks(evil, tmp_path, monkeypatch, capsys):
    name, marker = evil
    overrides = [f"model={name}.touch", f"model.path={tmp_path / 'x'}"]
    # FTUNE_TRUST
    monkeypatch.setenv("FTUNE_TRUST", f"torchao,{name}")
    assert load_config("smollm2/135M_lora", overrides).model["_component_"] == f"{name}.touch"
    monkeypatch.setenv("FTUNE_TRUST", "")
    # trusted_modules in a config file, or as an override, is a request: refused with the flag to add
    own = tmp_path / "own.yaml"
    own.write_text(
        f"trusted_modules: [{name}]\nthing:\n  _component_: {name}.touch\n  path: {tmp_path / 'y'}\n"
    )
    for path, extra in ((own, []), ("smollm2/135M_lora", [f"trusted_modules=[{name}]", *overrides])):
        with pytest.raises(ConfigError, match=rf"a config cannot grant itself trust.*`--trust {name}`"):
            load_config(path, extra)
    assert not marker.exists()
    monkeypatch.setenv("FTUNE_TRUST", name)  # ... granted by the user's own environment, it runs
    assert instantiate(load_config(own).thing) == str(tmp_path / "y") and marker.exists()
    monkeypatch.setenv("FTUNE_TRUST", "")
    # --trust on ftune validate (a fresh process state)
    monkeypatch.setattr(trust_grants, "_packages", {"ftune_test_targets"})
    assert main(["validate", "smollm2/135M_lora", *overrides]) == 1
    assert "refusing to import" in capsys.readouterr().err
    assert main(["validate", "--trust", name, "smollm2/135M_lora", *overrides]) == 0
    assert f"  model          {name}.touch\n" in capsys.readouterr().out  # listed among the callables


def test_modules_next_to_a_config_file_are_trusted(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "my_data_next.py").write_text("def build():\n    return 7\n")
    monkeypatch.syspath_prepend(str(folder))
    (folder / "cfg.yaml").write_text("thing:\n  _component_: my_data_next.build\n")
    assert instantiate(load_config(folder / "cfg.yaml").thing) == 7
    sys.modules.pop("my_data_next", None)


def test_trusted_modules_must_be_a_list_of_names(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trusted_modules: my_pkg\n")
    with pytest.raises(
        ConfigError, match=r"trusted_modules: expected a list of package or module names such as"
    ):
        load_config(bad)


def test_a_missing_package_is_a_typo_not_a_trust_problem():
    with pytest.raises(ConfigError, match=r"cannot import 'torhc\.optim\.AdamW': no module named 'torhc'"):
        instantiate({"_component_": "torhc.optim.AdamW"}, _path="optimizer")


def test_validate_lists_every_callable(capsys):
    assert main(["validate", "smollm2/135M_lora"]) == 0
    out = capsys.readouterr().out
    assert "It will call:\n  model          ftune.models.smollm2.smollm2_135m\n" in out
    assert "  optimizer      torch.optim.AdamW\n" in out and "  peft           ftune.peft.apply_lora\n" in out


RECIPE = """
from ftune import config

def main(cfg):
    print("built", config.instantiate(cfg.node.thing))

if __name__ == "__main__":
    config.run(main)
"""


def test_ftune_run_refuses_before_building_and_trust_makes_it_run(evil, tmp_path, capsys):
    name, marker = evil
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "my_recipe.py").write_text(RECIPE)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"thing:\n  _component_: {name}.touch\n  path: {tmp_path / 'called'}\n")
    assert main(["run", str(recipes / "my_recipe.py"), "--config", str(cfg)]) == 1
    assert f"thing._component_: refusing to import '{name}.touch' (in {cfg})" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "called").exists()
    assert main(["run", "--trust", name, str(recipes / "my_recipe.py"), "--config", str(cfg)]) == 0
    assert (tmp_path / "called").read_text() == "called"
    assert f"built {tmp_path / 'called'}" in capsys.readouterr().out
