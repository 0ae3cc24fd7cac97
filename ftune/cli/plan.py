"""`ftune plan [--nproc_per_node N] <recipe> [--config <name|path>] [key=value ...] [--memory 24GiB]`.

The peak memory a training run needs per rank, term by term, before anything runs: the config is
checked as `ftune validate` checks it (data files aside), the model is built on the meta device to
count its parameters, and `ftune.planning` adds up the terms. With ``--memory``, the settings that
bring the peak under that memory, each with its predicted peak.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

from ftune import registry
from ftune.cli.run import recipe_file
from ftune.cli.validate import validate
from ftune.config.errors import ConfigError
from ftune.config.loading import load_config
from ftune.config.run import report
from ftune.config.run_config import default_config
from ftune.config.trust import trust_packages
from ftune.peft import apply_lora
from ftune.planning import Plan, plan_config, shape_of, what_fits
from ftune.planning.plan import model_of
from ftune.planning.shapes import GIB

_UNITS = {
    "gib": 1.0,
    "g": 1.0,
    "gb": 1e9 / GIB,
    "mib": 1 / 1024,
    "mb": 1e6 / GIB,
    "tib": 1024.0,
    "tb": 1e12 / GIB,
}
_MEMORY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def parse_memory(text: str) -> float:
    """``"24GiB"``, ``"80 GiB"``, ``"16GB"``, ``"512MiB"`` -> GiB (a bare number is GiB).

    Raises:
        ValueError: not a positive size with one of the units.
    """
    match = _MEMORY.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in {*_UNITS, ""} or float(match.group(1)) <= 0:
        raise ValueError(
            f"--memory {text!r}: not a memory size. Give a positive number with a unit, e.g. --memory 24GiB, "
            f"--memory 80GiB or --memory 16GB (units: {', '.join(sorted(_UNITS))}; none means GiB)."
        )
    return float(match.group(1)) * _UNITS.get(unit, 1.0)


def _lora_shape(cfg) -> object:
    """The config's model with LoRA rank 16 on every projection it has (what a LoRA config trains)."""

    def build():
        model = model_of(cfg, "model", "checkpointer", torch.float32)
        names = {
            n.rsplit(".", 1)[-1] for n, m in model.layers[0].named_modules() if isinstance(m, torch.nn.Linear)
        }
        with torch.device("meta"):
            apply_lora(model, targets=[t for t in LORA_TARGETS if t in names], rank=16, alpha=32)
        return shape_of(model)

    return build


def _split(p: Plan) -> str:
    """ ", tensor parallel 2" / ", context parallel 2" when the plan has either."""
    tp, cp = p.parallelism.tp, p.parallelism.cp
    return f", tensor parallel {tp}" if tp > 1 else f", context parallel {cp}" if cp > 1 else ""


