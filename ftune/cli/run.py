"""`ftune run [torchrun options] <recipe|path.py> [--config <name|path>] [key=value ...]`.

Without torchrun options the recipe runs in this process. With any (``--nproc_per_node``,
``--nnodes``, ``--node_rank``, ``--rdzv_endpoint``, ...) it launches through
``torch.distributed.run``, the real torchrun, so multi-node works exactly as it does there.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from ftune import registry
from ftune.cli.fast_check import fast_check
from ftune.cli.preflight import check_distributed_config, check_launcher_options, check_mesh
from ftune.config.errors import ConfigError, did_you_mean
from ftune.config.launch_checked import launch_stamp
from ftune.config.model_source import missing_checkpoint_dirs
from ftune.config.recipe_kind import resume_folder
from ftune.config.run import report, run
from ftune.config.run_config import load_run_config, shipped_recipe
from ftune.config.trust import TRUST_ENV, env_packages, importable_problems
from ftune.rewards.reward_set import builtin_reward_problems

# torchrun options that take no value; every other `--option` before the recipe takes one.
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}

USAGE = """usage: ftune run [torchrun options] [--trust PKG] <recipe|path.py> [--config <name|path>] [key=value ...]

Runs a recipe. Without torchrun options it runs in this process; with any of them
(--nproc_per_node N, --nnodes, --node_rank, --rdzv_endpoint, --rdzv_backend, --master_port, ...)
it launches through torch.distributed.run (torchrun). --trust PKG (repeatable) lets the
config's _component_ paths import from PKG (see "What a config can run" in docs/config.md).

examples:
  ftune run lora_finetune_single_device --config smollm2/135M_lora max_steps=10
  ftune run --nproc_per_node 2 qat_distributed
  ftune run ./my_recipe.py --config smollm2/135M_lora batch_size=8
"""


def split_args(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Split into (torchrun options, recipe, recipe arguments)."""
    launcher: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        arg = argv[i]
        if not arg.startswith("-"):
            return launcher, arg, argv[i + 1 :]
        launcher.append(arg)
        if "=" not in arg and arg not in _TORCHRUN_FLAGS and i + 1 < len(argv):
            launcher.append(argv[i + 1])
            next(it)
    return launcher, None, []


def recipe_file(name: str) -> tuple[Path, registry.Recipe | None]:
    """Resolve a recipe name or a path to a recipe file."""
    if name in registry.RECIPES:
        return registry.RECIPES[name].file, registry.RECIPES[name]
    path = Path(name)
    if path.suffix == ".py":
        if not path.is_file():
            raise ConfigError([f"recipe file {name!r} does not exist."])
        return path, shipped_recipe(path)
    raise ConfigError(
        [
            f"recipe {name!r}: no such recipe.{did_you_mean(name, registry.RECIPES)} "
            f"Recipes: {', '.join(registry.RECIPES)}; or give a path to a .py recipe file."
        ]
    )


