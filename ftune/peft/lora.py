"""LoRA: a frozen linear layer plus a trainable low-rank update (Hu et al., 2021)."""

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ftune.peft.nf4 import dequantize, frozen_linear, is_nf4, to_nf4_parameter


class LoRALinear(nn.Module):
    """y = x·Wᵀ + b + (alpha/rank)·B(A(dropout(x))), with W and b frozen.

    Keeps the wrapped Linear's `weight`/`bias` names, so base checkpoints load unchanged; the adapter
    lives in the submodules `lora_a` (A: in_features -> rank) and `lora_b` (B: rank -> out_features).
    B starts at zero, so right after the swap the layer computes exactly what the Linear did.

    The base weight and bias get requires_grad False: autograd then skips their gradient, and the
    backward of the base matmul costs one matmul (the input gradient) instead of two.

    Args:
        base: the Linear to adapt. Its Parameters are reused (no copy) unless quantize_base is set.
        rank: rank r of the update, > 0.
        alpha: the update is scaled by alpha / rank.
        dropout: dropout probability applied to the adapter's input only, in [0, 1).
        quantize_base: store the frozen base weight as NF4 (QLoRA); see `ftune.peft.nf4`.

    QAT + LoRA: when `base` is fake-quantized (torchao's FakeQuantizedLinear, from
    `Quantizer.prepare`), the layer keeps its fake quantizers, and the frozen base path computes
    ``fq_act(x)·fq_weight(W)ᵀ + b``, what the quantized model will compute; the adapter path stays
    float. `ftune.quantization.enable_fake_quant` switches them like a FakeQuantizedLinear's.

    Raises:
        ValueError: if rank or dropout are out of range, or quantize_base is asked of a fake-quantized base.
    """

    def __init__(
        self, base: nn.Linear, *, rank: int, alpha: float, dropout: float = 0.0, quantize_base: bool = False
    ) -> None:
        super().__init__()
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise ValueError(f"LoRA rank must be a positive int, got {rank!r}. Set e.g. rank=8.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout!r}. Set e.g. dropout=0.05.")
        self.in_features, self.out_features = base.in_features, base.out_features
        self.rank, self.alpha, self.dropout_p = rank, float(alpha), float(dropout)
        self.scale = self.alpha / rank
        # None for a plain Linear; a fake-quantized base hands over its quantizers (submodules, no state).
        self.activation_fake_quantizer = getattr(base, "activation_fake_quantizer", None)
        self.weight_fake_quantizer = getattr(base, "weight_fake_quantizer", None)
        if quantize_base and self.fake_quantized:
            raise ValueError(
                f"LoRA quantize_base (NF4, QLoRA) over a fake-quantized base ({type(base).__name__}): the "
                "base would be quantized twice. Set peft.quantize_base=false for QAT + LoRA."
            )
        weight = base.weight
        if quantize_base and not is_nf4(weight):
            weight = to_nf4_parameter(weight)
        self.weight = weight  # same Parameter object as base.weight unless quantized
        self.bias = base.bias
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        # Adapter weights in the base layer's dtype and device (for NF4, the dequantized dtype).
        factory = {"device": weight.device, "dtype": weight.dtype}
        self.lora_a = nn.Linear(self.in_features, rank, bias=False, **factory)
        self.lora_b = nn.Linear(rank, self.out_features, bias=False, **factory)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        # False while `ftune.peft.adapters_disabled` runs the frozen base alone (DPO's reference pass).
        self.adapter_enabled = True
        self.reset_adapter_parameters()
        if is_nf4(self.weight):
            # Checkpoints hold dense weights: hand out the dequantized weight, so that state_dict()
            # can be saved as safetensors. Loading a dense weight back re-quantizes it (NF4 copy_),
            # and a load with assign=True, which swaps in the dense tensor, is re-quantized after it.
            self.register_state_dict_post_hook(_dequantize_nf4_weight)
            self.register_load_state_dict_post_hook(_requantize_assigned_weight)

    def reset_adapter_parameters(self) -> None:
        """Initialise A like nn.Linear (Kaiming uniform, as PEFT does) and B to zero (a no-op update)."""
        if self.lora_a.weight.is_meta:
            return  # nothing to fill in yet; call again after materialising the module
        nn.init.kaiming_uniform_(self.lora_a.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_b.weight)

    @property
    def fake_quantized(self) -> bool:
        """True when the frozen base path is fake-quantized (QAT + LoRA)."""
        return self.activation_fake_quantizer is not None or self.weight_fake_quantizer is not None

    @property
    def quantized(self) -> bool:
        """True when the base weight is stored as NF4 (QLoRA)."""
        return is_nf4(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x [..., in_features]. Returns: [..., out_features]."""
        if not self.adapter_enabled:
            return frozen_linear(x, self.weight, self.bias)
        if self._merged_path(x):
            return _MergedLoRALinear.apply(
                x, self.weight, self.bias, self.lora_a.weight, self.lora_b.weight, self.scale
            )
        base = self._base(x)  # (..., out_features)
        a = self.lora_a(self.dropout(x))  # (..., rank)
        # base + scale·a·Bᵀ as one GEMM accumulating into base: no full-size temporaries for the
        # scaled update and the sum.
        out = torch.addmm(
            base.reshape(-1, self.out_features),
            a.reshape(-1, self.rank),
            self.lora_b.weight.t(),
            alpha=self.scale,
        )
        return out.view(base.shape)

    def _fake_quant_on(self) -> bool:
        """Whether a fake quantizer is present and switched on (`enable_fake_quant`)."""
        return any(
            q is not None and q.enabled for q in (self.activation_fake_quantizer, self.weight_fake_quantizer)
        )

    def _base(self, x: torch.Tensor) -> torch.Tensor:
        """The frozen base path, fake-quantized (input and weight) while fake quantization is on."""
        if not self._fake_quant_on():
            return frozen_linear(x, self.weight, self.bias)
        afq, wfq = self.activation_fake_quantizer, self.weight_fake_quantizer
        return F.linear(
            x if afq is None else afq(x), self.weight if wfq is None else wfq(self.weight), self.bias
        )

    def _merged_path(self, x: torch.Tensor) -> bool:
        """Whether `_MergedLoRALinear` computes this forward: fp32, dense, frozen base, no dropout,
        and enough tokens.

        fp32 only: in bf16 the small update s·B·A would be rounded to the base weight's precision
        (8 bits) when merged, and early in training vanish from the forward altogether. Merging
        costs out·in·r multiply-adds whatever the batch, the adapter GEMMs it replaces n·(in +
        out)·r for n tokens: it pays from n >= in·out / (in + out) (419 for 576 x 1536).
        """
        frozen = not self.weight.requires_grad and (self.bias is None or not self.bias.requires_grad)
        tokens = x.numel() // self.in_features
        break_even = self.in_features * self.out_features // (self.in_features + self.out_features)
        return (
            tokens >= break_even
            and frozen
            and x.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not is_nf4(self.weight)
            and not self._fake_quant_on()  # off: exactly a LoRA layer, on the same path
            and not (self.training and self.dropout_p > 0)
        )

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """W + (alpha/rank)·B·A as a new dense tensor [out_features, in_features] in the base dtype."""
        return merge_lora(dequantize(self.weight), self.lora_a.weight, self.lora_b.weight, self.scale)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
            f"alpha={self.alpha:g}, dropout={self.dropout_p:g}, bias={self.bias is not None}, "
            f"quantized={self.quantized}, fake_quantized={self.fake_quantized}"
        )


def merge_lora(
    weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float
) -> torch.Tensor:
    """``W + scale·B·A`` as a new tensor in W's dtype: the one merge formula of modules, state dicts
    and `_MergedLoRALinear` (one fused GEMM, no full-size temporaries besides the result).

    Args:
        weight: dense base weight [out, in]. lora_a: A [rank, in]. lora_b: B [out, rank].
        scale: alpha / rank.
    """
    return torch.addmm(weight, lora_b.to(weight.dtype), lora_a.to(weight.dtype), alpha=scale)


class _MergedLoRALinear(torch.autograd.Function):
    """y = x·(W + s·B·A)ᵀ + b for a frozen W and b: one full-size GEMM forward, one backward.

    Computed the plain way, a LoRA layer adds to the frozen base GEMM four skinny rank-r GEMMs and
    a full-size add forward, and six skinny GEMMs and an add backward; skinny GEMMs run at about
    half the speed of square ones on CPU (measured: ~75 vs ~165 GFLOP/s on SmolLM2-135M's
    shapes). Merging the update into the weight first (out x in x r multiply-adds, independent of
    the number of tokens) leaves one GEMM forward and, for the input gradient, one backward; only
    the adapter gradients need skinny GEMMs:

        dA = s·(dy·B)ᵀ·x,   dB = s·dyᵀ·(x·Aᵀ),   dx = dy·(W + s·B·A)

    The merged weight is recomputed in backward rather than saved (it is as large as W). With
    B = 0 (right after the swap) the merged weight is W exactly, so the output equals the base
    layer's bit for bit.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        lora_a: torch.Tensor,
        lora_b: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight, lora_a, lora_b)
        ctx.scale = scale
        return F.linear(x, merge_lora(weight, lora_a, lora_b, scale), bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, lora_a, lora_b = ctx.saved_tensors
        needs_x, _, _, needs_a, needs_b, _ = ctx.needs_input_grad
        g = grad.reshape(-1, grad.shape[-1])  # (n, out)
        rows = x.reshape(-1, x.shape[-1])  # (n, in)
        grad_x = grad_a = grad_b = None
        if needs_x:
            grad_x = (g @ merge_lora(weight, lora_a, lora_b, ctx.scale)).view(x.shape)  # (..., in)
        if needs_a:
            # (in, n) @ (n, r), transposed: about 2x faster on CPU than (r, n) @ (n, in).
            grad_a = (rows.t() @ (g @ lora_b).mul_(ctx.scale)).t().contiguous()  # (r, in)
        if needs_b:
            grad_b = g.t() @ (rows @ lora_a.t()).mul_(ctx.scale)  # (out, n) @ (n, r) -> (out, r)
        return grad_x, None, None, grad_a, grad_b, None


def _dequantize_nf4_weight(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    key = prefix + "weight"
    if is_nf4(state_dict.get(key)):
        state_dict[key] = dequantize(state_dict[key])


def _requantize_assigned_weight(module: LoRALinear, incompatible_keys) -> None:
    if not is_nf4(module.weight):
        module.weight = to_nf4_parameter(module.weight)
