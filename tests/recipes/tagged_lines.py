"""Reading a recipe's tagged lines: which lines are tagged, with which variant, as whole statements.

A tag (``# [lora]``, ``# [dist]``, ...) says why a line exists: the variant that adds it to the
parent recipe, full_finetune_single_device. Several tags joined by ``+`` (``# [kd+dist]``) mark a
line that exists because of the two together (the distributed KD recipe shards its teacher: neither
KD alone nor FSDP2 alone has that line). Used by test_skeleton.py and test_same_tag.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from ftune import registry

# The tags: those of the registry's recipes (each defined by one recipe, registry.TAGS).
NAMES = tuple(registry.TAGS)
_NAME = rf"(?:{'|'.join(NAMES)})"
TAG = re.compile(rf"#\s*\[({_NAME}(?:\+{_NAME})*)\]")
TAG_COMMENT = re.compile(r"\s*#\s*\[[\w+]+\].*$")
# Any tag-like comment, known or not: a recipe writing a tag its registry entry lacks fails on it.
ANY_TAG = re.compile(r"#\s*\[(\w+(?:\+\w+)*)\]")


def body(path: Path) -> str:
    """The recipe without its module docstring (siblings' docstrings differ)."""
    return re.sub(r'\A""".*?"""\n', "", path.read_text(), flags=re.S)


def _depth(code: str) -> int:
    return code.count("(") + code.count("[") - code.count(")") - code.count("]")


def tagged(lines: list[str]) -> list[bool]:
    """Which lines are tagged. A tag on the first line of a statement that opens a bracket covers the
    statement's continuation lines too (ruff formats a long tagged call over several lines)."""
    out, depth = [], 0
    for line in lines:
        code = line.split("#", 1)[0]
        if depth > 0:
            out.append(True)
        else:
            out.append(bool(TAG.search(line)))
            if not out[-1]:
                continue
        depth += _depth(code)
    return out


def tagged_statements(path: Path) -> list[tuple[str, str]]:
    """``(tag, code)`` for each tagged statement, in file order: the code joined over its continuation
    lines, comments dropped, whitespace collapsed (formatting is not a difference)."""
    out: list[tuple[str, str]] = []
    depth = 0
    for line in body(path).splitlines():
        code = line.split("#", 1)[0].strip()
        if depth > 0:
            out[-1] = (out[-1][0], f"{out[-1][1]} {code}".strip())
        else:
            match = TAG.search(line)
            if not match:
                continue
            out.append((match.group(1), code))
        depth += _depth(code)
    return [(tag, re.sub(r"\s+", " ", re.sub(r"([(\[])\s+|\s+([)\]])", r"\1\2", code))) for tag, code in out]


def job(code: str) -> str:
    """What a statement is for: the name it assigns, the keyword it passes, the function it calls, or
    the import. Two lines with the same job in sibling recipes do the same thing."""
    if code.startswith("from ") or code.startswith("import "):
        return "import"
    if code.startswith("return "):
        return "return"
    assigned = re.match(r"([\w.]+)\s*=(?!=)", code)
    if assigned:
        return f"{assigned.group(1)} ="
    called = re.match(r"([\w.]+)\(", code)
    return f"{called.group(1)}()" if called else code
