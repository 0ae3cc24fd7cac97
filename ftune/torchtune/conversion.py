"""What a torchtune config conversion produces (`Conversion`, one `KeyReport` per torchtune key) and
the state the conversion rules share while they run (`Converter`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["mapped", "covered", "unsupported"]


@dataclass(frozen=True)
class KeyReport:
    """What became of one torchtune key (dotted path)."""

    key: str
    status: Status
    detail: str


@dataclass
class Conversion:
    """An ftune config converted from a torchtune one."""

    recipe: str
    config: dict[str, Any]
    report: list[KeyReport] = field(default_factory=list)

    @property
    def unsupported(self) -> list[KeyReport]:
        return [r for r in self.report if r.status == "unsupported"]


class Converter:
    """The torchtune config being converted, the ftune config being built and the report so far."""

    def __init__(self, tt: dict[str, Any], recipe: str) -> None:
        self.tt, self.recipe = tt, recipe
        self.out: dict[str, Any] = {}
        self.report: list[KeyReport] = []
        self.family: str | None = None
        self.teacher_family: str | None = None

    def note(self, key: str, status: Status, detail: str) -> None:
        self.report.append(KeyReport(key, status, detail))

    def set(self, dotted: str, value: Any) -> None:
        node = self.out
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
