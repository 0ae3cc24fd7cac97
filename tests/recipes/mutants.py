"""The mutation table of the feature matrix: feature -> (check, mutants).

A mutant replaces a feature's primitive with a no-op or with the plain alternative, through
monkeypatch, the way a recipe that silently stopped using the feature would behave. For every
(recipe, feature) cell marked ✓ in the registry (ftune/registry/cells.py), the feature's check must FAIL (an
AssertionError) under each of its mutants: a ✓ whose check survives its mutant is not earned.
tests/recipes/test_mutation.py runs this for the single-device recipes; the distributed recipes
run their mutants inside their one torchrun launch (tests/recipes/dist_driver.py).

Targets are what recipes look up at call time (`training.X`, `torch.nn.utils.clip_grad_norm_`)
or methods and functions of library classes and modules, never a recipe file.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from features import CHECKS
from mutants_agent import agent_mutants
from mutants_images import images_mutants
from mutants_parallel import parallel_mutants
from mutants_ppo import ppo_mutants
from mutants_rewards import reward_mutants

import ftune.checkpointing._checkpointer
import ftune.data.collate
import ftune.data.packing
import ftune.peft
import ftune.peft.lora
import ftune.quantization
import ftune.quantization.quantizers
from ftune import training
from ftune.checkpointing.qat_ranges import is_range_key
from ftune.peft import DoRALinear, LoRALinear
from ftune.training.methods import distill_loss as distill_loss_module
from ftune.training.methods import grpo_loss as grpo_loss_module
from ftune.training.methods import preference_loss as preference_loss_module
from ftune.training.methods import rollout_batch as rollout_batch_module
from ftune.training.step import token_loss as token_loss_module
from ftune.training.step.aux_loss import with_aux_loss

Patch = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Mutant:
    """One way a feature can silently vanish: `apply` patches it in, `target` says where."""

    name: str
    target: str
    apply: Patch


def _wrap(owner: Any, attr: str, make: Callable[[Any], Any]) -> Patch:
    """A patch replacing `owner.attr` by `make(original)` (looked up when the patch is applied)."""

    def apply(mp: pytest.MonkeyPatch) -> None:
        mp.setattr(owner, attr, make(getattr(owner, attr)))

    return apply


def _full_logits_cross_entropy(self, head, hidden, labels):
    """ChunkedCrossEntropyLoss.forward as plain cross-entropy: the whole fp32 logits at once."""
    logits = head.logits(hidden)  # (b, s, vocab) fp32
    loss = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=self.ignore_index, reduction="sum"
    )
    return loss, int((labels != self.ignore_index).sum())


def _one_sample_per_row(real):
    def pack_sequences(tokens, labels, **kwargs):
        rows = [real([t], [y], **kwargs) for t, y in zip(tokens, labels)]
        return {k: __import__("numpy").concatenate([r[k] for r in rows]) for k in rows[0]}

    return pack_sequences


class _ForgetfulLoader:
    """Stands in for the loader in `restore`: takes the saved position and drops it."""

    def load_state_dict(self, state: dict) -> None:
        pass


def _restore_without_loader(real):
    def restore(state, **objects):
        return real(state, **{**objects, "loader": _ForgetfulLoader()})

    return restore


def _no_switch(real):
    def enable_fake_quant(model, enabled):
        return sum(1 for m in model.modules() if hasattr(m, "weight_fake_quantizer"))

    return enable_fake_quant


def _train_everything(real):
    def apply_lora(model, **kwargs):
        swapped = real(model, **kwargs)
        for p in model.parameters():
            p.requires_grad_(p.dtype.is_floating_point)
        return swapped

    return apply_lora


def _one_chunk(real):
    def forward(self, *args, **kwargs):
        self.num_chunks = 1  # the whole batch's logits of both models at once
        return real(self, *args, **kwargs)

    return forward


def _no_kl(real):
    def chunk_loss(self, head, hidden, teacher_head, teacher_hidden, labels):
        log_q = F.log_softmax(head.logits(hidden), dim=-1)
        ce = F.nll_loss(log_q, labels, ignore_index=self.ignore_index, reduction="sum")
        return (1.0 - self.kd_ratio) * ce  # the teacher's term dropped

    return chunk_loss


def _ranges_from_min_max(real):
    def init_ranges(model, fqns, ranges, owner):
        return real(model, fqns, None, owner)

    return init_ranges


def _ranges_frozen(real):
    def init_ranges(model, fqns, ranges, owner):
        real(model, fqns, ranges, owner)
        for name, param in model.named_parameters():
            if is_range_key(name):
                param.requires_grad_(False)

    return init_ranges


def _padding_free_pads(mp: pytest.MonkeyPatch) -> None:
    """padding_free_collate right-pads: where configs name it (ftune.data) and where DPO's calls it; and a
    GRPO rollout's rows stay right-padded (pack_rows a no-op where rollout_batch calls it)."""
    pads = partial(ftune.data.padded_collate_sft, pad_id=0)
    mp.setattr(ftune.data, "padding_free_collate", lambda batch: pads(batch))
    mp.setattr(ftune.data.collate, "padding_free_collate", lambda batch: pads(batch))
    mp.setattr(rollout_batch_module, "pack_rows", lambda parts: parts)


