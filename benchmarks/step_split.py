"""Where a training step's wall time goes, by module, without the profiler's per-operator cost.

torch.profiler records every operator, and on this workload that inflates the profiled step
(many short elementwise kernels) unevenly: short kernels look several times slower than they
run. This split times one unprofiled step with module hooks instead: the wall time of each
decoder sub-module's forward and backward (a few hundred hook calls a step), summed over the
layers; the hooks add some time of their own (docs/benchmarks.md prints the timed, hooked and
profiled step side by side). What the hooks cannot see is derived by subtraction:

- `attention core`: the attention module less its q/k/v/o projections (RoPE, SDPA, blocking);
- `mlp rest`: the MLP less the projections whose hooks fire (SwiGLU's product and its backward;
  a trained down projection runs inside SwiGLU's own autograd function, so it is in here too);
- `glue`: each layer less its norms, attention and MLP (the residual sums);
- `head + loss`: the forward outside the decoder layers (embedding, final norm, the chunked LM
  head and cross-entropy, whose gradients are made in the forward pass);
- `backward rest`: the backward outside the decoder layers (the head's saved gradients, the
  embedding's gradient);
- `optimizer`: clipping, the optimizer step and zeroing the gradients.

Used by step_profile.py (its `split_s`); the hooks are removed after the step.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import torch

PROJECTIONS = {"attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
TIMED = ("attn_norm", "attn", "mlp_norm", "mlp", *PROJECTIONS["attn"], *PROJECTIONS["mlp"])


def _hook_layers(model: torch.nn.Module, totals: dict) -> list:
    """Add forward and backward timing hooks to each layer's sub-modules; returns their handles."""
    handles, started = [], {}

    def begin(key: tuple) -> Callable:
        return lambda *_: started.__setitem__(key, time.perf_counter())

    def end(key: tuple, name: str) -> Callable:
        def hook(*_) -> None:
            totals[name] += time.perf_counter() - started.pop(key)

        return hook

    for i, layer in enumerate(model.layers):
        fwd, bwd = ("f", i), ("b", i)
        handles += [
            layer.register_forward_pre_hook(begin(fwd)),
            layer.register_forward_hook(end(fwd, "forward layer")),
            layer.register_full_backward_pre_hook(begin(bwd)),
            layer.register_full_backward_hook(end(bwd, "backward layer")),
        ]
        for path, module in layer.named_modules():
            name = path.split(".")[-1]
            if name not in TIMED or "lora" in path or path.count(".") > 1:
                continue
            fwd, bwd = ("f", i, path), ("b", i, path)
            handles += [
                module.register_forward_pre_hook(begin(fwd)),
                module.register_forward_hook(end(fwd, f"forward {name}")),
                module.register_full_backward_pre_hook(begin(bwd)),
                module.register_full_backward_hook(end(bwd, f"backward {name}")),
            ]
    return handles


def step_split(model: torch.nn.Module, run_step: Callable[[], dict]) -> dict[str, float]:
    """Seconds of one step by part: run_step runs the step and returns its region walls
    ({"forward", "backward", "optimizer"} in seconds)."""
    totals: dict[str, float] = defaultdict(float)
    handles = _hook_layers(model, totals)
    try:
        start = time.perf_counter()
        regions = run_step()
        step_s = time.perf_counter() - start
    finally:
        for handle in handles:
            handle.remove()
    split = {"step": step_s}
    for way in ("forward", "backward"):
        proj = {group: sum(totals[f"{way} {p}"] for p in names) for group, names in PROJECTIONS.items()}
        split[f"{way} projections"] = sum(proj.values())
        split[f"{way} attention core"] = totals[f"{way} attn"] - proj["attn"]
        split[f"{way} mlp rest"] = totals[f"{way} mlp"] - proj["mlp"]
        split[f"{way} norms"] = totals[f"{way} attn_norm"] + totals[f"{way} mlp_norm"]
        parts = sum(totals[f"{way} {m}"] for m in ("attn_norm", "attn", "mlp_norm", "mlp"))
        split[f"{way} glue"] = totals[f"{way} layer"] - parts
        split["head + loss" if way == "forward" else "backward rest"] = regions[way] - totals[f"{way} layer"]
    split["optimizer"] = regions["optimizer"]
    return {k: round(v, 3) for k, v in split.items()}
