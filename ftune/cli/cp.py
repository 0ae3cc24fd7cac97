"""`ftune cp <recipe|config> <dest>`: copy a shipped recipe or config to edit it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ftune import registry
from ftune.config.errors import did_you_mean
from ftune.config.output_path import OutputPathError, output_file, replace_file
from ftune.config.run_config import default_config


def source_for(name: str) -> Path:
    """The file a recipe or config name refers to."""
    if name in registry.RECIPES:
        return registry.RECIPES[name].file
    path = registry.config_path(name)
    if path is not None:
        return path
    choices = [*registry.RECIPES, *registry.all_config_names()]
    raise ValueError(
        f"ftune cp: {name!r} is neither a recipe nor a shipped config.{did_you_mean(name, choices)} "
        "Run `ftune ls` to list them."
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune cp",
        description="Copy a recipe or config. A copied recipe runs with `ftune run ./my_recipe.py --config ...`.",
    )
    parser.add_argument(
        "name", help="recipe name (e.g. lora_finetune_single_device) or config (e.g. smollm2/135M_lora)"
    )
    parser.add_argument("dest", help="destination file, or folder (an existing one, or one ending in '/')")
    overwrite = parser.add_mutually_exclusive_group()
    overwrite.add_argument(
        "--force", action="store_true", help="overwrite an existing file (without it, ftune cp refuses)"
    )
    overwrite.add_argument(
        "--no-clobber", action="store_true", help="leave an existing file unchanged and succeed"
    )
    parser.add_argument("--make-parents", action="store_true", help="create missing parent folders")
    args = parser.parse_args(argv)
    try:
        src = source_for(args.name)
    except ValueError as e:
        print(f"ftune: error: {e}", file=sys.stderr)
        return 1
    try:  # the rule `ftune export` shares (ftune.config.output_path)
        dest = output_file(
            args.dest,
            option="dest",
            force=args.force or args.no_clobber,
            make_parents=args.make_parents,
            into=src.name,
            inputs={f"the shipped {src.name} itself": src},
        )
    except (OutputPathError, FileExistsError) as e:
        # As cp -i / uv init do: the user's edits are never lost silently.
        print(f"ftune: error: {e}", file=sys.stderr)
        return 1
    if dest.exists() and args.no_clobber:
        print(f"ftune cp: {dest} exists; left unchanged (--no-clobber).", file=sys.stderr)
        return 0
    replace_file(src, dest)
    print(f"Copied {src.name} to {dest}")
    if (config := default_config(args.name)) is not None:  # a copy has no default config: name it
        launch = "--nproc_per_node 2 " if registry.RECIPES[args.name].distributed else ""
        print(f"Run it with: ftune run {launch}{dest} --config {config}")
    return 0
