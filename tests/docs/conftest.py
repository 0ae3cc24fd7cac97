import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "assets"))


def pytest_terminal_summary(terminalreporter):
    """The docs test's count of blocks and what happened to each command, shown even without -s."""
    from doc_runner import REPORTS

    for report in REPORTS:
        terminalreporter.write_line(report)
