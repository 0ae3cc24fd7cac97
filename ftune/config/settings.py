"""Recipe-level scalars, declared once per recipe family as a typed dataclass.

A settings class lists every scalar key a recipe reads (type, default, one-line help) and, in
``COMPONENTS``, the `_component_` sections it builds. `read_settings` rejects unknown keys
(with did-you-mean), wrong types and missing required sections, and checks every component
against its target's signature, all at once.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

from ftune.config.checks import _type_name, _type_ok, check_component
from ftune.config.errors import ConfigError, did_you_mean
from ftune.config.trust import TRUST_KEY


def setting(default: Any, help: str) -> Any:  # noqa: A002 - `help` reads best in the declarations
    """Declare one recipe-level key: its default and one line of help (shown by `ftune validate --help`)."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


class Settings:
    """Base for recipe settings dataclasses.

    ``COMPONENTS`` maps each `_component_` section to True (required) or False (optional, may be
    absent or null). Sections hold components; every other top-level key must be a declared field.
    """

    COMPONENTS: ClassVar[dict[str, bool]] = {}
    # Optional sections that, left out or null, are the model the checkpoint's config.json describes:
    # section -> the checkpointer section whose checkpoint_dir holds it (ftune.config.model_source).
    FROM_CHECKPOINT: ClassVar[dict[str, str]] = {}
    # Keyword arguments the recipe passes at run time, per section (not required in the YAML).
    RUNTIME: ClassVar[dict[str, tuple[str, ...]]] = {}

    def problems(self) -> list[str]:
        """Problems with values that have the right types but do not make sense together; none by default.

        Each line names the key, what was given, what is accepted and how to fix it.
        """
        return []

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        """Values inside the `_component_` sections that cannot work (e.g. ``optimizer.lr: 0``); none by default.

        Checked with the config only (no target imported), so ``ftune run`` refuses them before torch
        is imported. Each line starts with the dotted key, like `problems`.

        Args:
            data: the resolved config as plain containers.
        """
        return []


def absent_values(cls: type) -> dict[str, Any]:
    """What reading each declared key gives when the YAML leaves it out: sections None, fields their default."""
    values: dict[str, Any] = dict.fromkeys(cls.COMPONENTS)  # type: ignore[attr-defined]
    values.update({key: default for key, _, default, _ in describe(cls)})
    return values


def describe(cls: type) -> list[tuple[str, str, Any, str]]:
    """(key, type, default, help) for every field of a settings class, for docs and `--help`."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((f.name, _type_name(hints[f.name]), default, f.metadata.get("help", "")))
    return rows


def _check_value(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return isinstance(value, list) and all(item is Any or _check_value(v, item) for v in value)
    ok = _type_ok(value, annotation)
    return True if ok is None else ok


def collect_problems(cfg: Any, cls: type, *, signatures: bool = True, values: bool = True) -> list[str]:
    """Every problem with `cfg` (a `Config`) against the settings class `cls`; never raises.

    With ``signatures=False`` the `_component_` targets are not imported (their arguments are not
    checked against their signatures): the check `ftune run` makes before torch is imported. With
    ``values=False`` only the signatures are checked (the rest passed that earlier check).
    """
    data = cfg.to_dict()
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    components: dict[str, bool] = cls.COMPONENTS  # type: ignore[attr-defined]
    known = sorted(fields | set(components))
    problems = []
    for key, value in data.items():
        if key == TRUST_KEY:
            continue  # read by load_config (ftune.config.trust)
        if not values and key not in components:
            continue
        if key in components:
            if value is None:
                if components[key]:
                    problems.append(
                        f"{key}: required section is null ({cfg.where(key)}); give it a _component_."
                    )
                continue
            if not isinstance(value, dict) or "_component_" not in value:
                problems.append(
                    f"{key}: expected a mapping with a _component_ ({cfg.where(key)}), got {value!r}."
                )
                continue
            if signatures:
                problems.extend(check_component(value, key, cls.RUNTIME.get(key, ())))  # type: ignore[attr-defined]
        elif key in fields:
            if not _check_value(value, hints[key]):
                problems.append(
                    f"{key}: expected {_type_name(hints[key])}, got {value!r} ({type(value).__name__}) "
                    f"({cfg.where(key)})."
                )
        else:
            problems.append(
                f"{key}: unknown key ({cfg.where(key)}).{did_you_mean(key, known)} "
                f"This recipe accepts: {', '.join(known)}."
            )
    for key, required in components.items() if values else ():
        if required and key not in data:
            problems.append(
                f"{key}: required section is missing; add `{key}: {{_component_: ...}}` to the YAML."
            )
    if not problems and values:
        found = [*_build(cls, data).problems(), *cls.section_problems(data)]  # type: ignore[attr-defined]
        problems.extend(f"{p} ({cfg.where(p.split(':')[0])})" for p in found)
    return problems


def _build(cls: type, data: dict[str, Any]) -> Any:
    return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def read_settings(cfg: Any, cls: type, *, values_checked: bool = False) -> Any:
    """Build the settings dataclass from `cfg`, or raise `ConfigError` listing every problem.

    ``values_checked``: the keys, types and ranges passed ``collect_problems(..., signatures=False)``
    on this config already; only the component signatures are left to check.
    """
    problems = collect_problems(cfg, cls, values=not values_checked)
    if problems:
        raise ConfigError(problems, cfg.source)
    return _build(cls, cfg.to_dict())
