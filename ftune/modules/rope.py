"""Rotary position embedding (Su et al., 2021) in the Hugging Face "rotate_half" layout.

Each head's feature vector is split in two halves (x1, x2), and the pair (x1[i], x2[i]) is
rotated by the angle pos * inv_freq[i]. Meta's reference code rotates adjacent pairs
(x[2i], x[2i+1]) instead; the Meta converters permute the rows of q/k projections, so that
inside ftune there is one layout only and HF conversion is a pure rename.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama-3.1 frequency scaling ("rope_type": "llama3" in HF config.json).

    Wavelengths longer than `original_max_seq_len / low_freq_factor` are divided by `factor`,
    wavelengths shorter than `original_max_seq_len / high_freq_factor` are kept, and the band
    in between is interpolated smoothly.

    Args:
        factor: frequency divisor for the low-frequency band (8 for Llama 3.1, 32 for Llama 3.2).
        low_freq_factor: defines the low-frequency edge of the band.
        high_freq_factor: defines the high-frequency edge of the band.
        original_max_seq_len: context length of the unscaled model (HF `original_max_position_embeddings`).
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_seq_len: int = 8192

    def __post_init__(self) -> None:
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"Llama3RopeScaling: high_freq_factor ({self.high_freq_factor}) must be greater than "
                f"low_freq_factor ({self.low_freq_factor}); Llama 3.1 uses 4.0 and 1.0."
            )

    def apply(self, inv_freq: torch.Tensor) -> torch.Tensor:
        """Return the scaled inverse frequencies (same shape as `inv_freq`)."""
        low_freq_wavelen = self.original_max_seq_len / self.low_freq_factor
        high_freq_wavelen = self.original_max_seq_len / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / self.factor, inv_freq)
        smooth = (self.original_max_seq_len / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
        return torch.where(is_medium, smoothed, scaled)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotate query/key heads by their positions.

    The inverse frequencies are a plain tensor attribute, not a buffer: they stay float32 when
    the model is cast to bf16, never enter the state dict, and survive building the model on the
    meta device (they are always computed on CPU and moved to the input's device on first use).
    cos/sin are recomputed from `input_pos` on every call, which costs a few element-wise ops and
    lets positions restart inside a packed sequence; no max-length table is needed.

    Args:
        head_dim: per-head feature size (even).
        base: the RoPE theta (HF `rope_theta`).
        scaling: optional Llama-3.1 frequency scaling.
    """

    def __init__(
        self, head_dim: int, base: float = 10_000.0, scaling: Llama3RopeScaling | None = None
    ) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim must be even, got {head_dim}.")
        self.head_dim = head_dim
        self.base = base
        self.scaling = scaling
        # float32 on CPU on purpose, whatever the default device/dtype at build time (see class doc).
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
        inv_freq = 1.0 / (base**exponents)
        self.inv_freq = scaling.apply(inv_freq) if scaling is not None else inv_freq

    def cos_sin(self, input_pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables for `input_pos` (b, s) -> two tensors of shape (b, 1, s, head_dim) in `dtype`."""
        if self.inv_freq.device != input_pos.device:
            self.inv_freq = self.inv_freq.to(input_pos.device)
        # Angles in float32 even under bf16 autocast: positions up to 128k need the mantissa.
        with torch.autocast(device_type=input_pos.device.type, enabled=False):
            freqs = input_pos[..., None].float() * self.inv_freq  # (b, s, head_dim / 2)
            angles = torch.cat((freqs, freqs), dim=-1)  # (b, s, head_dim)
            cos, sin = angles.cos(), angles.sin()
        return cos.to(dtype)[:, None], sin.to(dtype)[:, None]  # (b, 1, s, head_dim)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, input_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys by their positions.

        Args:
            q: queries (b, h, s, head_dim).
            k: keys (b, h_kv, s, head_dim).
            input_pos: positions (b, s) or (1, s), long.

        Returns:
            The rotated (q, k), same shapes and dtypes.
        """
        cos, sin = self.cos_sin(input_pos, q.dtype)
        if torch.compiler.is_compiling():  # one expression for the compiler to fuse
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return _Rotate.apply(q, cos, sin), _Rotate.apply(k, cos, sin)
        return rotate(q, cos, sin), rotate(k, cos, sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, scaling={self.scaling}"


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin``, bit for bit, in fewer passes over ``x``.

    The expression runs a negation, a concatenation, two products and a sum, each into a new
    tensor of x's size. Here the first product is the output and each half of it takes the other
    half's product in place: the same roundings (a product, then one sum), about half the memory
    traffic.
    """
    half = x.shape[-1] // 2
    out = x * cos
    out[..., :half].sub_(x[..., half:] * sin[..., :half])
    out[..., half:].add_(x[..., :half] * sin[..., half:])
    return out


class _Rotate(torch.autograd.Function):
    """`rotate` whose backward is the transposed rotation, saving only cos and sin.

    The gradient of ``x * cos + rotate_half(x) * sin`` is ``g * cos`` plus ``g * sin`` rotated the
    other way: ``(g2 * sin2, -g1 * sin1)`` added to the halves. Computed as in `rotate`, it equals
    autograd's gradient of the expression bit for bit (tested).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return rotate(x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        half = grad.shape[-1] // 2
        grad_x = grad * cos
        grad_x[..., :half].add_(grad[..., half:] * sin[..., half:])
        grad_x[..., half:].sub_(grad[..., :half] * sin[..., :half])
        return grad_x, None, None
