"""TRL's own preference-loss code, run on given log-probabilities without building a trainer.

Importing ``trl.trainer.dpo_trainer`` pulls in transformers' Trainer and accelerate (about a minute
on the 2-core test machine), so the two methods are read from TRL's installed source files and
executed with a stand-in ``self``: the code that runs is TRL's, unchanged.

- ``DPOTrainer._compute_loss`` (sigmoid and IPO) with ``precompute_ref_logps``: the reference
  log-probabilities come in the inputs, and the stand-in model returns the per-token policy
  log-probabilities as TRL's fused LM head would.
- ``CPOTrainer.cpo_loss`` (``loss_type="simpo"``) on average log-probabilities.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import warnings
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

TRL = Path(importlib.util.find_spec("trl").submodule_search_locations[0])


def _method(relative: str, cls: str, name: str):
    path = TRL / relative
    tree = ast.parse(path.read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    module = ast.Module(body=[fn], type_ignores=[])
    scope = {"torch": torch, "F": F, "math": math, "warnings": warnings}
    exec(compile(module, str(path), "exec"), scope)  # noqa: S102 - TRL's installed source, read for parity
    return scope[name]


class _Accelerator:
    device = torch.device("cpu")

    @staticmethod
    def gather(x):
        return x

    gather_for_metrics = gather


class _FusedHeadModel:
    """Returns the given per-token log-probabilities the way TRL's fused LM head output carries them."""

    training = True

    def __init__(self, per_token_logps: torch.Tensor) -> None:
        self.per_token_logps = per_token_logps

    def __call__(self, **kwargs):
        zeros = torch.zeros_like(self.per_token_logps.detach())
        return SimpleNamespace(
            log_probs=self.per_token_logps, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool()
        )


def trl_dpo(
    loss_type: str,
    beta: float,
    per_token_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TRL's DPO loss and logged metrics.

    Args:
        per_token_logps: ``[2b, s - 1]`` policy log-probabilities of the next token (0 where not labelled),
            chosen rows first; may require grad.
        completion_mask: ``[2b, s]`` 1 at answer tokens (TRL's layout: row i's labels are
            ``completion_mask[i, 1:]``).
        ref_chosen, ref_rejected: ``[b]`` reference sums.
    """
    compute = _method("trainer/dpo_trainer.py", "DPOTrainer", "_compute_loss")
    model = _FusedHeadModel(per_token_logps)
    rows, s = completion_mask.shape
    stand_in = SimpleNamespace(
        model=model,
        accelerator=_Accelerator(),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=beta,
        label_smoothing=0.0,
        use_weighting=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
    )
    inputs = {
        "input_ids": torch.zeros(rows, s, dtype=torch.long),
        "attention_mask": torch.ones(rows, s, dtype=torch.long),
        "completion_mask": completion_mask,
        "ref_chosen_logps": ref_chosen,
        "ref_rejected_logps": ref_rejected,
    }
    loss = compute(stand_in, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in stand_in._metrics["train"].items()}


def trl_simpo(
    beta: float, gamma: float, label_smoothing: float, chosen_avg: torch.Tensor, rejected_avg: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TRL's CPO loss with loss_type "simpo" on average log-probabilities: (losses, chosen_rewards, rejected_rewards)."""
    cpo_loss = _method("experimental/cpo/cpo_trainer.py", "CPOTrainer", "cpo_loss")
    stand_in = SimpleNamespace(
        alpha=0.0,
        loss_type="simpo",
        simpo_gamma=gamma,
        beta=beta,
        label_smoothing=label_smoothing,
        accelerator=_Accelerator(),
    )
    return cpo_loss(stand_in, chosen_avg, rejected_avg)
