"""Build objects from config nodes that hold a `_component_` (a dotted import path)."""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ftune.config.errors import ConfigError
from ftune.config.trust import (
    UntrustedComponentError,
    importable_top,
    is_trusted,
    resolved_refusal,
    untrusted_message,
)

COMPONENT = "_component_"
PARTIAL = "_partial_"  # `_partial_: true` gives functools.partial(target, **kwargs), e.g. a collate function


def resolve(dotted: str, key: str = "_component_") -> Any:
    """Import the object a dotted path names (``torch.optim.AdamW``, ``ftune.models.smollm2.smollm2_135m``).

    Only paths inside the trusted packages are imported, and the object is returned only if it is
    trusted by what it is: every module met on the attribute walk and the module that defines the
    object must be trusted, and it must not be a loader (see `ftune.config.trust`).

    Raises:
        UntrustedComponentError: the path is outside the trusted packages (nothing was imported), or
            it resolved to an object that is not trusted (nothing was called).
        ImportError: naming the path and the part that failed.
    """
    if not isinstance(dotted, str) or not dotted:
        raise ImportError(f"{dotted!r} is not a dotted path such as 'torch.optim.AdamW'.")
    if not is_trusted(dotted) and importable_top(dotted):
        raise UntrustedComponentError(untrusted_message(dotted, key))
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and not module_name.startswith(e.name) and not e.name.startswith(module_name):
                raise  # the module exists but one of its own imports is missing
            continue
        for j, attr in enumerate(parts[i:], start=i + 1):
            if not hasattr(obj, attr):
                raise ImportError(
                    f"module {'.'.join(parts[:i])!r} has no attribute {attr!r} (from {dotted!r})."
                )
            obj = getattr(obj, attr)
            if isinstance(obj, ModuleType) and j < len(parts):  # a module some trusted module imported
                if refusal := resolved_refusal(dotted, obj, key, ".".join(parts[:j])):
                    raise UntrustedComponentError(refusal)
        if refusal := resolved_refusal(dotted, obj, key):
            raise UntrustedComponentError(refusal)
        return obj
    raise ImportError(f"no module named {parts[0]!r} (from {dotted!r}).")


def _plain(node: Any) -> Any:
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _build(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        if COMPONENT in value:
            return _call(value, (), {}, path)
        return {k: _build(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_build(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _call(node: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any], path: str) -> Any:
    dotted = node[COMPONENT]
    try:
        target = resolve(dotted, f"{path}._component_")
    except UntrustedComponentError as e:
        raise ConfigError([str(e)]) from None
    except ImportError as e:
        raise ConfigError([f"{path}._component_: cannot import {dotted!r}: {e}"]) from None
    cfg_kwargs = {k: _build(v, f"{path}.{k}") for k, v in node.items() if k not in (COMPONENT, PARTIAL)}
    merged = {**cfg_kwargs, **kwargs}
    if node.get(PARTIAL):
        return functools.partial(target, *args, **merged)
    try:
        inspect.signature(target).bind(*args, **merged)
    except TypeError as e:
        raise ConfigError(
            [f"{path}: {dotted}({', '.join(merged)}) does not fit its signature: {e}."]
        ) from None
    except ValueError:
        pass  # some builtins have no signature; let the call itself report
    return target(*args, **merged)


def instantiate(node: Any, *args: Any, _path: str = "config", **kwargs: Any) -> Any:
    """Build the object `node` describes, recursively; None stays None.

    Args:
        node: a mapping with ``_component_`` (dotted path) and keyword arguments; nested mappings
            with ``_component_`` (also inside lists) are built first and passed in.
        *args: runtime objects the recipe passes positionally (parameters, tokenizer, model).
        _path: the node's dotted path, for error messages.
        **kwargs: extra keyword arguments that take precedence over the config's.

    Returns:
        The built object.

    Raises:
        ConfigError: when the node has no ``_component_``, the path does not import, or the
            arguments do not fit the target's signature.

    Example:
        >>> opt = instantiate(cfg.optimizer, model.parameters())  # doctest: +SKIP
    """
    if node is None:
        return None
    if isinstance(node, DictConfig) and _path == "config":
        _path = node._get_full_key(None) or _path  # e.g. "model", "dataset.packed"
    plain = _plain(node)
    if not isinstance(plain, dict) or COMPONENT not in plain:
        raise ConfigError(
            [
                f"{_path}: cannot instantiate {plain!r}: expected a mapping with a _component_ key holding a "
                "dotted import path, e.g. {_component_: torch.optim.AdamW, lr: 1e-4}."
            ]
        )
    return _call(plain, args, kwargs, _path)
