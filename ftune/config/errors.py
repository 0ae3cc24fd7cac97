"""The errors the config system raises, and the did-you-mean helper they share."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(Exception):
    """Every problem found in a config, reported at once.

    Args:
        problems: one line per problem: ``<dotted.path>: <what is wrong, given, accepted, fix>``.
        source: the YAML file (or registry name) the config came from, if any.
    """

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s){where}:\n{lines}")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return `` Did you mean 'x'?`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
