"""`ftune validate <config|path> [key=value ...]`: every config check, without running anything."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ftune import registry
from ftune.cli.fast_check import check_data_files, fast_problems
from ftune.config.checks import check_component
from ftune.config.errors import ConfigError, did_you_mean
from ftune.config.loading import Config, load_config, resolve_config_path
from ftune.config.model_source import (
    CHECKPOINT_MODEL,
    HF_CONFIG_FILE,
    check_model_source,
    checkpoint_dir_of,
    sized_by_checkpoint,
)
from ftune.config.recipe_file import recipe_in_header, recipe_settings
from ftune.config.recipe_kind import check_resume_folder
from ftune.config.run import report
from ftune.config.run_config import default_config, shipped_recipe
from ftune.config.settings import collect_problems
from ftune.config.trust import components_of, trust_folder, trust_packages
from ftune.rewards.reward_set import builtin_reward_problems

NO_RECIPE = (
    "(checked without a recipe's settings: no --recipe, no `# Run: ftune run <recipe> ...` line at the top "
    "of the file, and no shipped recipe matches its name; keys a recipe passes at run time look unset. "
    "Name the recipe: `ftune validate <config> --recipe <recipe>`, `ftune ls` lists them.)"
)


def validate(config: str, overrides: list[str], recipe_name: str | None = None, *, files: bool = True) -> str:
    """Check a config against its recipe's settings and every component's signature.

    The settings' problems (keys, types, ranges, sections, trusted components) are found without
    importing torch and, if there are any, reported alone; otherwise every component is imported
    and its arguments checked against its signature.

    With `files` (as ``ftune validate`` runs), the local data files the config names and the folder
    it resumes from are read too; the docs' tests validate documented commands without them (the
    files a command names there are the reader's own).

    Returns:
        The name of the recipe whose settings were used, or "" when only components were checked.

    Raises:
        ConfigError: listing every problem.
    """
    cfg, file = _load(config, overrides, recipe_name)
    return check(cfg, file, files=files)


def _load(config: str, overrides: list[str], recipe_name: str | None) -> tuple[Config, Path | None]:
    """The config (read once) and the recipe file whose settings it is checked against."""
    if recipe_name is not None and recipe_name.endswith(".py"):
        trust_folder(Path(recipe_name).parent)  # modules next to a copied recipe
    return load_config(config, overrides), recipe_file(config, recipe_name)


def _is_override(word: str) -> bool:
    return "=" in word or word.startswith("~")  # `key=value`, `~key`: never a config's name


def check(cfg: Config, file: Path | None, *, files: bool = True) -> str:
    """`validate` on a loaded config and its recipe file (None: components only)."""
    if file is None:
        # top-level keys as paths ("dataset.source"), so each problem names the override that fixes it
        problems = [p for key, value in cfg.to_dict().items() for p in check_component(value, key)]
    else:
        # Keys, types, ranges and sections first, without torch: the common mistakes answer at once.
        fast = fast_problems(cfg, file)
        fast = builtin_reward_problems(cfg) if fast == [] else fast  # built-in rewards: plain Python
        problems = fast or collect_problems(cfg, recipe_settings(file))
    if problems and file is None:
        problems.append(NO_RECIPE)
    shipped = shipped_recipe(file)
    if not problems and shipped is not None and shipped.distributed and "optimizer" in cfg:
        # imported here: the checks above answer without torch (ftune.training imports it)
        from ftune.training.step.optimizer import sharded_step_problems

        problems = sharded_step_problems(cfg.node.optimizer, cfg.where)  # what FSDP2 cannot step
    if problems:
        raise ConfigError(problems, cfg.source)
    if "peft" in cfg.node:  # every LoRA target names a module of the model, built on the meta device
        from ftune.cli.lora_targets import lora_target_problems  # imports torch: only a LoRA config needs it

        if problems := lora_target_problems(cfg):
            raise ConfigError(problems, cfg.source)
    if file is not None and files:  # what ftune run checks before the model loads: data, resume folder
        check_data_files(cfg)
        check_resume_folder(cfg, file)
        check_model_source(cfg, recipe_settings(file))
    return file.stem if file else ""


def sized_calls(cfg: Config, file: Path | None) -> list[tuple[str, str]]:
    """(section, what builds it) for each section `cfg` leaves to its checkpoint's config.json."""
    calls = []
    for section, ckpt in (sized_by_checkpoint(cfg.node, recipe_settings(file)) if file else {}).items():
        config_json = Path(str(checkpoint_dir_of(cfg.node, ckpt))) / HF_CONFIG_FILE
        said = ""
        try:  # the architecture it names; an unreadable one is the checkpointer's to report
            stated = json.loads(config_json.read_text())
            said = f": {', '.join(stated.get('architectures') or [str(stated.get('model_type'))])}"
        except (OSError, ValueError, AttributeError, TypeError):
            pass
        calls.append((section, f"{CHECKPOINT_MODEL} (sized by {str(config_json)!r}{said})"))
    return calls


