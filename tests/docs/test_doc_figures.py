"""Every figure table of README.md and docs/ is what benchmarks/figures/report.py makes of benchmarks/results/*.json."""

import importlib.util
import json
import re

import pytest
from doc_blocks import ROOT

spec = importlib.util.spec_from_file_location(
    "benchmarks_report", ROOT / "benchmarks" / "figures" / "report.py"
)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def test_generated_figures_match_the_results_files():
    assert not report.stale_pages(), (
        f"{report.stale_pages()}: a figure block differs from benchmarks/results. Edit the results file "
        "(or rerun its benchmark), then run `python benchmarks/figures/report.py`; never edit a block by hand."
    )


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_results_file_says_where_when_and_how_it_was_measured(path):
    result = json.loads(path.read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", result["commit"]), (
        "the full commit hash the figures were measured on"
    )
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", result["date"])
    assert result["command"].strip() and result["note"].strip()
    assert {"cpu", "threads", "flags", "torch"} <= result["machine"].keys()
    assert result["rows"], "no figures"
    for row in result["rows"]:
        if "commit" in row:
            assert re.fullmatch(r"[0-9a-f]{40}", row["commit"])


def test_every_results_file_feeds_a_page():
    code = "".join(p.read_text() for p in (ROOT / "benchmarks" / "figures").glob("*.py"))
    used = {p.stem for p in RESULTS if f'"{p.stem}"' in code}
    assert used == {p.stem for p in RESULTS}, (
        f"results files no page shows: {sorted({p.stem for p in RESULTS} - used)}"
    )


def test_a_hand_edited_block_is_caught_and_regenerated(tmp_path):
    page = "docs/benchmarks.md"
    text = (ROOT / page).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| full | fp32 | off | "))
    edited = text.replace(row, row.replace("| full | fp32 | off | ", "| full | fp32 | off | 999", 1))
    assert edited != text
    assert report.render(edited, page) == text
    with pytest.raises(ValueError, match="lacks the markers <!-- figures:throughput -->"):
        report.render("# no markers\n", page)
