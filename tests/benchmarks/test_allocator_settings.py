"""The pure part of benchmarks/allocator_settings.py: the rows it writes from the runs of its rounds."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import allocator_settings  # noqa: E402


def _run(method, setting, step_s, peak):
    return {"method": method, "setting": setting, "step_s": step_s, "peak_rss_gib": peak}


def test_rows_are_medians_over_rounds_relative_to_the_default_setting():
    runs = [
        _run("full", "default", 20.0, 5.2), _run("full", "huge pages", 21.0, 5.0),
        _run("full", "mmap from 128 KiB", 29.0, 4.0),
        _run("full", "default", 22.0, 5.4), _run("full", "huge pages", 21.0, 5.0),
        _run("full", "mmap from 128 KiB", 31.0, 4.1),
    ]  # fmt: skip
    rows = allocator_settings.summarise(runs)
    assert [r["setting"] for r in rows] == list(allocator_settings.SETTINGS)
    default, thp, mmap = rows
    assert default["step_s"] == 21.0 and default["step_s_rounds"] == [20.0, 22.0]
    assert default["peak_rss_gib"] == 5.3 and default["time_vs_default"] == 1.0
    assert thp["env"] == {"THP_MEM_ALLOC_ENABLE": "1"} and thp["peak_vs_default"] == round(5.0 / 5.3, 2)
    assert mmap["time_vs_default"] == round(30.0 / 21.0, 2) and mmap["peak_rss_gib"] == 4.05