def recipe_file(config: str, recipe_name: str | None) -> Path | None:
    """The recipe file whose settings a config is checked against: ``--recipe`` (a shipped name or a
    .py file), else the recipe the file's header names (``# Run: ftune run <recipe> --config ...``, as
    `ftune convert` writes), else the shipped recipe of the config's method; None when none does."""
    if recipe_name is not None and recipe_name.endswith(".py"):
        return Path(recipe_name)  # a copied recipe: checked against its own SETTINGS
    elif recipe_name is not None:
        recipe = registry.RECIPES.get(recipe_name)
        if recipe is None:
            raise ConfigError(
                [
                    f"--recipe {recipe_name!r}: no such recipe.{did_you_mean(recipe_name, registry.RECIPES)} "
                    "Give a shipped recipe's name or the path of a recipe file (.py)."
                ]
            )
        return recipe.file
    if (named := recipe_in_header(resolve_config_path(config))) is not None:
        return registry.RECIPES[named].file
    recipe = registry.recipe_for_config(config)
    return recipe.file if recipe else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune validate",
        description="Check a config: keys and types of the recipe's settings, and that every _component_ "
        "imports and its arguments fit the target's signature (recursively). Builds nothing. Problems with "
        "the settings are reported first, before torch is imported; the components are checked once there "
        "are none.",
    )
    parser.add_argument(
        "config",
        nargs="?",
        help="shipped config name (see `ftune ls`) or path to a .yaml file (default with --recipe: the "
        "config `ftune run <recipe>` reads)",
    )
    parser.add_argument(
        "--config", dest="config_option", metavar="CONFIG", help="the same, as in `ftune run`"
    )
    parser.add_argument("overrides", nargs="*", help="key=value, a.b=value, ~key")
    parser.add_argument(
        "--recipe",
        help="check against this recipe's settings: a shipped recipe's name or a recipe file such as "
        "./my_recipe.py (default: the shipped recipe of the config's method)",
    )
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PKG",
        help="also trust this package for _component_ paths (repeatable; see docs/config.md)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_intermixed_args(argv)  # options may follow the overrides
    if args.config_option is not None:  # `--config X a=1`: the first word was an override
        args.overrides[:0] = [args.config] if args.config is not None else []
        args.config = args.config_option
    elif args.recipe is not None and (args.config is None or _is_override(args.config)):
        # `ftune validate --recipe R [a=1]`: the config `ftune run R` reads (a copy has none)
        args.overrides[:0] = [args.config] if args.config is not None else []
        args.config = default_config(args.recipe)
    if args.config is None:
        parser.error("no config given: `ftune validate <config>` or `ftune validate --config <config>`")
    try:
        trust_packages(p for value in args.trust for p in value.split(","))
        cfg, file = _load(args.config, args.overrides, args.recipe)
        recipe = check(cfg, file)
        calls = [*sized_calls(cfg, file), *components_of(cfg.to_dict())]
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    against = f" against {recipe}'s settings" if recipe else " (components only: no recipe matches its name)"
    print(f"Config {args.config} is valid{against}.", file=sys.stdout)
    print("It will call:")
    width = max((len(key) for key, _ in calls), default=0)
    for key, dotted in calls:
        print(f"  {key.ljust(width)}  {dotted}")
    return 0