def render(p: Plan, title: str) -> list[str]:
    """The plan as lines: the model, the workload, each term and the peak."""
    s, w = p.shape, p.workload
    trains = "all" if s.trainable == s.params else f"{s.trainable / 1e6:.2f}M (adapters)"
    ranks = p.parallelism.world_size
    lines = [
        f"Memory plan for {title}, per rank ({ranks} rank{'s' if ranks > 1 else ''}"
        f"{', FSDP2' if p.parallelism.fsdp and ranks > 1 else ''}{_split(p)}, {w.device}, "
        f"{str(w.dtype).replace('torch.', '')}):",
        f"  model: {s.params / 1e6:.1f}M parameters, trainable: {trains}; {s.num_layers} layers, "
        f"dim {s.embed_dim}, vocabulary {s.vocab_size}",
        f"  step: {w.method}, {w.rows} sequences x {w.seq} tokens a micro-batch"
        + (f" (sampling: {w.rollout_rows} x {w.rollout_len} on the KV cache)" if w.method == "grpo" else ""),
    ]
    width = max(len(k) for k in p.terms)
    lines += [f"  {name.ljust(width)}  {value / GIB:7.2f} GiB" for name, value in p.terms.items()]
    lines.append(f"  {'peak'.ljust(width)}  {p.peak_gib:7.2f} GiB")
    return lines + [f"  ({note})" for note in p.notes]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune plan",
        description="Predict the peak memory per rank of a training run (weights, gradients, optimizer state, "
        "activations, the loss's blocks, a teacher or reference, GRPO's KV cache, FSDP2 sharding) without "
        "running it; with --memory, list the settings that make it fit. Builds the model on the meta device only.",
    )
    parser.add_argument("recipe", help="a shipped training recipe (see `ftune ls`) or a recipe file")
    parser.add_argument(
        "--config", help="shipped config name or .yaml path (default: the recipe's default config)"
    )
    parser.add_argument("overrides", nargs="*", help="key=value, a.b=value, ~key (as in `ftune run`)")
    parser.add_argument(
        "--nproc_per_node", type=int, default=1, help="ranks on this node (torchrun's option)"
    )
    parser.add_argument("--nnodes", type=int, default=1, help="nodes (torchrun's option)")
    parser.add_argument(
        "--memory", help="the device memory per rank, e.g. 24GiB: say whether it fits and what would"
    )
    parser.add_argument("--trust", action="append", default=[], metavar="PKG", help="as in `ftune run`")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_intermixed_args(argv)
    try:
        trust_packages(p for value in args.trust for p in value.split(","))
        memory = parse_memory(args.memory) if args.memory is not None else None
        file, shipped = recipe_file(args.recipe)
        if shipped is not None and shipped.name not in registry.TRAINING:
            raise ConfigError(
                [
                    f"ftune plan {args.recipe}: not a training recipe; the plan predicts a training step's memory. "
                    f"Training recipes: {', '.join(registry.TRAINING)}."
                ]
            )
        config = args.config or (default_config(shipped.name) if shipped is not None else None)
        if config is None:
            raise ConfigError(
                [f"ftune plan {args.recipe}: no --config given and the recipe file has no default."]
            )
        validate(config, args.overrides, str(file) if shipped is None else shipped.name, files=False)
        cfg = load_config(config, args.overrides)
        world = args.nproc_per_node * args.nnodes
        distributed = shipped.distributed if shipped is not None else world > 1
        if world > 1 and not distributed:
            raise ConfigError(
                [
                    f"--nproc_per_node {args.nproc_per_node}: {args.recipe} runs on one device. Plan its "
                    f"distributed sibling (`ftune ls`), e.g. {args.recipe.replace('single_device', 'distributed')}."
                ]
            )
        p = plan_config(cfg, file, world_size=world, fsdp=distributed)
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    launch = f"--nproc_per_node {args.nproc_per_node} " if world > 1 else ""
    print("\n".join(render(p, f"{launch}{Path(str(args.recipe)).stem} --config {config}")))
    if p.workload.device != "cpu":
        print(
            f"  (on {p.workload.device} the CUDA context and the allocator's cache come on top: "
            "a few hundred MiB, not measured here)"
        )
    if memory is None:
        return 0
    if p.peak_gib <= memory:
        print(f"Fits in {memory:.2f} GiB ({memory - p.peak_gib:.2f} GiB to spare).")
        return 0
    print(f"Does not fit in {memory:.2f} GiB. Each change alone, then together (predicted peak per rank):")
    options = what_fits(
        p,
        memory,
        batch_size=p.workload.batch_size,
        grad_accum_steps=p.workload.grad_accum_steps,
        lora_shape=_lora_shape(cfg) if cfg.node.get("peft") is None and p.shape.trainable else None,
    )
    width = max(len(o.change) for o in options)
    for o in options:
        print(f"  {o.change.ljust(width)}  {o.peak_gib:7.2f} GiB  {'fits' if o.fits else 'too big'}")
    return 0 if any(o.fits for o in options) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
