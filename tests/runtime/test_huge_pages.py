"""`ftune run` turns on PyTorch's huge-page allocations before torch starts, unless the user chose, and says so."""

import os
import subprocess
import sys

from ftune.runtime import hardware


def test_run_sets_huge_pages_unless_the_user_set_the_variable(tmp_path):
    recipe = tmp_path / "print_env.py"
    recipe.write_text("import os\nprint('THP=' + os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset'))\n")
    code = "import sys; from ftune.cli.run import main; sys.exit(main(sys.argv[1:]))"
    for extra, expected in (({}, "THP=1"), ({hardware.HUGE_PAGES_ENV: "0"}, "THP=0")):
        env = {k: v for k, v in os.environ.items() if k != hardware.HUGE_PAGES_ENV} | extra
        out = subprocess.run([sys.executable, "-c", code, str(recipe), "--help"], env=env,
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert expected in out.stdout, out.stdout + out.stderr


def test_the_startup_line_says_when_huge_pages_are_on(monkeypatch):
    import torch

    monkeypatch.setenv(hardware.HUGE_PAGES_ENV, "1")
    assert "huge-page allocations (THP_MEM_ALLOC_ENABLE=1)" in hardware.startup_message(
        torch.device("cpu"), torch.float32
    )
    monkeypatch.setenv(hardware.HUGE_PAGES_ENV, "0")
    assert "huge-page" not in hardware.startup_message(torch.device("cpu"), torch.float32)
