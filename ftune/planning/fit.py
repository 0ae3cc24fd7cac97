"""Which settings make a run fit a memory: each change planned on its own, then the cheapest together.

Changes are tried in the order they cost least (a little time before any change to what is learnt):
activation checkpointing, smaller micro-batches with more accumulation (the same step), bf16
optimizer state, LoRA instead of the full model, more ranks (FSDP2 shards weights, gradients and
optimizer state), and last a shorter sequence (which changes the data the model sees).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ftune.planning.plan import Parallelism, Plan, plan
from ftune.planning.shapes import ModelShape

ADAMW = ("torch.optim.AdamW", "torch.optim.Adam")
WORLD_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class Option:
    """A change of settings and the peak it gives.

    Attributes:
        change: what to change, as `ftune run` overrides or options.
        peak_gib: the predicted peak per rank with it.
        fits: the peak is under the memory asked for.
    """

    change: str
    peak_gib: float
    fits: bool


def what_fits(
    p: Plan,
    memory_gib: float,
    *,
    batch_size: int,
    grad_accum_steps: int = 1,
    lora_shape: Callable[[], ModelShape] | None = None,
) -> list[Option]:
    """The changes that bring plan `p` under `memory_gib`, each alone, then the first ones together.

    Args:
        p: the config's plan.
        memory_gib: the device memory per rank, GiB.
        batch_size, grad_accum_steps: the config's (a halved micro-batch doubles the accumulation).
        lora_shape: builds the model with LoRA adapters (None: the config already trains adapters).

    Returns:
        Every option tried, in the order above, with its peak; the last is the cumulative change
        (the options that help, applied in order until the peak fits).
    """
    w = p.workload
    tries: list[tuple[str, str, Callable[[Plan], Plan]]] = []  # (kind, change, replan)
    if not w.activation_checkpointing:
        tries.append(
            ("ac", "activation_checkpointing=true", lambda q: _replan(q, activation_checkpointing=True))
        )
    b, g = batch_size, grad_accum_steps
    while b >= 2:
        b, g = b // 2, g * 2
        change = f"batch_size={b} grad_accum_steps={g}"
        tries.append(("batch", change, lambda q, b=b: _rows(q, b, batch_size)))
    if w.optimizer in ADAMW and p.shape.trainable:
        tries.append(
            ("optimizer", "optimizer._component_=ftune.training.AdamWBf16State ~optimizer.fused",
             lambda q: _replan(q, optimizer="ftune.training.AdamWBf16State")),
        )  # fmt: skip
    if lora_shape is not None:
        change = "the LoRA recipe and config (peft: rank 16 on every projection)"
        tries.append(("lora", change, lambda q: _with(q, lora_shape())))
    for n in WORLD_SIZES:
        if n > p.parallelism.world_size:
            tries.append(
                ("ranks", f"ftune run --nproc_per_node {n} (the distributed recipe: FSDP2 over {n} ranks)",
                 lambda q, n=n: plan(q.shape, q.workload, Parallelism(world_size=n, fsdp=True), teacher=q.teacher)),
            )  # fmt: skip
    if w.method != "grpo" and w.seq >= 256:
        change = f"tokenizer.max_seq_len={w.seq // 2} (shorter samples: changes the data)"
        tries.append(("seq", change, lambda q: _replan(q, seq=w.seq // 2)))
    options, chosen = [], {}  # kind -> (change, replan): the cumulative change, one of each kind
    for kind, change, replan in tries:
        alone = replan(p)
        options.append(Option(change, round(alone.peak_gib, 2), alone.peak_gib <= memory_gib))
        if alone.peak_gib < p.peak_gib and _fold(p, chosen.values()).peak_gib > memory_gib:
            chosen[kind] = (change, replan)  # a smaller batch replaces a larger one
    if len(chosen) > 1:
        together = _fold(p, chosen.values())
        change = " + ".join(c for c, _ in chosen.values())
        options.append(Option(change, round(together.peak_gib, 2), together.peak_gib <= memory_gib))
    return options


def _fold(p: Plan, steps) -> Plan:
    for _, replan in steps:
        p = replan(p)
    return p


def _replan(p: Plan, **changes) -> Plan:
    return plan(p.shape, dataclasses.replace(p.workload, **changes), p.parallelism, teacher=p.teacher)


def _rows(p: Plan, batch: int, original: int) -> Plan:
    w = p.workload
    work = dataclasses.replace(
        w, rows=w.rows // original * batch, rollout_rows=w.rollout_rows // original * batch
    )
    return plan(p.shape, work, p.parallelism, teacher=p.teacher)


def _with(p: Plan, shape: ModelShape) -> Plan:
    return plan(
        shape, dataclasses.replace(p.workload, reference_copy=False), p.parallelism, teacher=p.teacher
    )
