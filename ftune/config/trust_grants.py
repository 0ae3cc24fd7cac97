"""Who the user trusts beyond the allowlist: ``--trust`` and ``FTUNE_TRUST`` names, and the folders
of a copied recipe or of the user's own config file (by file). A config's ``trusted_modules`` is only a
request (`trust_requests`). `ftune.config.trust` judges each `_component_` against these grants.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from ftune.config.errors import ConfigError

BUILTIN_TRUSTED = ("ftune", "torch", "torchao")
TRUST_ENV = "FTUNE_TRUST"
TRUST_KEY = "trusted_modules"

# What the user trusted in this process: package names (--trust), config and recipe folders.
_packages: set[str] = set()
_folders: set[Path] = set()
_checked_env: set[str] = set()  # $FTUNE_TRUST values already checked


def _under(dotted: str, prefix: str) -> bool:
    return dotted == prefix or dotted.startswith(prefix + ".")


def module_exists(name: str) -> bool:
    """Whether `name` is an importable package or module, found without running any of its code."""
    if not name or not all(part.isidentifier() for part in name.split(".")):
        return False
    if name in sys.modules or ("." not in name and _in_trusted_folder(name)):
        return True
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if spec is None or spec.submodule_search_locations is None:
                return False  # a plain module has no submodules
            prefix = ".".join(parts[: i + 1])
            if ".".join(parts[:i]) in sys.modules:
                spec = importlib.util.find_spec(prefix)
            else:  # search the parent's folder without importing the parent
                spec = importlib.machinery.PathFinder.find_spec(prefix, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return False
    return spec is not None


def importable_problems(names: Iterable[str], where: str) -> list[str]:
    """One problem per name in `names` that is not an importable package or module.

    Args:
        names: the package or module names as given.
        where: where they were given, e.g. ``--trust`` or ``trusted_modules (in my.yaml:3)``.
    """
    bad = [n for n in names if not module_exists(n)]
    if not bad:
        return []
    option = where.split(" ")[0]
    return [
        f"{where}: {n!r} is not an importable package or module, so it cannot be trusted. Accepted: the "
        f"dotted name of an installed package or module, such as my_pkg or my_pkg.data. Check the spelling, "
        f"install the package (python -c 'import {n.split('.')[0]}' must work), or remove {n!r} from {option}."
        for n in bad
    ]


def trust_packages(names: Iterable[str], where: str = "--trust") -> None:
    """Trust these packages or modules (dotted names) for the rest of the process.

    Raises:
        ConfigError: a name is not an importable package or module (`where` says where it was given).
    """
    names = [n.strip() for n in names if n.strip()]
    if problems := importable_problems(names, where):
        raise ConfigError(problems)
    _packages.update(names)


def trust_folder(folder: str | os.PathLike) -> None:
    """Trust the modules in `folder` (a copied recipe's or a user config's folder)."""
    _folders.add(Path(folder).resolve())


def env_packages() -> list[str]:
    """The packages named in ``$FTUNE_TRUST`` (comma-separated).

    Raises:
        ConfigError: a name is not an importable package or module (checked once per value).
    """
    value = os.environ.get(TRUST_ENV, "")
    names = [n.strip() for n in value.split(",") if n.strip()]
    if value not in _checked_env:
        if problems := importable_problems(names, f"{TRUST_ENV} (environment variable {TRUST_ENV}={value})"):
            raise ConfigError(problems)
        _checked_env.add(value)
    return names


def trusted_packages(extra: Iterable[str] = ()) -> list[str]:
    """Every trusted package name: the built-in ones, ``$FTUNE_TRUST``, ``--trust`` and `extra`."""
    return sorted({*BUILTIN_TRUSTED, *env_packages(), *_packages, *extra})


def _in_trusted_folder(top: str) -> bool:
    """Whether the module `top` that an import would load is a file in a trusted folder.

    By file, not by name: an empty ``posix.py`` beside a config does not make the built-in ``posix``
    trusted, nor a ``json.py`` there the standard library's ``json``. The spec is found without
    running any code, and a module already imported is judged by the file it came from.
    """
    if not _folders or not top.isidentifier():
        return False
    module = sys.modules.get(top)
    if module is not None:
        origin = getattr(module, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return False
        origin = spec.origin if spec is not None else None
    return isinstance(origin, str) and _file_in_folders(origin)


def _file_in_folders(origin: str) -> bool:
    try:
        path = Path(origin).resolve()
    except (OSError, RuntimeError):
        return False
    return any(path.parent == f or (path.name == "__init__.py" and path.parent.parent == f) for f in _folders)


def _named(dotted: str, extra: Iterable[str] = ()) -> bool:
    return any(_under(dotted, n) for n in [*env_packages(), *_packages, *extra])


def trust_requests(names: Iterable[str]) -> list[str]:
    """The names of a config's `trusted_modules` that the user has not trusted (``--trust``, $FTUNE_TRUST)."""
    granted = [*env_packages(), *_packages]
    return [n for n in names if not any(_under(n, g) for g in granted)]


def request_message(names: list[str], where: str) -> str:
    """The refusal of a config's request for trust, with the exact flag that grants it."""
    joined = ",".join(names)
    return (
        f"{TRUST_KEY}: {names} ({where}): a config cannot grant itself trust, so it only asks for it (a "
        f"downloaded config naming [posix] would otherwise run posix.system). If you trust {joined}, add "
        f"`--trust {joined}` to your ftune run / ftune validate command (or set {TRUST_ENV}={joined}); "
        f"otherwise remove {TRUST_KEY} from the config and the components that need it."
    )


def _from_trusted_folder(name: str) -> bool:
    """Whether the imported module `name` was loaded from a file in a trusted folder."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    return isinstance(origin, str) and _file_in_folders(origin)
