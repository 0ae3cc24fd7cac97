"""The bad-input catalogue (bad_inputs.py), run in-process: each command fails with one clear message.

Asserted for every case: exit code != 0, no traceback, the message names what is wrong, where,
what was given and how to fix it, and no input file changed (hashes before and after).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import socket
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def _busy_port(case: Case) -> Iterator[str]:
    """A port another socket listens on while the case runs (for {busy_port}), else ''."""
    if not any("{busy_port}" in a for a in case.argv):
        yield ""
        return
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield str(busy.getsockname()[1])


def _fill(text: str, tmp: Path, ckpt: Path, port: str) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{ckpt}", str(ckpt)).replace("{busy_port}", port)


def _argv(case: Case, tmp: Path, ckpt: Path, demo: Path, port: str) -> list[str]:
    argv: list[str] = []
    for arg in case.argv:
        if arg == "{tiny}":
            argv += tiny_overrides(ckpt, demo, tmp / "out")
        else:
            argv.append(_fill(arg, tmp, ckpt, port))
    return argv


def invoke(argv: list[str], capfd) -> tuple[int, str]:
    """Run `ftune <argv>` in this process; the exit code and stderr (the launched ranks' too)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    captured = capfd.readouterr()
    return rc, captured.err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path, tiny_checkpoint, demo_dir, capfd):
    tmp = tmp_path / "case"
    tmp.mkdir()
    if case.setup:
        SETUPS[case.setup](tmp, tiny_checkpoint)
    before = _hashes(tmp, tiny_checkpoint)
    with _busy_port(case) as port:
        rc, err = invoke(_argv(case, tmp, tiny_checkpoint, demo_dir, port), capfd)
    assert rc != 0, f"exit code 0; stderr:\n{err}"
    assert "Traceback" not in err, err
    for part in ("what", "where", "given", "fix"):
        expected = _fill(getattr(case, part), tmp, tiny_checkpoint, port)
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
