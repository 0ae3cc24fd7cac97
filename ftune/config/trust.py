"""Which `_component_` paths a config may import: the trust model.

A `_component_` is an import and a call, so a YAML file is code. ftune imports a component only
from a trusted package, decided from the dotted path's text before anything is imported:

- ftune, torch and torchao (minus the few entry points in `DENIED` that load or compile code);
- packages the user names: ``--trust PKG`` on `ftune run` / `ftune validate`, the environment
  variable ``FTUNE_TRUST=pkg1,pkg2``, or a top-level ``trusted_modules: [pkg]`` in a config file;
- modules in the folder of a copied recipe or of a user config file (``my_data.py`` next to
  ``my_recipe.py``).

A name trusts its submodules too (``mypkg`` trusts ``mypkg.data.build``). Trust granted by
``--trust``, a config file or a recipe folder lasts for the process (as an entry of ``sys.path`` does).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

BUILTIN_TRUSTED = ("ftune", "torch", "torchao")
TRUST_ENV = "FTUNE_TRUST"
TRUST_KEY = "trusted_modules"

# Inside the trusted packages, these fetch, unpickle or compile code, or run another recipe file:
# a config could reach arbitrary code through them, so they are refused unless named exactly.
DENIED = (
    "torch.hub",
    "torch.load",
    "torch.package",
    "torch.jit.load",
    "torch.utils.cpp_extension",
    "torch.distributed.run",
    "ftune.cli",
    "ftune.config.run",
)

_packages: set[str] = set()
_folders: set[Path] = set()


def _under(dotted: str, prefix: str) -> bool:
    return dotted == prefix or dotted.startswith(prefix + ".")


def trust_packages(names: Iterable[str]) -> None:
    """Trust these packages or modules (dotted names) for the rest of the process."""
    _packages.update(n.strip() for n in names if n.strip())


def trust_folder(folder: str | os.PathLike) -> None:
    """Trust the modules in `folder` (a copied recipe's or a user config's folder)."""
    _folders.add(Path(folder).resolve())


def env_packages() -> list[str]:
    """The packages named in ``$FTUNE_TRUST`` (comma-separated)."""
    return [n.strip() for n in os.environ.get(TRUST_ENV, "").split(",") if n.strip()]


def trusted_packages(extra: Iterable[str] = ()) -> list[str]:
    """Every trusted package name: the built-in ones, ``$FTUNE_TRUST``, ``--trust`` and `extra`."""
    return sorted({*BUILTIN_TRUSTED, *env_packages(), *_packages, *extra})


def _in_trusted_folder(top: str) -> bool:
    return any((f / f"{top}.py").is_file() or (f / top / "__init__.py").is_file() for f in _folders)


def is_trusted(dotted: str, extra: Iterable[str] = ()) -> bool:
    """Whether `dotted` may be imported (by its text alone: nothing is imported here)."""
    named = [*env_packages(), *_packages, *extra]
    if any(_under(dotted, n) for n in named):
        return True  # named by the user: trusted even inside a DENIED prefix
    if any(_under(dotted, d) for d in DENIED):
        return False
    return any(_under(dotted, p) for p in BUILTIN_TRUSTED) or _in_trusted_folder(dotted.split(".")[0])


def importable_top(dotted: str) -> bool:
    """Whether the first name of `dotted` is an importable module (found, not imported: no code runs).

    A path whose package does not exist at all is a typo, reported as such ("no module named")
    rather than as a trust problem.
    """
    top = dotted.split(".")[0]
    try:
        return top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def untrusted_message(dotted: str, key: str, where: str = "") -> str:
    """The one-line refusal: which import, from which key, and the three ways to trust it."""
    top = dotted.split(".")[0]
    denied = next((d for d in DENIED if _under(dotted, d)), None)
    why = (
        f"{denied} can load or compile code, so it is not trusted with the rest of {denied.split('.')[0]}"
        if denied
        else f"{top!r} is not a trusted package (trusted: {', '.join(trusted_packages())})"
    )
    name = dotted if denied else top
    return (
        f"{key}: refusing to import {dotted!r}{f' ({where})' if where else ''}: {why}. A config's components "
        f"are code that ftune runs; if you trust {name}, pass --trust {name} to ftune run / ftune validate, "
        f"set {TRUST_ENV}={name}, or add `{TRUST_KEY}: [{name}]` to your config file."
    )


class UntrustedComponentError(ImportError):
    """A `_component_` outside the trusted packages (raised before anything is imported)."""


def components_of(data: object, path: str = "") -> list[tuple[str, str]]:
    """Every ``(key, dotted path)`` of a `_component_` in a plain config tree, in file order."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        if isinstance(data.get("_component_"), str):
            found.append((path or "config", data["_component_"]))
        for k, v in data.items():
            found.extend(components_of(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found.extend(components_of(v, f"{path}[{i}]"))
    return found
