"""The training recipes' step as one function, so the unit tests can drive the helpers it is made of.

No copy: the function runs the lines of recipes/full_finetune_single_device.py itself, read from
the file (its `loss_on` and the training step, from `step_loss = ...` up to the scheduler step),
so an edit to the recipe's step is what these tests exercise.
"""

import textwrap
from types import SimpleNamespace

import torch

from ftune import registry, training


def _lines(text: str, start: str, end: str) -> str:
    """The recipe's lines from the one starting with `start` up to (not including) the one with `end`."""
    first = text.index(start)
    return textwrap.dedent(text[text.rindex("\n", 0, first) + 1 : text.index(end, first)])


_RECIPE = registry.RECIPES[registry.PARENT].file.read_text()
LOSS_ON = compile(_lines(_RECIPE, "def loss_on(", "params = "), "recipe loss_on", "exec")
STEP = compile(_lines(_RECIPE, "step_loss = training.StepLoss(", "step += 1"), "recipe step", "exec")


def train_step(
    model, loss_fn, micro_batches, optimizer, *, step, device, scheduler=None, clip_grad_norm=None
) -> training.StepStats:
    """Step number `step` of the recipe, on these micro-batches (moved to `device` as accumulate does)."""
    scope = {"torch": torch, "training": training, "model": model, "loss_fn": loss_fn}
    exec(LOSS_ON, scope)  # defines loss_on, as the recipe does
    scope |= {
        "micro_batches": [training.on_device(b, device) for b in micro_batches],
        "optimizer": optimizer,
        "step": step - 1,  # the recipe's loop counter before the step (it passes step + 1)
        "device": device,
        "scheduler": scheduler,
        "params": training.trainable_params(model),
        "s": SimpleNamespace(clip_grad_norm=clip_grad_norm),
    }
    exec(STEP, scope)
    return scope["stats"]
