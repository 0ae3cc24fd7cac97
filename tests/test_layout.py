"""The layout rules of STYLE.md that a machine can check: no file over 400 lines, the library never
imports the recipes or the CLI."""

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def test_no_python_file_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _tracked("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these files (one concept a file, at most {MAX_LINES} lines): {long}"


def test_the_library_imports_neither_recipes_nor_the_cli():
    bad = []
    for path in _tracked("ftune/*.py"):
        if "/cli/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [
                f"{path.relative_to(ROOT)}: {n}"
                for n in names
                if n.split(".")[:2] in (["ftune", "cli"], ["recipes"])
                or n.startswith(("recipes", "ftune.cli", "ftune._recipes"))
            ]
    assert not bad, bad
