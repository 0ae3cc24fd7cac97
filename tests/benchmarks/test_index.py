"""benchmarks/README.md's index lists every script, the results file it writes and the pages that render it.

The pages column is checked against what the renderers read: each block of benchmarks/figures/report.py
is rendered with `load` recording the results files it opens.
"""

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
from figures import common, methods, pages, report, step, text, training  # noqa: E402

README = BENCH / "README.md"
RENDERERS = (common, methods, pages, step, text, training)
RESULT = re.compile(r"results/([\w.-]+\.json)")
ONLY_WHEN_RUN = "only when run"


def _section(markdown: str) -> str:
    start = markdown.index("\n## Index\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end >= 0 else len(markdown)]


def _rows(section: str, header: str) -> list[list[str]]:
    """The body rows of the table whose header row starts with `| header |`, as lists of cells."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _pages(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+\.md)`", cell))


def problems(markdown: str, scripts: set[str], results: set[str], rendered: dict[str, set[str]]) -> list[str]:
    """What is wrong with the index of `markdown`, given the folder's scripts and results files and the
    pages each results file is rendered in."""
    section = _section(markdown)
    found = []
    written: dict[str, str] = {}
    listed_scripts = set()
    for script_cell, writes, pages_cell in _rows(section, "script"):
        (script,) = re.findall(r"\[([\w.-]+\.py)\]", script_cell) or [script_cell]
        listed_scripts.add(script)
        names = set(RESULT.findall(writes))
        if len(names) > 1:
            found.append(f"{script}: one row a results file, this one names {sorted(names)}")
        for name in names:
            if name not in results and ONLY_WHEN_RUN not in writes:
                found.append(
                    f"{script}: writes results/{name}, which is not in benchmarks/results/ "
                    f"(say '{ONLY_WHEN_RUN}' if it is written elsewhere)"
                )
            elif name in results:
                written[name] = script
                if _pages(pages_cell) != rendered.get(name, set()):
                    found.append(
                        f"{script}: results/{name} is rendered in {sorted(rendered.get(name, set()))}, "
                        f"the index says {sorted(_pages(pages_cell))}"
                    )
        if not names and not writes.startswith("nothing") and ONLY_WHEN_RUN not in writes:
            found.append(f"{script}: name its results file, or say 'nothing' or '{ONLY_WHEN_RUN}'")
    found += [f"{s} is missing from the index" for s in sorted(scripts - listed_scripts)]
    found += [f"the index names {s}, which is not in benchmarks/" for s in sorted(listed_scripts - scripts)]
    for file_cell, _, pages_cell in _rows(section, "results file"):
        for name in RESULT.findall(file_cell)[:1]:
            if name not in results:
                found.append(f"the index names results/{name}, which is not in benchmarks/results/")
            elif name in written:
                found.append(f"results/{name} is listed as made by hand, but {written[name]} writes it")
            else:
                written[name] = "by hand"
                if _pages(pages_cell) != rendered.get(name, set()):
                    found.append(
                        f"results/{name} is rendered in {sorted(rendered.get(name, set()))}, "
                        f"the index says {sorted(_pages(pages_cell))}"
                    )
    found += [f"results/{name} is in no row of the index" for name in sorted(results - written.keys())]
    return found


@pytest.fixture(scope="module")
def rendered() -> dict[str, set[str]]:
    """results file name -> the pages whose blocks read it, from rendering every block."""
    opened: set[str] = set()
    original = common.load

    def recording(name: str) -> dict:
        opened.add(f"{name}.json")
        return original(name)

    patched = [m for m in RENDERERS if getattr(m, "load", None) is original]
    for module in patched:
        module.load = recording
    pages_of: dict[str, set[str]] = {}
    try:
        for page, render in report.BLOCKS.values():
            opened.clear()
            render()
            for name in opened:
                pages_of.setdefault(name, set()).add(page)
    finally:
        for module in patched:
            module.load = original
    return pages_of


def _folder() -> tuple[set[str], set[str]]:
    return {p.name for p in BENCH.glob("*.py")}, {p.name for p in (BENCH / "results").glob("*.json")}


def test_the_index_lists_every_script_and_results_file_with_the_pages_that_render_it(rendered):
    scripts, results = _folder()
    assert not problems(README.read_text(encoding="utf-8"), scripts, results, rendered), (
        "benchmarks/README.md's index is out of date:\n"
        + "\n".join(problems(README.read_text(encoding="utf-8"), scripts, results, rendered))
    )


def test_the_index_lists_every_renderer():
    rows = _rows(_section(README.read_text(encoding="utf-8")), "file")
    listed = {m for cell, _ in rows for m in re.findall(r"\[figures/([\w.-]+\.py)\]", cell)}
    on_disk = {p.name for p in (BENCH / "figures").glob("*.py")} - {"__init__.py"}
    assert listed == on_disk, (
        f"benchmarks/figures/ files the index lacks or names wrongly: {listed ^ on_disk}"
    )


def test_a_missing_script_a_ghost_script_and_a_ghost_results_file_are_caught(rendered):
    scripts, results = _folder()
    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| [grpo_vs_trl.py]"))
    assert problems(text.replace(row + "\n", ""), scripts, results, rendered) == [
        "grpo_vs_trl.py is missing from the index",
        "results/grpo_vs_trl.json is in no row of the index",
    ]
    ghost = row.replace("grpo_vs_trl.py", "gone.py")
    assert problems(text.replace(row, f"{row}\n{ghost}"), scripts, results, rendered) == [
        "the index names gone.py, which is not in benchmarks/"
    ]
    stale = row.replace("grpo_vs_trl.json", "old.json")
    assert problems(text.replace(row, stale), scripts, results, rendered) == [
        "grpo_vs_trl.py: writes results/old.json, which is not in benchmarks/results/ "
        "(say 'only when run' if it is written elsewhere)",
        "results/grpo_vs_trl.json is in no row of the index",
    ]
    wrong_page = row.replace("`docs/benchmarks.md`", "`docs/qat.md`")
    assert problems(text.replace(row, wrong_page), scripts, results, rendered) == [
        "grpo_vs_trl.py: results/grpo_vs_trl.json is rendered in ['docs/benchmarks.md'], "
        "the index says ['docs/qat.md']"
    ]
