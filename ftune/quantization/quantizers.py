"""Quantizers: one class per scheme, the same object for QAT and for post-training quantization.

    quantizer = Int8DynActInt4Weight(group_size=32)
    quantizer.prepare(model)                 # QAT: swap in fake-quantized linears, then train
    enable_fake_quant(model, False)          # optional: train in float for the first N steps
    quantizer.convert(model)                 # QAT -> real torchao quantized weights
    # or, with no training at all:
    quantizer.quantize(model)                # PTQ

Each method works in place and returns the FQNs it changed. Only the projections inside decoder
layers are touched (and `output` with `include_output=True`); see `targets.py`. All the real work
is torchao's (`quantize_` with `QATConfig` or a PTQ config); this module picks the layers, checks
the arguments, and verifies afterwards that every targeted weight really is a torchao tensor.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization import (
    Int4WeightOnlyConfig,
    Int8DynamicActivationIntxWeightConfig,
    Int8WeightOnlyConfig,
    IntxWeightOnlyConfig,
    PerAxis,
    PerGroup,
    quantize_,
)
from torchao.quantization.qat import FakeQuantizedLinear, IntxFakeQuantizeConfig, QATConfig
from torchao.utils import TorchAOBaseTensor

from ftune.checkpointing.qat_ranges import RANGES_FILE
from ftune.quantization.ranges import init_ranges, range_learning_config
from ftune.quantization.targets import describe_linears, find_targets

__all__ = [
    "Quantizer",
    "Int8DynActInt4Weight",
    "Int8WeightOnly",
    "IntxWeightOnly",
    "Int4WeightOnly",
    "quantizer_from_spec",
]


def _check_group_size(owner: str, group_size: int | None) -> None:
    if group_size is not None and (
        isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0
    ):
        raise ValueError(
            f"{owner}: group_size must be a positive int (e.g. 32, 64, 128) or None for one scale per "
            f"output channel; got {group_size!r}."
        )


def _check_flag(owner: str, key: str, value: bool) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: {key} must be true or false; got {value!r}.")
    return value


class Quantizer:
    """Base class: subclasses set `group_size` and implement `ptq_config()`.

    Args:
        include_output: also quantize the top-level `output` projection (not possible when it is
            tied to the embeddings). Defaults to False: the output projection is the layer most
            sensitive to quantization.
    """

    name: ClassVar[str] = "Quantizer"

    def __init__(self, *, include_output: bool = False) -> None:
        self.include_output = include_output
        self.group_size: int | None = None
        self.learn_ranges = False  # the Intx schemes take it as an argument (see ranges.py)

    # ---- what a subclass provides -------------------------------------------------------------
    def ptq_config(self) -> AOBaseConfig:
        """The torchao config that quantizes for real (PTQ, and the QAT convert step)."""
        raise NotImplementedError

    def qat_config(self) -> QATConfig:
        """The torchao config of the QAT prepare step (fake quantization matching `ptq_config`)."""
        if self.learn_ranges:
            return range_learning_config(self.ptq_config())
        return QATConfig(self.ptq_config(), step="prepare")

    def spec(self) -> dict[str, Any]:
        """JSON-able description, enough to rebuild the quantizer with `quantizer_from_spec`."""
        return {"_component_": f"ftune.quantization.{self.name}", "include_output": self.include_output}

    def check_model(self, model: nn.Module) -> None:
        """Hook for scheme-specific checks of the model (device, dtype); raises ValueError."""

    # ---- the three operations -----------------------------------------------------------------
    def prepare(self, model: nn.Module, ranges: dict[str, torch.Tensor] | None = None) -> list[str]:
        """QAT: replace each target nn.Linear with a fake-quantized one (same weight Parameter).

        Args:
            model: an ftune decoder in float precision, changed in place.
            ranges: the learned ranges a QAT run with `learn_ranges=True` saved (`Loaded.qat_ranges`)
                to train on from or convert with; None on a fresh run (min/max initial scales).

        Returns:
            The FQNs of the swapped linears.

        Raises:
            ValueError: nothing to prepare, the model is already prepared or quantized, a layer's
                `in_features` is not a multiple of `group_size`, or `ranges` does not fit (given
                without `learn_ranges`, other layers or shapes).
        """
        if ranges is not None and not self.learn_ranges:
            raise ValueError(
                f"{self.name}.prepare: the checkpoint holds learned quantization ranges "
                f"({RANGES_FILE}, {len(ranges)} tensors) but learn_ranges is false. Set "
                "quantizer.learn_ranges=true to continue from or convert with them, or delete the file "
                "to start from min/max ranges."
            )
        if prepared := find_targets(model, FakeQuantizedLinear, include_output=self.include_output):
            raise ValueError(
                f"{self.name}.prepare: the model is already prepared for QAT ({prepared[0]} is a "
                "FakeQuantizedLinear). Call prepare once; use convert to quantize for real."
            )
        fqns = self._float_targets(model, "prepare")
        self.check_model(model)
        # torchao builds each FakeQuantizedLinear as a new nn.Linear (its init draws random weights,
        # then the real ones are put in): keep the global RNG as it was, so that what the recipe draws
        # next (LoRA's A in QAT + LoRA) is what it draws without QAT.
        cuda = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
        with torch.random.fork_rng(devices=cuda):
            quantize_(model, self.qat_config(), filter_fn=_exact(fqns))
        modules = dict(model.named_modules())
        if missing := [f for f in fqns if not isinstance(modules[f], FakeQuantizedLinear)]:
            raise RuntimeError(
                f"{self.name}.prepare: torchao did not swap {missing}; this is a bug in ftune."
            )
        if self.learn_ranges:
            init_ranges(model, fqns, ranges, f"{self.name}.prepare")
        return fqns

    def convert(self, model: nn.Module) -> list[str]:
        """QAT: turn each fake-quantized linear back into nn.Linear with a torchao quantized weight.

        Returns:
            The FQNs of the converted linears.

        Raises:
            ValueError: the model has no fake-quantized linear (it was not prepared), or has one
                this quantizer does not target (prepared with another `include_output`).
        """
        fqns = find_targets(model, FakeQuantizedLinear, include_output=self.include_output)
        if not fqns:
            raise ValueError(
                f"{self.name}.convert: {type(model).__name__} has no fake-quantized linear to convert; "
                f"{describe_linears(model)}. Call {self.name}(...).prepare(model) before training, "
                "or use quantize(model) for post-training quantization of a float model."
            )
        if others := [
            f for f, m in model.named_modules() if isinstance(m, FakeQuantizedLinear) and f not in fqns
        ]:
            raise ValueError(
                f"{self.name}.convert: {others[0]} is fake-quantized but {self!r} would not convert it; "
                "convert with the same quantizer settings (include_output) that prepared the model."
            )
        self.check_model(model)
        quantize_(model, QATConfig(self.ptq_config(), step="convert"), filter_fn=_exact(fqns))
        self._verify_quantized(model, fqns, "convert")
        return fqns

    def quantize(self, model: nn.Module) -> list[str]:
        """PTQ: quantize the weights of each target nn.Linear of a float model.

        Returns:
            The FQNs of the quantized linears.

        Raises:
            ValueError: the model was prepared for QAT (use convert), is already quantized, has no
                target linear, or a layer's `in_features` is not a multiple of `group_size`.
        """
        if prepared := find_targets(model, FakeQuantizedLinear, include_output=self.include_output):
            raise ValueError(
                f"{self.name}.quantize: the model is prepared for QAT ({prepared[0]} is a "
                "FakeQuantizedLinear); call convert(model) to quantize a QAT model."
            )
        fqns = self._float_targets(model, "quantize")
        self.check_model(model)
        quantize_(model, self.ptq_config(), filter_fn=_exact(fqns))
        self._verify_quantized(model, fqns, "quantize")
        return fqns

    # ---- helpers --------------------------------------------------------------------------------
    def _float_targets(self, model: nn.Module, op: str) -> list[str]:
        fqns = find_targets(model, nn.Linear, include_output=self.include_output)
        if not fqns:
            raise ValueError(
                f"{self.name}.{op}: found no nn.Linear to quantize in {type(model).__name__}; expected "
                f"layers.<i>.attn.q_proj ... layers.<i>.mlp.down_proj, and {describe_linears(model)}."
            )
        modules = dict(model.named_modules())
        if done := [f for f in fqns if isinstance(modules[f].weight, TorchAOBaseTensor)]:
            raise ValueError(
                f"{self.name}.{op}: {done[0]} already has a quantized weight "
                f"({type(modules[done[0]].weight).__name__}); quantize a float model, once."
            )
        if self.group_size is not None:
            bad = [
                f"{f} (in_features={modules[f].in_features})"
                for f in fqns
                if modules[f].in_features % self.group_size
            ]
            if bad:
                raise ValueError(
                    f"{self.name}.{op}: group_size={self.group_size} does not divide the in_features of "
                    f"{', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}. Choose a group_size that "
                    "divides every layer's in_features (embed_dim and intermediate_dim), e.g. 32."
                )
        return fqns

    def _verify_quantized(self, model: nn.Module, fqns: list[str], op: str) -> None:
        modules = dict(model.named_modules())
        if left := [f for f in fqns if not isinstance(modules[f].weight, TorchAOBaseTensor)]:
            raise RuntimeError(
                f"{self.name}.{op}: torchao left {len(left)} weight(s) unquantized, first {left[0]} "
                f"({type(modules[left[0]].weight).__name__}); this is a bug in ftune."
            )

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.spec().items() if k != "_component_")
        return f"{self.name}({args})"


def _exact(fqns: list[str]):
    wanted = frozenset(fqns)
    return lambda module, fqn: fqn in wanted


class Int8DynActInt4Weight(Quantizer):
    """int8 dynamic per-token activations, int4 symmetric weights in groups ("8da4w").

    Runs on CPU (torchao's IntxUnpackedToInt8Tensor); the usual scheme for QAT of llama models.

    Args:
        group_size: input features sharing one weight scale; None for one scale per output channel.
        include_output: also quantize `output` (see `Quantizer`).
        learn_ranges: QAT trains the weight scales (torchao's range learning; see `ranges.py`).
    """

    name = "Int8DynActInt4Weight"

    def __init__(
        self, group_size: int | None = 32, *, include_output: bool = False, learn_ranges: bool = False
    ) -> None:
        super().__init__(include_output=include_output)
        _check_group_size(self.name, group_size)
        self.group_size = group_size
        self.learn_ranges = _check_flag(self.name, "learn_ranges", learn_ranges)

    def ptq_config(self) -> AOBaseConfig:
        granularity = PerAxis(0) if self.group_size is None else PerGroup(self.group_size)
        return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=granularity)

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "group_size": self.group_size, "learn_ranges": self.learn_ranges}


class IntxWeightOnly(Quantizer):
    """Weight-only quantization to `bits` bits (symmetric), in groups or per output channel.

    Runs on CPU. Activations stay in float.

    Args:
        bits: weight bit width, 1 to 8 (2 to 8 for QAT).
        group_size: input features sharing one scale; None for one scale per output channel.
        include_output: also quantize `output` (see `Quantizer`).
        learn_ranges: QAT trains the weight scales (torchao's range learning; see `ranges.py`).
    """

    name = "IntxWeightOnly"

    def __init__(
        self,
        bits: int = 4,
        group_size: int | None = 32,
        *,
        include_output: bool = False,
        learn_ranges: bool = False,
    ) -> None:
        super().__init__(include_output=include_output)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
            raise ValueError(f"IntxWeightOnly: bits must be an int from 1 to 8; got {bits!r}.")
        _check_group_size(self.name, group_size)
        self.bits, self.group_size = bits, group_size
        self.learn_ranges = _check_flag(self.name, "learn_ranges", learn_ranges)

    def ptq_config(self) -> AOBaseConfig:
        granularity = PerAxis(0) if self.group_size is None else PerGroup(self.group_size)
        return IntxWeightOnlyConfig(weight_dtype=getattr(torch, f"int{self.bits}"), granularity=granularity)

    def qat_config(self) -> QATConfig:
        if self.bits == 1:
            raise ValueError(
                "IntxWeightOnly(bits=1): torchao has no 1-bit fake quantization for QAT; "
                "use bits between 2 and 8 for QAT (bits=1 works for post-training quantize)."
            )
        return super().qat_config()

    def spec(self) -> dict[str, Any]:
        return {
            **super().spec(),
            "bits": self.bits,
            "group_size": self.group_size,
            "learn_ranges": self.learn_ranges,
        }


class Int8WeightOnly(Quantizer):
    """int8 symmetric weight-only quantization, one scale per output channel. Runs on CPU.

    torchao has no QAT mapping for its Int8WeightOnlyConfig, so QAT fake-quantizes with the
    equivalent per-channel symmetric int8 scheme and converts with Int8WeightOnlyConfig.
    """

    name = "Int8WeightOnly"

    def ptq_config(self) -> AOBaseConfig:
        # set_inductor_config=False: don't let quantizing flip global torch._inductor settings.
        return Int8WeightOnlyConfig(set_inductor_config=False)

    def qat_config(self) -> QATConfig:
        weight = IntxFakeQuantizeConfig(torch.int8, granularity=PerAxis(0), is_symmetric=True)
        return QATConfig(weight_config=weight, step="prepare")


class Int4WeightOnly(Quantizer):
    """int4 weight-only quantization with torchao's CUDA kernels (Int4WeightOnlyConfig). CUDA only.

    Args:
        group_size: input features sharing one scale: 32, 64, 128 or 256.
        include_output: also quantize `output` (see `Quantizer`).
    """

    name = "Int4WeightOnly"

    def __init__(self, group_size: int = 128, *, include_output: bool = False) -> None:
        super().__init__(include_output=include_output)
        if group_size not in (32, 64, 128, 256):
            raise ValueError(
                f"Int4WeightOnly: group_size must be one of 32, 64, 128, 256; got {group_size!r}."
            )
        self.group_size = group_size

    def ptq_config(self) -> AOBaseConfig:
        return Int4WeightOnlyConfig(group_size=self.group_size, set_inductor_config=False)

    def check_model(self, model: nn.Module) -> None:
        devices = {p.device.type for p in model.parameters()} - {"meta"}
        if devices - {"cuda"}:
            raise ValueError(
                f"Int4WeightOnly needs the model on a CUDA device: torchao's int4 weight-only kernels "
                f"do not run on CPU, and the model is on {', '.join(sorted(devices))}. On CPU use "
                f"IntxWeightOnly(bits=4, group_size={self.group_size}) or "
                f"Int8DynActInt4Weight(group_size={self.group_size}) instead."
            )

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "group_size": self.group_size}


QUANTIZERS: dict[str, type[Quantizer]] = {
    cls.name: cls for cls in (Int8DynActInt4Weight, IntxWeightOnly, Int8WeightOnly, Int4WeightOnly)
}


def quantizer_from_spec(spec: dict[str, Any]) -> Quantizer:
    """Rebuild a quantizer from `Quantizer.spec()` (as stored in a quantized checkpoint).

    Raises:
        ValueError: the spec names no known quantizer.
    """
    component = str(spec.get("_component_", ""))
    cls = QUANTIZERS.get(component.rsplit(".", 1)[-1])
    if cls is None:
        raise ValueError(
            f"Unknown quantizer {component!r} in spec {spec}; known: "
            f"{', '.join('ftune.quantization.' + n for n in QUANTIZERS)}."
        )
    return cls(**{k: v for k, v in spec.items() if k != "_component_"})
