"""TRL's own ORPO and KTO loss code, run with a stand-in ``self`` on a real `transformers` model.

Importing TRL's trainers pulls in transformers' Trainer and accelerate (half a minute or more on the
2-core test machine), so the methods and the two utilities they call are read from TRL's installed
source files and executed unchanged (as tests/training/trl_losses.py does for DPO):

- ``ORPOTrainer.get_batch_loss_metrics`` with its ``concatenated_forward``, ``concatenated_inputs``,
  ``get_batch_logps`` and ``odds_ratio_loss``: the forward of the `transformers` model, ORPO's NLL
  over prompt and answer, the odds-ratio term and every logged figure;
- ``KTOTrainer._compute_loss`` with ``_compute_kl_logps`` and ``precompute_ref_logps``: the reference's
  log-probabilities come in the inputs, and the model is wrapped to answer ``fused_lm_head=True`` as
  TRL's fused LM head does (per-token log-probabilities of the next-token labels, 0 where a label is -100).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import warnings
from collections import defaultdict
from pathlib import Path
from types import MethodType, SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

TRL = Path(importlib.util.find_spec("trl").submodule_search_locations[0])
_SCOPE = {"torch": torch, "F": F, "nn": nn, "math": math, "warnings": warnings}


def _source(relative: str, name: str, cls: str | None = None) -> ast.FunctionDef:
    tree = ast.parse((TRL / relative).read_text())
    body = (
        tree.body
        if cls is None
        else next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    )
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    return fn


def _load(relative: str, name: str, cls: str | None = None, **scope):
    fn = _source(relative, name, cls)
    namespace = {**_SCOPE, **scope}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(TRL / relative), "exec"), namespace)  # noqa: S102
    return namespace[name]


def _utilities() -> dict:
    scope = {"is_triton_available": lambda: False, "_supports_trl_loss_kernel": lambda *a, **k: False}
    selective = _load("trainer/utils.py", "selective_log_softmax", **scope)
    pad = _load("experimental/utils.py", "pad_to_length")
    log1mexp = _load("experimental/orpo/orpo_trainer.py", "log1mexp")
    return {"selective_log_softmax": selective, "pad_to_length": pad, "log1mexp": log1mexp}


class _Accelerator:
    device = torch.device("cpu")

    @staticmethod
    def gather_for_metrics(x):
        return x


def trl_orpo(beta: float):
    """``loss_and_metrics(model, batch) -> (loss, metrics)``: TRL's ORPO step for a `transformers` model.

    ``batch`` is ORPOTrainer's collated layout: ``{chosen,rejected}_{input_ids,attention_mask,labels}``
    (labels -100 on the prompt and padding, not shifted).
    """
    scope = {**_utilities(), "is_torch_xla_available": lambda: False}
    path, cls = "experimental/orpo/orpo_trainer.py", "ORPOTrainer"
    stand_in = SimpleNamespace(
        beta=beta,
        is_encoder_decoder=False,
        padding_value=0,
        aux_loss_enabled=False,
        accelerator=_Accelerator(),
    )
    for name in ("concatenated_inputs", "get_batch_logps"):  # static methods
        setattr(stand_in, name, _load(path, name, cls, **scope))
    for name in ("concatenated_forward", "odds_ratio_loss", "get_batch_loss_metrics"):
        setattr(stand_in, name, MethodType(_load(path, name, cls, **scope), stand_in))
    return lambda model, batch: stand_in.get_batch_loss_metrics(model, batch, "train")


class FusedHead(nn.Module):
    """A `transformers` causal LM answering ``fused_lm_head=True`` as TRL's patched forward does."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels, fused_lm_head=True, use_cache=False, **kwargs):
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[
            :, :-1
        ]
        targets = labels[:, 1:]  # (b, s - 1): position t predicts token t + 1
        logps = logits.float().log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
        logps = logps.masked_fill(targets == -100, 0.0)
        zeros = torch.zeros_like(logps.detach())
        return SimpleNamespace(log_probs=logps, entropy=zeros, mean_logits=zeros)


def trl_kto(beta: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0):
    """``loss_and_metrics(model, inputs) -> (loss, metrics)``: TRL's KTO loss for a :class:`FusedHead` model.

    ``inputs`` is KTOTrainer's collated layout with precomputed reference log-probabilities:
    ``input_ids``, ``attention_mask``, ``completion_mask``, ``KL_input_ids``, ``KL_attention_mask``,
    ``KL_completion_mask``, ``label`` (bool list), ``ref_logps``, ``ref_KL_logps``.
    """
    path, cls = "trainer/kto_trainer.py", "KTOTrainer"
    stand_in = SimpleNamespace(
        beta=beta,
        desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight,
        loss_type="kto",
        calculate_KL=True,
        precompute_ref_logps=True,
        aux_loss_enabled=False,
        accelerator=_Accelerator(),
        model=SimpleNamespace(training=True),
        _total_train_tokens=0,
        _tp_size=1,
    )
    stand_in._compute_kl_logps = MethodType(_load(path, "_compute_kl_logps", cls), stand_in)
    compute = MethodType(_load(path, "_compute_loss", cls), stand_in)

    def loss_and_metrics(model, inputs):
        stand_in._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        loss = compute(model, inputs, return_outputs=False)
        return loss, {k: v[-1] for k, v in stand_in._metrics["train"].items()}

    return loss_and_metrics
