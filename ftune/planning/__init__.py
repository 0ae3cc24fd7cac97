"""The memory plan: the peak memory a training config needs per rank, before the run (`ftune plan`).

`plan_config` predicts it term by term (weights, gradients, optimizer state, activations, the loss's
blocks, a teacher, a reference, GRPO's KV cache, the process's fixed overhead) from the config and
the model built on the meta device; `what_fits` lists the settings that bring it under a memory.
"""

from ftune.planning.fit import Option, what_fits
from ftune.planning.plan import Parallelism, Plan, Workload, plan, plan_config, workload_of
from ftune.planning.shapes import ModelShape, shape_of

__all__ = [
    "ModelShape",
    "Option",
    "Parallelism",
    "Plan",
    "Workload",
    "plan",
    "plan_config",
    "shape_of",
    "what_fits",
    "workload_of",
]
