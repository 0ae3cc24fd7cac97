import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ftune_cli(tmp_path):
    """Run `ftune <args>` in a subprocess; returns CompletedProcess with text output."""

    def run(*args: str, timeout: float = 120, env: dict | None = None, cwd: Path | None = None):
        full_env = {k: v for k, v in os.environ.items() if k != "FTUNE_DEBUG"}
        full_env.update({"PYTHONPATH": str(ROOT), "FTUNE_HOME": str(tmp_path / "home"), **(env or {})})
        return subprocess.run(
            [sys.executable, "-m", "ftune.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            cwd=cwd or tmp_path,
        )

    return run
