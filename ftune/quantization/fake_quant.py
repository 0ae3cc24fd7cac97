"""Switching a prepared model's fake quantization on and off (QAT's `fake_quant_after_n_steps`)."""

from __future__ import annotations

from torch import nn
from torchao.quantization.qat import FakeQuantizedLinear


def enable_fake_quant(model: nn.Module, enabled: bool) -> int:
    """Switch fake quantization of every fake-quantized linear (and LoRA layer over one) on or off.

    With fake quantization off, a prepared model computes exactly what the float model does
    (FakeQuantizedLinear then runs `F.linear(x, weight, bias)`), which is how
    `fake_quant_after_n_steps` trains in float first.

    Args:
        model: a model prepared with `Quantizer.prepare`.
        enabled: True to fake-quantize activations and weights, False to compute in float.

    Returns:
        The number of linears switched.

    Raises:
        ValueError: the model has no fake-quantized linear.
    """
    count = 0
    for module in model.modules():
        # FakeQuantizedLinear, or a LoRA layer over one (QAT + LoRA), which keeps its quantizers.
        if isinstance(module, FakeQuantizedLinear) or getattr(module, "fake_quantized", False):
            for quantizer in (module.activation_fake_quantizer, module.weight_fake_quantizer):
                if quantizer is not None:
                    quantizer.enabled = enabled
            count += 1
    if count == 0:
        raise ValueError(
            f"enable_fake_quant: {type(model).__name__} has no fake-quantized linear; "
            "call quantizer.prepare(model) first."
        )
    return count
