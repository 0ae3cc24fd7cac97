"""LoRA: a frozen linear layer plus a trainable low-rank update (Hu et al., 2021)."""

import math

import torch
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

    Raises:
        ValueError: if rank or dropout are out of range.
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
    def quantized(self) -> bool:
        """True when the base weight is stored as NF4 (QLoRA)."""
        return is_nf4(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x [..., in_features]. Returns: [..., out_features]."""
        base = frozen_linear(x, self.weight, self.bias)
        return base + self.scale * self.lora_b(self.lora_a(self.dropout(x)))

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """W + (alpha/rank)·B·A as a new dense tensor [out_features, in_features] in the base dtype."""
        weight = dequantize(self.weight)
        delta = self.lora_b.weight @ self.lora_a.weight
        return weight + self.scale * delta.to(weight.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
            f"alpha={self.alpha:g}, dropout={self.dropout_p:g}, bias={self.bias is not None}, "
            f"quantized={self.quantized}"
        )


def _dequantize_nf4_weight(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    key = prefix + "weight"
    if is_nf4(state_dict.get(key)):
        state_dict[key] = dequantize(state_dict[key])


def _requantize_assigned_weight(module: LoRALinear, incompatible_keys) -> None:
    if not is_nf4(module.weight):
        module.weight = to_nf4_parameter(module.weight)
