"""ftune.training's sub-packages keep the order its docstring states, and recipes see one namespace.

tests/test_layout.py counts all of ftune.training as one layer; this holds its four sub-packages to
features -> step -> methods / run (methods and run never import each other).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_layout import _imports, _modules  # noqa: E402

import ftune.training  # noqa: E402

# Lowest first; names on one line never import each other. The package's own __init__ is above all.
SUBLAYERS: list[tuple[str, ...]] = [("features",), ("step",), ("methods", "run")]


def _sub(module: str) -> str | None:
    """The sub-package of an ftune.training module (None for ftune.training itself)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["ftune", "training"] and len(parts) > 2 else None


def _against_the_order(mods: dict[str, Path]) -> list[str]:
    rank = {name: i for i, names in enumerate(SUBLAYERS) for name in names}
    bad = []
    for m, path in mods.items():
        if _sub(m) is None:
            continue
        for target, _, line in _imports(m, path, mods):
            if target.split(".")[:2] != ["ftune", "training"]:
                continue
            if _sub(target) is None:
                bad.append(f"{path.name}:{line}: {m} imports ftune.training's __init__ (import the module)")
            elif _sub(target) != _sub(m) and rank[_sub(target)] >= rank[_sub(m)]:
                bad.append(f"{path.name}:{line}: {m} imports {target}")
    return bad


def test_every_module_sits_in_a_listed_sub_package():
    found = {_sub(m) for m in _modules() if _sub(m) is not None}
    assert found == {name for names in SUBLAYERS for name in names}


def test_sub_packages_import_only_lower_ones():
    bad = _against_the_order(_modules())
    assert not bad, "move the code to the sub-package it belongs to:\n" + "\n".join(bad)


def test_the_order_check_catches_an_upward_import(tmp_path):
    """The check above on a planted module of `step` that imports `run` (it cannot fail otherwise)."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ftune.training.run.cadence import every\nfrom ftune.training import Loss\n")
    empty = tmp_path / "empty.py"
    empty.write_text("")
    mods = {"ftune.training.step.probe": probe, "ftune.training.run.cadence": empty, "ftune.training": empty}
    assert _against_the_order(mods) == [
        "probe.py:1: ftune.training.step.probe imports ftune.training.run.cadence",
        "probe.py:2: ftune.training.step.probe imports ftune.training's __init__ (import the module)",
    ]


@pytest.mark.parametrize("name", ftune.training.__all__)
def test_every_public_name_is_read_from_ftune_training(name):
    assert getattr(ftune.training, name) is not None
