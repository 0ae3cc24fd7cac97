"""The bad-input catalogue (bad_inputs.py), run in-process: each command fails with one clear message.

Asserted for every case: exit code != 0, no traceback, the message names what is wrong, where,
what was given and how to fix it, and no input file changed (hashes before and after).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
from bad_inputs import CASES, SETUPS, Case
from tiny_checkpoint import tiny_overrides

from ftune.cli.main import main


def _hashes(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _argv(case: Case, tmp: Path, ckpt: Path, demo: Path) -> list[str]:
    argv: list[str] = []
    for arg in case.argv:
        if arg == "{tiny}":
            argv += tiny_overrides(ckpt, demo, tmp / "out")
        else:
            argv.append(arg.replace("{tmp}", str(tmp)).replace("{ckpt}", str(ckpt)))
    return argv


def invoke(argv: list[str], capsys) -> tuple[int, str]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    captured = capsys.readouterr()
    return rc, captured.err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path, tiny_checkpoint, demo_dir, capsys):
    tmp = tmp_path / "case"
    tmp.mkdir()
    if case.setup:
        SETUPS[case.setup](tmp, tiny_checkpoint)
    before = _hashes(tmp, tiny_checkpoint)
    rc, err = invoke(_argv(case, tmp, tiny_checkpoint, demo_dir), capsys)
    assert rc != 0, f"exit code 0; stderr:\n{err}"
    assert "Traceback" not in err, err
    for part in ("what", "where", "given", "fix"):
        expected = getattr(case, part).replace("{tmp}", str(tmp))
        assert expected in err, f"{part}: {expected!r} not in:\n{err}"
    after = _hashes(tmp, tiny_checkpoint)
    changed = [p for p in before if before[p] != after.get(p)]
    assert not changed, f"inputs changed: {changed}"
    assert not (tmp / "owned").exists(), "a refused component ran"


def test_errors_page_is_generated_from_the_catalogue():
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("make_errors_doc", root / "scripts" / "make_errors_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (root / "docs" / "errors.md").read_text(encoding="utf-8") == module.render(), (
        "docs/errors.md is stale: run python scripts/make_errors_doc.py"
    )


def test_catalogue_size_and_ids():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    assert all(c.what and c.where and c.given and c.fix for c in CASES)