def _noop(result: Callable[..., Any]):
    return lambda real: result


def _aux_term_logged_not_added(mp: pytest.MonkeyPatch) -> None:
    """Every loss helper logs the MoE balancing loss but leaves it out of the loss (a helper that forgot
    the term), patched where each helper looks ``with_aux_loss`` up."""

    def logged_only(model, batch, loss):
        return training.Loss(loss.sum, loss.count, with_aux_loss(model, batch, loss).metrics)

    for module in (token_loss_module, preference_loss_module, grpo_loss_module, distill_loss_module):
        mp.setattr(module, "with_aux_loss", logged_only)


MUTANTS: dict[str, tuple[Mutant, ...]] = {
    "grad_accumulation": (
        Mutant(
            "accumulate_one_batch_per_step",
            "training.accumulate",
            _wrap(training, "accumulate", lambda real: lambda batches, n, **kw: real(batches, 1, **kw)),
        ),
    ),
    "grad_clipping": (
        Mutant(
            "clip_measures_only",
            "torch.nn.utils.clip_grad_norm_",
            _wrap(
                torch.nn.utils,
                "clip_grad_norm_",
                lambda real: lambda p, _, *a, **k: real(p, math.inf, *a, **k),
            ),
        ),
    ),
    "compile": (
        Mutant(
            "compile_model_noop",
            "training.compile_model",
            _wrap(training, "compile_model", _noop(lambda m, **k: None)),
        ),
    ),
    "activation_checkpointing": (
        Mutant(
            "activation_checkpointing_noop",
            "training.apply_activation_checkpointing",
            _wrap(training, "apply_activation_checkpointing", _noop(lambda model: 0)),
        ),
    ),
    "optimizer_in_backward": (
        Mutant(
            "optimizer_steps_after_backward",
            "training.build_optimizer",
            _wrap(
                training,
                "build_optimizer",
                lambda real: lambda node, p, **k: real(node, p, in_backward=False),
            ),
        ),
    ),
    "low_precision_optimizers": (
        Mutant(
            "bf16_state_adamw_is_fp32_adamw",
            "training.AdamWBf16State",
            _wrap(training, "AdamWBf16State", lambda real: torch.optim.AdamW),
        ),
    ),
    "chunked_loss": (
        Mutant(
            "chunked_loss_full_logits",
            "ftune.training.ChunkedCrossEntropyLoss.forward",
            _wrap(training.ChunkedCrossEntropyLoss, "forward", _noop(_full_logits_cross_entropy)),
        ),
    ),
    "custom_collate": (
        Mutant(
            "config_collate_ignored",
            "training.build_collate",
            _wrap(training, "build_collate", lambda real: lambda node, pad_id: real(None, pad_id)),
        ),
    ),
    "packing": (
        Mutant(
            "packing_one_sample_per_row",
            "ftune.data.packing.pack_sequences",
            _wrap(ftune.data.packing, "pack_sequences", _one_sample_per_row),
        ),
    ),
    "padding_free": (
        Mutant("padding_free_collate_pads", "ftune.data.padding_free_collate, pack_rows", _padding_free_pads),
    ),
    "validation": (
        Mutant(
            "validation_loader_none",
            "training.validation_loader",
            _wrap(training, "validation_loader", _noop(lambda dataset, **k: None)),
        ),
    ),
    "step_checkpointing": (
        Mutant(
            "save_checkpoint_noop",
            "training.save_checkpoint",
            _wrap(training, "save_checkpoint", _noop(lambda *a, **k: None)),
        ),
    ),
    "resume": (
        Mutant(
            "restore_forgets_loader_position",
            "training.restore",
            _wrap(training, "restore", _restore_without_loader),
        ),
    ),
    "metric_logging": (
        Mutant(
            "disk_logger_writes_nothing",
            "ftune.training.DiskLogger._write",
            _wrap(training.DiskLogger, "_write", _noop(lambda self, metrics, step: None)),
        ),
    ),
    "profiler": (
        Mutant(
            "profiler_disabled",
            "training.Profiler",
            _wrap(training, "Profiler", lambda real: lambda **kw: real(**{**kw, "enabled": False})),
        ),
    ),
    "lora": (
        Mutant(
            "lora_base_not_frozen",
            "ftune.peft.apply_lora",
            _wrap(ftune.peft, "apply_lora", _train_everything),
        ),
    ),
    "qlora": (
        Mutant(
            "nf4_base_stays_dense",
            "ftune.peft.lora.to_nf4_parameter",
            _wrap(
                ftune.peft.lora,
                "to_nf4_parameter",
                _noop(lambda w, **k: torch.nn.Parameter(w.detach().clone(), requires_grad=False)),
            ),
        ),
    ),
    "dora": (
        Mutant(
            "dora_forward_is_lora",
            "ftune.peft.DoRALinear.forward",
            _wrap(DoRALinear, "forward", _noop(LoRALinear.forward)),
        ),
    ),
    "qat": (
        Mutant(
            "fake_quant_switch_noop",
            "ftune.quantization.enable_fake_quant",
            _wrap(ftune.quantization, "enable_fake_quant", _no_switch),
        ),
        Mutant(
            "fake_quant_never_on",
            "ftune.quantization.enable_fake_quant",
            _wrap(
                ftune.quantization,
                "enable_fake_quant",
                lambda real: lambda model, enabled: real(model, False),
            ),
        ),
    ),
    "learned_ranges": (
        Mutant(
            "saved_ranges_ignored",
            "ftune.quantization.quantizers.init_ranges",
            _wrap(ftune.quantization.quantizers, "init_ranges", _ranges_from_min_max),
        ),
        Mutant(
            "ranges_frozen",
            "ftune.quantization.quantizers.init_ranges",
            _wrap(ftune.quantization.quantizers, "init_ranges", _ranges_frozen),
        ),
        Mutant(
            "ranges_not_saved",
            "ftune.checkpointing._checkpointer.save_ranges",
            _wrap(ftune.checkpointing._checkpointer, "save_ranges", _noop(lambda folder, ranges: None)),
        ),
    ),
    "knowledge_distillation": (
        Mutant(
            "kd_loss_one_chunk",
            "ftune.training.KDLoss.forward",
            _wrap(training.KDLoss, "forward", _one_chunk),
        ),
        Mutant(
            "kd_loss_without_teacher",
            "ftune.training.KDLoss.chunk_loss",
            _wrap(training.KDLoss, "chunk_loss", _no_kl),
        ),
    ),
    "mixture_of_experts": (
        Mutant(
            "aux_term_logged_not_added",
            "with_aux_loss of ftune.training's four loss helpers",
            _aux_term_logged_not_added,
        ),
    ),
    "fsdp2": (
        Mutant(
            "shard_model_noop",
            "training.shard_model",
            _wrap(training, "shard_model", _noop(lambda model, *a, **k: model)),
        ),
    ),
}
MUTANTS.update({**reward_mutants(Mutant), **ppo_mutants(Mutant), **images_mutants(Mutant, _wrap)})
MUTANTS.update(agent_mutants(Mutant, _wrap))  # tests/recipes/mutants_{agent,rewards,ppo,images}.py
MUTANTS.update(parallel_mutants(Mutant, _wrap))  # tests/recipes/mutants_parallel.py

# The one table: feature -> (its check, its mutants).
TABLE: dict[str, tuple[Callable[..., None], tuple[Mutant, ...]]] = {
    f: (CHECKS[f], m) for f, m in MUTANTS.items()
}


def mutant_named(feature: str, name: str) -> Mutant:
    return next(m for m in MUTANTS[feature] if m.name == name)


def outcome(feature: str, mutant: Mutant, run: Callable[..., Any], tmp_path: Any) -> str:
    """Run `feature`'s check with `mutant` applied: "killed: <assertion>", "survived", or "error: <traceback>".

    Only an AssertionError kills: a check must notice the missing effect, not crash on it.
    """
    with pytest.MonkeyPatch.context() as mp:
        mutant.apply(mp)
        try:
            CHECKS[feature](run, tmp_path)
        except AssertionError as e:
            first = (str(e).strip().splitlines() or ["(no message)"])[0]
            return f"killed: {first[:200]}"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            return "error: " + traceback.format_exc(limit=8)
    return "survived"