def take_trust(argv: list[str]) -> tuple[list[str], list[str]]:
    """Remove every ``--trust PKG`` / ``--trust=PKG`` from `argv`; return (the rest, the packages)."""
    rest: list[str] = []
    packages: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--trust":
            value = next(it, None)
            if value is None or value.startswith("-"):
                raise ConfigError(["--trust needs a value: a package or module name, e.g. --trust my_pkg."])
            packages.extend(value.split(","))
        elif arg.startswith("--trust="):
            packages.extend(arg.split("=", 1)[1].split(","))
        else:
            rest.append(arg)
    return rest, packages


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    debug = ["--debug"] if "--debug" in argv else []
    try:
        argv, trusted = take_trust(argv)
        if bad := importable_problems(trusted, "--trust"):
            raise ConfigError(bad)
        if trusted:  # through the environment, so torchrun's ranks trust them too
            os.environ[TRUST_ENV] = ",".join([*env_packages(), *trusted])
        launcher, name, recipe_args = split_args(argv)
        if name is None:
            raise ConfigError(["ftune run: no recipe given. " + USAGE.splitlines()[0]])
        path, recipe = recipe_file(name)
        if launcher and recipe is not None and not recipe.distributed:
            siblings = [
                r.name
                for r in registry.RECIPES.values()
                if r.distributed and set(r.methods) & set(recipe.methods)
            ]
            hint = f" Use {siblings[0]} for a multi-process launch." if siblings else ""
            raise ConfigError(
                [
                    f"recipe {recipe.name} runs on one device and cannot be launched with {' '.join(launcher)}.{hint}"
                ]
            )
        if launcher:
            check_launcher_options(launcher)
        cfg = None
        if not {"-h", "--help"} & set(recipe_args):
            # The one read of the YAML before any rank starts (None: no config, and the recipe has no default).
            cfg = load_run_config(path, recipe_args)
        if cfg is not None:
            if launcher:
                check_distributed_config(cfg, path)
                check_mesh(cfg, launcher)
            # keys, types, ranges, trust, a GRPO config's built-in rewards, files, folders: before torch
            fast_check(cfg, path, more=builtin_reward_problems)
            if missing := missing_checkpoint_dirs(cfg, resume_folder):
                raise ConfigError(missing, cfg.source)  # a stat, not the checkpointer's load after torch
        if launcher and cfg is not None:
            _check_sharded_optimizer(cfg)  # before torchrun starts any rank
    except Exception as e:  # noqa: BLE001
        return report(e, debug)
    if launcher:
        # Each rank loads the config to build its run; the stamp tells it what the launcher checked.
        return _torchrun(launcher, path, recipe_args, launch_stamp(cfg) if cfg is not None else {})
    sys.argv = [str(path), *recipe_args]
    sys.path.insert(0, str(path.parent))
    if cfg is None:  # --help, or no config found: the recipe's own entry point parses the command line
        runpy.run_path(str(path), run_name="__main__")
        return 0
    # The config loaded above is handed to the recipe's main: loaded and checked once. The recipe
    # runs as a module of its own name (its `if __name__ == "__main__"` line does not fire).
    recipe = runpy.run_path(str(path), run_name=f"ftune_recipe_{path.stem}")
    run(recipe["main"], recipe_args, cfg=cfg, recipe_file=path)
    return 0


def _check_sharded_optimizer(cfg) -> None:
    """Refuse an optimizer whose step FSDP2's sharded parameters cannot run (ftune.training.step.optimizer)."""
    from ftune.training.step.optimizer import sharded_step_problems  # imports torch: only for a launch

    node = cfg.node.get("optimizer") if "optimizer" in cfg else None
    if node is not None and hasattr(node, "get") and node.get("_component_"):
        if problems := sharded_step_problems(node, cfg.where):
            raise ConfigError(problems, cfg.source)


def _torchrun(launcher: list[str], path: Path, recipe_args: list[str], stamp: dict[str, str]) -> int:
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    try:
        args = get_args_parser().parse_args([*launcher, str(path), *recipe_args])
    except SystemExit as e:
        print(
            f"ftune: error: bad torchrun options {' '.join(launcher)!r} (see `torchrun --help`).",
            file=sys.stderr,
        )
        return int(e.code or 2)
    launcher_env = dict(os.environ)
    try:
        os.environ.update(stamp)  # the ranks inherit it (ftune.config.launch_checked); restored below
        run(args)
    except DistNetworkError as e:
        reason = str(e).strip().splitlines()[-1]
        hint = (
            " Another process holds that port: pass a free --master_port (or --rdzv_endpoint host:port), "
            "or --standalone to let torchrun pick one."
            if "EADDRINUSE" in reason or "address already in use" in reason
            else " Check --master_addr/--rdzv_endpoint and that every node can reach it."
        )
        print(
            f"ftune: error: the distributed launch of {path.name} could not start: {reason}.{hint}",
            file=sys.stderr,
        )
        return 1
    except ChildFailedError as e:
        failures = "; ".join(
            f"rank {rank} exited with code {f.exitcode}" for rank, f in sorted(e.failures.items())
        )
        print(
            f"ftune: error: distributed run of {path.name} failed: {failures}. "
            "The rank's own error is printed above.",
            file=sys.stderr,
        )
        return 1
    finally:
        # torchrun sets OMP_NUM_THREADS=1 (and more) in the launching process's own environment: a caller
        # of `ftune run` in-process (a notebook, a test session) gets its environment back, so a later run
        # there (a resume, which honours OMP_NUM_THREADS) does not see a setting nobody made (issue 46).
        os.environ.clear()
        os.environ.update(launcher_env)
    return 0
