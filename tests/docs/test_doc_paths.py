"""No doc shows a path of a developer's machine, and README's links resolve like the docs' ones."""

import re

import pytest
from doc_blocks import DOC_FILES, ROOT

DEVELOPER_PATH = re.compile(r"(?<![\w.~])(/work/|/root/|/home/|/Users/|[A-Z]:\\Users\\)")


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_absolute_path_of_a_developer_machine(path):
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if DEVELOPER_PATH.search(line)
    ]
    assert not hits, "use a relative path, ~ or $FTUNE_HOME instead of:\n" + "\n".join(hits)


def test_the_path_check_catches_what_it_should():
    assert DEVELOPER_PATH.search("cd /work/main")
    assert DEVELOPER_PATH.search("eval of /home/me/.cache/ftune")
    assert not DEVELOPER_PATH.search("~/.cache/ftune and $FTUNE_HOME/models and /tmp/qat_experiment")


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    broken = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"[a-z]+:", target) and not (ROOT / target.partition("#")[0]).exists()
    ]
    assert not broken, f"README.md links to missing files: {broken}"
