"""Learned quantization ranges (torchao's range learning, a prototype): QAT that trains the weight scales.

With `learn_ranges=True` a quantizer's QAT fake-quantizes each target weight with a scale per group
that is a trainable parameter (`<linear>.weight_fake_quantizer.scale`), initialised to the min/max
scale the quantizer would compute, and trained with the weights (the straight-through estimator
gives it a gradient). `convert` then quantizes with the trained scales instead of recomputing
min/max ones. The checkpointer saves the scales in `qat_ranges.safetensors`
(`ftune.checkpointing.qat_ranges`); `prepare(model, ranges=...)` puts them back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.qat import QATConfig
from torchao.quantization.qat.fake_quantize_config import _infer_fake_quantize_configs

from ftune.checkpointing.qat_ranges import RANGE_SUFFIX, RANGES_FILE


def range_learning_config(ptq_config: AOBaseConfig) -> QATConfig:
    """The QAT prepare config of `ptq_config` with static, trainable weight scales.

    The activation and weight fake quantization are the ones torchao derives from `ptq_config`
    for plain QAT; only the weights' scales change from dynamic (recomputed every forward) to
    learned.
    """
    activation, weight = _infer_fake_quantize_configs(ptq_config)
    weight = dataclasses.replace(weight, is_dynamic=False, range_learning=True)
    return QATConfig(activation_config=activation, weight_config=weight, step="prepare")


def init_ranges(
    model: nn.Module, fqns: list[str], ranges: Mapping[str, torch.Tensor] | None, owner: str
) -> None:
    """Create the trainable scale of each prepared linear: min/max of its weight, or the saved one.

    Args:
        model: prepared with `range_learning_config`.
        fqns: the prepared linears.
        ranges: `<fqn>.weight_fake_quantizer.scale` -> scale, as a QAT run with range learning
            saved them; None starts from min/max scales.
        owner: named in errors (e.g. "Int8DynActInt4Weight.prepare").

    Raises:
        ValueError: `ranges` lacks a prepared linear's scale, holds one of a linear that is not
            prepared, or a scale's shape differs (all named).
    """
    modules = dict(model.named_modules())
    for fqn in fqns:
        quantizer = modules[fqn].weight_fake_quantizer
        # What torchao's initialize_fake_quantizers does, without running the whole model: one
        # fake-quantization of the weight computes its min/max scale and makes it a Parameter.
        quantizer._initialized = True
        with torch.no_grad():
            quantizer(modules[fqn].weight)
    if ranges is None:
        return
    expected = {fqn + RANGE_SUFFIX: fqn for fqn in fqns}
    missing = sorted(set(expected) - set(ranges))
    unexpected = sorted(set(ranges) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{owner}: the learned ranges ({RANGES_FILE}) do not match the prepared linears: "
            f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}, "
            f"unexpected {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}. Prepare with the "
            "quantizer settings (include_output) of the QAT run that saved them."
        )
    for key, fqn in expected.items():
        scale = modules[fqn].weight_fake_quantizer.scale
        if tuple(ranges[key].shape) != tuple(scale.shape):
            raise ValueError(
                f"{owner}: {key} in {RANGES_FILE} has shape {tuple(ranges[key].shape)}, the quantizer "
                f"expects {tuple(scale.shape)}: the run that saved it used another group_size. "
                "Prepare with the group_size of that QAT run."
            )
        with torch.no_grad():
            scale.copy_(ranges[key])


def require_saved_ranges(
    quantizer: object, ranges: Mapping[str, torch.Tensor] | None, folder: object
) -> None:
    """Before a QAT convert: a quantizer that learns ranges needs the ones its QAT run saved.

    Raises:
        ValueError: `quantizer.learn_ranges` is true and `folder` holds no `qat_ranges.safetensors`
            (converting would quantize with min/max scales the run never trained with).
    """
    if getattr(quantizer, "learn_ranges", False) and ranges is None:
        raise ValueError(
            f"quantize qat=true: quantizer.learn_ranges=true, but {folder} has no {RANGES_FILE}: the QAT "
            "run that saved it did not learn its ranges. Set quantizer.learn_ranges=false to convert "
            "with the min/max scales that run trained with, or point checkpointer.checkpoint_dir at a "
            "step folder of a run with quantizer.learn_ranges=true."
        )
