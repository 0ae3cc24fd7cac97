"""torchtune's command line and ftune's: the first table of docs/migrating-from-torchtune.md.

Pure data (no torch, no torchtune), as `ftune.torchtune.table` is for config keys and components.
"""

from __future__ import annotations

# The command line: torchtune command -> (ftune command, note).
COMMANDS: dict[str, tuple[str, str]] = {
    "tune ls": ("ftune ls", "--features adds the feature matrix"),
    "tune cp <name> <dest>": ("ftune cp <name> <dest>", "a recipe or a config"),
    "tune cat <config>": ("ftune cat <config> [key=value ...]", "prints the resolved config"),
    "tune validate <config>": (
        "ftune validate <config> [key=value ...]",
        "also checks every component's arguments",
    ),
    "tune run <recipe> --config <config>": ("ftune run <recipe> --config <config>", ""),
    "tune run --nproc_per_node N <recipe> ...": (
        "ftune run --nproc_per_node N <recipe> ...",
        "through torchrun",
    ),
    "tune download <repo> --output-dir <dir>": (
        "ftune download <repo> [--output-dir <dir>]",
        "default: $FTUNE_HOME/models",
    ),
    "": ("ftune convert torchtune-config <torchtune.yaml> -o <ftune.yaml>", "this page's converter"),
}
