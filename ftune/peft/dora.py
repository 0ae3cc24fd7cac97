"""DoRA: weight-decomposed low-rank adaptation (Liu et al., 2024), with PEFT's numerics."""

import logging

import torch
from torch import nn

from ftune.peft.lora import LoRALinear
from ftune.peft.nf4 import frozen_linear

log = logging.getLogger(__name__)


class DoRALinear(LoRALinear):
    """W' = m · (W + s·B·A) / ‖W + s·B·A‖, with the norm taken per output row; y = x·W'ᵀ + b.

    `magnitude` (m, shape [out_features]) is trainable and starts at the row norms of W, so right
    after the swap (B = 0) the layer computes what the Linear did. As in the DoRA paper (§4.3) and in
    PEFT, the norm is treated as a constant (detached): it follows B·A but receives no gradient. The
    forward is computed the way PEFT computes it, without forming W' (s = alpha/rank, f = m/‖·‖):

        y = x·Wᵀ + b + (f - 1)·(x̃·Wᵀ) + f·s·B(A(x̃)),   x̃ = dropout(x)

    which, without dropout (or in eval mode), is f·(x·Wᵀ + s·B(A(x))) + b with a single base matmul.

    The magnitude must describe the weight actually loaded: when a state dict sets this layer's base
    `weight` but carries no `magnitude` (a base checkpoint loaded into a fresh DoRA model), the
    magnitude is re-initialised from the loaded weight after the load.

    Args: as LoRALinear.
    """

    def __init__(
        self, base: nn.Linear, *, rank: int, alpha: float, dropout: float = 0.0, quantize_base: bool = False
    ) -> None:
        super().__init__(base, rank=rank, alpha=alpha, dropout=dropout, quantize_base=quantize_base)
        self.magnitude = nn.Parameter(self.weight_norm())
        self._reset_magnitude_after_load = False
        self.register_load_state_dict_post_hook(_reset_magnitude_if_absent)

    @torch.no_grad()
    def weight_norm(self) -> torch.Tensor:
        """‖W + s·B·A‖ per output row, shape [out_features], detached (no gradient)."""
        return torch.linalg.vector_norm(super().merged_weight(), dim=1)

    @torch.no_grad()
    def reset_magnitude(self) -> None:
        """Set the magnitude to the current row norms of W + s·B·A (so that W' equals it)."""
        norm = self.weight_norm()
        if self.magnitude.is_meta:
            self.magnitude = nn.Parameter(norm, requires_grad=self.magnitude.requires_grad)
        else:
            self.magnitude.copy_(norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x [..., in_features]. Returns: [..., out_features]."""
        if not self.adapter_enabled:
            return frozen_linear(x, self.weight, self.bias)
        factor = self.magnitude / self.weight_norm().to(self.magnitude.dtype)  # [out]; grad to m only
        if self.training and self.dropout_p > 0:
            # Dropout feeds the adapter a different input than the base path, so the base matmul is
            # needed twice (on x and on dropout(x)), exactly as in PEFT.
            dropped = self.dropout(x)
            base = frozen_linear(x, self.weight, self.bias)
            return (
                base
                + (factor - 1) * frozen_linear(dropped, self.weight, None)
                + factor * self.scale * self.lora_b(self.lora_a(dropped))
            )
        out = factor * (frozen_linear(x, self.weight, None) + self.scale * self.lora_b(self.lora_a(x)))
        return out if self.bias is None else out + self.bias

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        """m · (W + s·B·A) / ‖W + s·B·A‖ as a new dense tensor [out_features, in_features]."""
        return rescale_rows(super().merged_weight(), self.magnitude)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        # Children (lora_a / lora_b) load after this call, so only note here what the state dict holds
        # and reset in the post hook, once the whole layer is loaded.
        self._reset_magnitude_after_load = (
            prefix + "weight" in state_dict and prefix + "magnitude" not in state_dict
        )
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)


def rescale_rows(combined: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """``m · V / ‖V‖`` with the norm per output row: DoRA's merge of ``V = W + s·B·A`` [out, in]."""
    norm = torch.linalg.vector_norm(combined, dim=1)
    return combined * (magnitude.to(combined.dtype) / norm).unsqueeze(1)


def _reset_magnitude_if_absent(module: DoRALinear, incompatible_keys) -> None:
    if module._reset_magnitude_after_load:
        module._reset_magnitude_after_load = False
        if not (module.lora_a.weight.is_meta or module.lora_b.weight.is_meta or module.weight.is_meta):
            log.debug("DoRA magnitude re-initialised from the loaded base weight.")
            module.reset_magnitude()
