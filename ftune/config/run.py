"""The entry point every recipe ends with: ``if __name__ == "__main__": config.run(main)``.

Parses ``--config <name|path>`` and ``key=value`` overrides from the command line, loads and
checks the config, calls ``main(cfg)``, and turns user errors into a message without a
traceback (``--debug`` or ``FTUNE_DEBUG=1`` shows it).
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftune.config.errors import ConfigError
from ftune.config.launch_checked import launcher_checked
from ftune.config.loading import Config
from ftune.config.recipe_file import settings_of
from ftune.config.run_config import default_config, load_run_config, shipped_recipe
from ftune.config.settings import describe
from ftune.config.trust import trust_folder

# Exceptions whose message is the whole story for a user: printed without a traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, ValueError, KeyError, OSError, ImportError)


def debug_enabled(argv: list[str] | None = None) -> bool:
    """True when tracebacks were asked for (``--debug`` or ``FTUNE_DEBUG=1``)."""
    return os.environ.get("FTUNE_DEBUG", "") not in ("", "0") or "--debug" in (argv or [])


def is_user_error(exc: BaseException) -> bool:
    """Whether `exc` is a user-facing error (see USER_ERRORS, or flagged with ``user_facing = True``)."""
    return isinstance(exc, USER_ERRORS) or getattr(exc, "user_facing", False)


# What an OS error on a path means for a run, and the fix (the OS says only "[Errno 20] Not a directory").
_OS_FIXES = {
    errno.ENOTDIR: "a part of this path is a file, not a folder: point output_dir (or the key that holds this "
    "path) at a folder, or move the file away",
    errno.EEXIST: "a file is in the way of a folder ftune needs: point output_dir elsewhere or move the file",
    errno.EACCES: "no permission to write there: choose a writable folder (e.g. output_dir=./output) or fix "
    "the folder's permissions",
    errno.EROFS: "the file system is read-only: choose a writable folder (e.g. output_dir=./output)",
    errno.ENOSPC: "the disk is full: free space or point output_dir at another disk; step folders already "
    "complete are intact",
}


def format_error(exc: BaseException) -> str:
    """The one message a user sees for `exc`."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, OSError) and exc.errno in _OS_FIXES and exc.filename:
        text = f"{exc.filename}: {exc.strerror}; {_OS_FIXES[exc.errno]}."
    name = "ConfigError" if isinstance(exc, ConfigError) else type(exc).__name__
    return f"ftune: error: {name}: {text}"


def report(exc: BaseException, argv: list[str] | None = None) -> int:
    """Print `exc` for a user (traceback only when debugging or for internal errors); return the exit code."""
    distributed = sys.modules.get("ftune.runtime.distributed")  # loaded: a process group may have failed
    if distributed is not None:
        exc = distributed.explain_collective_failure(exc) or exc
    if debug_enabled(argv) or not is_user_error(exc):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        if not is_user_error(exc):
            return 1
    if os.environ.get("RANK", "0") == "0" or not isinstance(exc, ConfigError):
        print(format_error(exc), file=sys.stderr)
        if not debug_enabled(argv):
            print("(run with --debug or FTUNE_DEBUG=1 to see the traceback)", file=sys.stderr)
    return 1


def recipe_help(module: Any) -> str:
    """`<recipe> --help`: usage, what the recipe does, and every setting of its SETTINGS with default and help."""
    recipe_file = getattr(module, "__file__", None)
    name = Path(recipe_file).stem if recipe_file else "recipe"
    lines = [f"usage: ftune run {name} [--config <name|path>] [key=value ...] [--debug]"]
    cls = settings_of(module)
    recipe = shipped_recipe(recipe_file)
    if recipe is not None:
        lines += ["", recipe.description, "", f"default config: {default_config(recipe_file)}"]
    else:
        summary = (module.__doc__ or "").strip().splitlines()
        lines += ["", summary[0] if summary else f"a recipe file ({recipe_file})"]
    lines += ["", "settings:"]
    rows = describe(cls)
    width = max(len(f"{k}: {t}") for k, t, _, _ in rows)
    lines += [f"  {f'{k}: {t}'.ljust(width)}  default {d!r}. {h}" for k, t, d, h in rows]
    sections = ", ".join(f"{k}{'' if req else ' (optional)'}" for k, req in cls.COMPONENTS.items())
    lines += ["", f"sections (_component_): {sections}"]
    return "\n".join(lines)


def run(
    main: Callable[[Config], Any],
    argv: list[str] | None = None,
    *,
    cfg: Config | None = None,
    recipe_file: str | Path | None = None,
) -> None:
    """Load the config named on the command line and call ``main(cfg)``; exit 1 on a user error.

    Args:
        main: the recipe's ``main``.
        argv: the recipe's command line (default: ``sys.argv[1:]``).
        cfg: a config already loaded and checked (``ftune run`` loads it once, before torch is
            imported, and hands it on); the command line is then not parsed again.
        recipe_file: the recipe's file (default: the file of ``main``'s module).
    """
    argv = sys.argv[1:] if argv is None else argv
    module = sys.modules.get(main.__module__)
    if "-h" in argv or "--help" in argv:
        try:
            print(recipe_help(module))
        except ConfigError as e:
            sys.exit(report(e, argv))
        return
    try:
        recipe_file = recipe_file or getattr(module, "__file__", None)
        if recipe_file:
            trust_folder(Path(recipe_file).parent)  # modules next to a (copied) recipe
        if cfg is None:  # run as a script, or a rank of `ftune run --nproc_per_node`
            cfg = load_run_config(recipe_file, argv)
            if cfg is None:
                raise ConfigError(["no config given: pass --config <name|path> (see `ftune ls`)."])
            settings = vars(module).get("SETTINGS") if module is not None else None
            if isinstance(settings, type):
                if launcher_checked(cfg, settings):  # keys, types, ranges: checked once, by the launcher
                    cfg.values_checked.add(settings)
                cfg.declare(settings)  # before main reads anything (main checks it first)
        main(cfg)
    except KeyboardInterrupt:
        print("ftune: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - every error goes through report()
        sys.exit(report(e, argv))
