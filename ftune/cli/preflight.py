"""Checks `ftune run` makes before torchrun starts any rank: a launch that cannot work fails in the launcher.

Torch is not imported here: a bad `--nproc_per_node` or a QLoRA config on a distributed recipe that
does not run QLoRA is refused in well under a second, instead of after every rank has started (and buried in each rank's log).
"""

from __future__ import annotations

from pathlib import Path

from ftune import registry
from ftune.config.errors import ConfigError
from ftune.config.loading import Config
from ftune.config.run_config import shipped_recipe
from ftune.registry.states import NA, YES, reason, state
from ftune.settings.dist import mesh_problems

# torchrun's own spellings of --nproc_per_node that are not a number.
_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


def check_launcher_options(launcher: list[str]) -> None:
    """Refuse torchrun options ftune can check without torch: `--nproc_per_node` / `--nproc-per-node`.

    Raises:
        ConfigError: a process count that is not a positive integer (or one of torchrun's words).
    """
    for i, arg in enumerate(launcher):
        name, eq, value = arg.partition("=")
        if name not in ("--nproc_per_node", "--nproc-per-node"):
            continue
        if not eq:
            value = launcher[i + 1] if i + 1 < len(launcher) else ""
        if value in _NPROC_WORDS or (value.isdigit() and int(value) >= 1):
            continue
        raise ConfigError(
            [
                f"{name} {value!r}: the number of processes per node must be an integer >= 1 (or one of "
                f"{', '.join(_NPROC_WORDS)}). Fix it, e.g. `ftune run {name} 2 <recipe>`."
            ]
        )


def check_distributed_config(cfg: Config, recipe: Path) -> None:
    """Refuse the config of a distributed launch when no rank could run it: QLoRA with a recipe whose
    registry entry says QLoRA does not apply to it (e.g. lora_dpo_distributed; lora_finetune_distributed
    shards NF4 bases and runs it).

    Args:
        cfg: the config the launch reads, loaded once by `ftune run`.
        recipe: the recipe file.

    Raises:
        ConfigError: `peft.quantize_base` true with such a recipe, or tensor_parallel_dim /
            context_parallel_dim above 1 with a recipe that does not split (its cell is not YES).
    """
    _check_split(cfg, recipe)
    peft = cfg.node.get("peft") if "peft" in cfg else None
    if peft is None or not hasattr(peft, "get") or peft.get("quantize_base") is not True:
        return
    shipped = shipped_recipe(recipe)
    cell = shipped.features.get("qlora", "") if shipped is not None else ""
    if state(cell) != NA:
        return  # QLoRA runs (or a copied recipe: shard_model says what cannot shard)
    supported = [
        r.name for r in registry.TRAINING.values() if r.distributed and r.features.get("qlora") == YES
    ]
    raise ConfigError(
        [
            f"peft.quantize_base: true ({cfg.where('peft.quantize_base')}) is QLoRA, and {shipped.name} does "
            f"not run it: {reason(cell)}. Set peft.quantize_base=false for LoRA, or run QLoRA with "
            f"{' or '.join(supported)} (`ftune run --nproc_per_node N {supported[0]} --config ...`)."
        ],
        cfg.source,
    )


def check_mesh(cfg: Config, launcher: list[str]) -> None:
    """Refuse tensor_parallel_dim x context_parallel_dim that does not divide the launch's world size
    (`--nproc_per_node` x `--nnodes`, when both are numbers), before any rank starts."""
    dims = [
        cfg.node.get(key, 1) if key in cfg else 1 for key in ("tensor_parallel_dim", "context_parallel_dim")
    ]
    world = 1
    for names in (("--nproc_per_node", "--nproc-per-node"), ("--nnodes",)):
        value = _option(launcher, names) or "1"
        if not value.isdigit():
            return  # auto, gpu, a range of nodes: the ranks check it (ftune.runtime.mesh)
        world *= int(value)
    if all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        if problems := mesh_problems(world, tensor_parallel_dim=dims[0], context_parallel_dim=dims[1]):
            raise ConfigError(problems, cfg.source)


def _option(launcher: list[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(launcher):
        name, eq, value = arg.partition("=")
        if name in names:
            return value if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
    return None


def _check_split(cfg: Config, recipe: Path) -> None:
    """Refuse tensor_parallel_dim / context_parallel_dim > 1 with a shipped recipe that would ignore it."""
    shipped = shipped_recipe(recipe)
    for key, feature in (
        ("tensor_parallel_dim", "tensor_parallel"),
        ("context_parallel_dim", "context_parallel"),
    ):
        value = cfg.node.get(key) if key in cfg else None
        cell = shipped.features.get(feature, "") if shipped is not None else YES
        if value in (None, 1) or not isinstance(value, int):
            continue
        if cell == YES and feature == "tensor_parallel" and cfg.node.get("peft") is not None:
            raise ConfigError(  # a reward model's or a student's LoRA: the recipe splits full weights only
                [
                    f"{key}: {value} ({cfg.where(key)}) with a peft section ({cfg.where('peft')}): tensor "
                    "parallel splits plain nn.Linear projections, and a LoRA layer reads its whole base "
                    f"weight. Set {key}=1 (context_parallel_dim splits long sequences with LoRA), or train "
                    "every weight (remove the peft section: ~peft)."
                ],
                cfg.source,
            )
        if cell == YES:
            continue
        supported = [r.name for r in registry.TRAINING.values() if r.features.get(feature) == YES]
        raise ConfigError(
            [
                f"{key}: {value} ({cfg.where(key)}) asks for {feature.replace('_', ' ')}, and {shipped.name} "
                f"does not run it: {reason(cell) or 'no cell'}. Set {key}=1, or run it with "
                f"{' or '.join(supported)} (`ftune run --nproc_per_node N {supported[0]} --config ...`)."
            ],
            cfg.source,
        )
