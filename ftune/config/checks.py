"""Check `_component_` nodes against their targets' signatures without building anything."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from ftune.config.errors import did_you_mean
from ftune.config.instantiate import COMPONENT, PARTIAL, resolve
from ftune.config.trust import UntrustedComponentError

_SCALARS = (bool, int, float, str)


def _type_ok(value: Any, annotation: Any) -> bool | None:
    """Whether a YAML scalar fits a simple annotation; None when the annotation is not checkable."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        results = [_type_ok(value, a) for a in typing.get_args(annotation)]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if isinstance(annotation, type) and annotation.__module__.split(".")[0] == "torch":
        return False  # a YAML value is never a torch object (e.g. AdamW's `lr: float | Tensor`)
    if annotation in _SCALARS:
        if value is None:
            return False
        if annotation is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if annotation is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, annotation)
    return None


def _hints(target: Any) -> dict[str, Any]:
    fn = target.__init__ if inspect.isclass(target) else target
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - one unresolvable name (a TYPE_CHECKING import): resolve the rest one by one
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(fn, "__globals__", {})
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation  # noqa: S307
        except Exception:  # noqa: BLE001 - that parameter goes unchecked
            continue
    return hints


def check_component(
    node: Any, path: str, provided: tuple[str, ...] = (), *, nested: bool = False
) -> list[str]:
    """Collect every problem in a component node and its children; never raises.

    Checks that ``_component_`` imports, that every argument names a parameter (with a
    did-you-mean), that required keyword-only parameters are set, and that scalar values fit
    simple annotations. Positional parameters of a top-level component are runtime objects the
    recipe passes in, and so are the keyword arguments named in `provided` (e.g. a scheduler's
    ``num_training_steps``). A `nested` component (an argument of another) gets no runtime
    objects, so it must set its required positional parameters or be ``_partial_``.
    """
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in check_component(v, f"{path}[{i}]", nested=nested)]
    if not isinstance(node, dict):
        return []
    if COMPONENT not in node:
        return [p for k, v in node.items() for p in check_component(v, f"{path}.{k}", nested=nested)]
    dotted = node[COMPONENT]
    try:
        target = resolve(dotted, f"{path}._component_")
    except UntrustedComponentError as e:
        return [str(e)]
    except ImportError as e:
        return [f"{path}._component_: cannot import {dotted!r}: {e}"]
    args = {k: v for k, v in node.items() if k not in (COMPONENT, PARTIAL)}
    partial = bool(node.get(PARTIAL))
    problems: list[str] = []
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None:
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not accepts_any:
            for key in sorted(set(args) - set(named)):
                problems.append(
                    f"{path}.{key}: {dotted} has no argument {key!r}.{did_you_mean(key, named)}"
                    f" It accepts: {', '.join(named)}."
                )
        for name, p in params.items():
            if (
                p.kind is p.KEYWORD_ONLY
                and p.default is p.empty
                and name not in args
                and not partial
                and name not in provided
            ):
                problems.append(
                    f"{path}.{name}: required by {dotted} but not set. "
                    f"Add it to the YAML or pass {path}.{name}=<value> on the command line."
                )
        if nested and not partial:
            runtime = [
                n
                for n, p in params.items()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                and p.default is p.empty
                and n not in args
            ]
            if runtime:
                problems.append(
                    f"{path}: {dotted} takes {', '.join(runtime)} from the recipe, which passes nothing to a "
                    f"component nested in another. Add `_partial_: true` to {path} so that the outer "
                    "component can call it with them."
                )
        hints = _hints(target)
        for key, value in args.items():
            if key in hints and not isinstance(value, (dict, list)) and _type_ok(value, hints[key]) is False:
                problems.append(
                    f"{path}.{key}: {dotted} expects {_type_name(hints[key])}, got {value!r} "
                    f"({type(value).__name__}). Set {path}.{key} to a value of that type."
                )
    for key, value in args.items():
        problems.extend(check_component(value, f"{path}.{key}", nested=True))
    return problems


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is not None:
        return str(annotation).replace("typing.", "").replace("NoneType", "None")
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
