"""LoRA on stacked mixture-of-experts weights: one low-rank update per expert, in grouped products.

For a stacked weight W (E, out, in) the adapter holds A (E, rank, in) and B (E, out, rank); expert
e computes x·(W_e + (alpha/rank)·B_e·A_e)ᵀ, through the same grouped products as the base (the
rows sorted by expert), never a loop over tokens. Base weights keep their names (`gate_up_proj`,
`down_proj`) and are frozen; the adapters live under `experts.lora.<weight>.lora_{a,b}.weight`:

    layers.0.mlp.experts.lora.gate_up_proj.lora_a.weight   (E, rank, embed_dim)
    layers.0.mlp.experts.lora.gate_up_proj.lora_b.weight   (E, 2 * hidden_dim, rank)
    layers.0.mlp.experts.lora.down_proj.lora_a.weight      (E, rank, hidden_dim)
    layers.0.mlp.experts.lora.down_proj.lora_b.weight      (E, embed_dim, rank)

QLoRA (``quantize_base``): each stacked base weight is stored as NF4 over its 2-D view (E * out, in),
under the same name, and dequantized to (E, out, in) inside each grouped product, forward and
backward (`_NF4GroupedLinear` keeps only the 4-bit weight for backward, as torchao's `linear_nf4`
does for a dense layer): no dense copy of an expert weight outlives its product.

PEFT (0.17+) adapts such stacked weights with `target_parameters` (its `ParamWrapper`), on
transformers 5's fused `mlp.experts.gate_up_proj` / `down_proj`: `to_peft_experts` gives its keys
and tensor layout (lora_A (E * rank, in) expert-major; lora_B (out, rank * E) expert-minor).
"""

import math
import re
from collections.abc import Mapping

import torch
from torch import nn

from ftune.modules.moe_experts import GroupedExperts, Groups, grouped_matmul
from ftune.peft.nf4 import dequantize, is_nf4, to_nf4_parameter

#: The stacked weights of `GroupedExperts` that expert LoRA adapts.
EXPERT_WEIGHTS = ("gate_up_proj", "down_proj")


class _Stacked(nn.Module):
    """One stacked tensor under the name `weight` (so adapter keys end in `.lora_a.weight`)."""

    def __init__(self, *shape: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape, device=device, dtype=dtype))


class ExpertLoRA(nn.Module):
    """The per-expert A (E, rank, in) and B (E, out, rank) of one stacked weight (E, out, in)."""

    def __init__(self, weight: torch.Tensor, *, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        experts, out_features, in_features = weight.shape
        factory = {"device": weight.device, "dtype": weight.dtype}
        self.rank, self.alpha, self.scale = rank, float(alpha), float(alpha) / rank
        self.lora_a = _Stacked(experts, rank, in_features, **factory)
        self.lora_b = _Stacked(experts, out_features, rank, **factory)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        if not weight.is_meta:
            self.reset_adapter_parameters()

    def reset_adapter_parameters(self) -> None:
        """A like nn.Linear's default (uniform, bound 1/sqrt(in)) for every expert; B zero (no-op update)."""
        bound = 1 / math.sqrt(self.lora_a.weight.shape[-1])
        nn.init.uniform_(self.lora_a.weight, -bound, bound)
        nn.init.zeros_(self.lora_b.weight)


class _NF4GroupedLinear(torch.autograd.Function):
    """Rows of expert e times W_eᵀ for an NF4 stacked weight: dequantized in forward and again in backward.

    The weight is frozen (no gradient); backward needs only it, so nothing but the 4-bit weight is
    kept between the two passes.
    """

    @staticmethod
    def forward(ctx, x, weight, shape, offsets, backend):  # noqa: ANN001, PLR0913 - autograd.Function
        ctx.save_for_backward(offsets)
        ctx.weight, ctx.shape, ctx.backend = weight, shape, backend
        with torch.no_grad():
            return grouped_matmul(x, dequantize(weight).view(shape), offsets, backend)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        (offsets,) = ctx.saved_tensors
        dense = dequantize(ctx.weight).view(ctx.shape).transpose(1, 2)  # (E, in, out): rows times W_e
        with torch.no_grad():
            grad_x = grouped_matmul(grad.contiguous(), dense.contiguous(), offsets, ctx.backend)
        return grad_x, None, None, None, None


class LoRAGroupedExperts(GroupedExperts):
    """`GroupedExperts` with frozen stacked weights plus a per-expert LoRA update on some of them.

    Args:
        base: the experts to adapt; its Parameters are reused (no copy) and frozen.
        targets: which stacked weights get adapters, a subset of `EXPERT_WEIGHTS`.
        rank: LoRA rank, > 0. alpha: updates scale by alpha / rank. dropout: on the adapter input.
        quantize_base: store the stacked base weights as NF4 (QLoRA).
    """

    def __init__(  # noqa: PLR0913 - the adapter's settings
        self,
        base: GroupedExperts,
        *,
        targets: tuple[str, ...],
        rank: int,
        alpha: float,
        dropout: float = 0.0,
        quantize_base: bool = False,
    ) -> None:
        nn.Module.__init__(self)
        self.num_experts, self.embed_dim, self.hidden_dim = base.num_experts, base.embed_dim, base.hidden_dim
        self.backend = base.backend
        self.gate_up_proj, self.down_proj = base.gate_up_proj, base.down_proj
        for name in EXPERT_WEIGHTS:
            getattr(self, name).requires_grad_(False)
        self.lora = nn.ModuleDict(
            {
                name: ExpertLoRA(getattr(self, name), rank=rank, alpha=alpha, dropout=dropout)
                for name in targets
            }
        )
        #: (E, out, in) of each stacked weight: an NF4 one is stored as its (E * out, in) view.
        self.shapes = {name: tuple(getattr(self, name).shape) for name in EXPERT_WEIGHTS}
        if quantize_base:
            for name, (experts, out_features, in_features) in self.shapes.items():
                flat = getattr(self, name).detach().reshape(experts * out_features, in_features)
                setattr(self, name, to_nf4_parameter(flat, name=name))
        #: False while `ftune.peft.adapters_disabled` runs the frozen base alone.
        self.adapter_enabled = True

    def project(self, name: str, x: torch.Tensor, groups: Groups) -> torch.Tensor:
        """Base grouped product plus scale·(x·A_eᵀ)·B_eᵀ for each expert e's rows."""
        weight = getattr(self, name)
        if is_nf4(weight):
            out = _NF4GroupedLinear.apply(x, weight, self.shapes[name], groups.offsets, self.backend)
        else:
            out = super().project(name, x, groups)  # (N, out)
        if name not in self.lora or not self.adapter_enabled:
            return out
        lora = self.lora[name]
        low = grouped_matmul(lora.dropout(x), lora.lora_a.weight, groups.offsets, self.backend)  # (N, rank)
        return out + lora.scale * grouped_matmul(low, lora.lora_b.weight, groups.offsets, self.backend)

    @torch.no_grad()
    def merged_weight(self, name: str) -> torch.Tensor:
        """W + (alpha/rank)·B_e·A_e for every expert e: a new (E, out, in) tensor (NF4 dequantized)."""
        weight = dequantize(getattr(self, name)).view(self.shapes[name])
        if name not in self.lora:
            return weight.clone()
        lora = self.lora[name]
        return merge_expert_lora(weight, lora.lora_a.weight, lora.lora_b.weight, lora.scale)


def apply_expert_lora(
    model: nn.Module, *, rank: int, alpha: float, dropout: float = 0.0, quantize_base: bool = False
) -> list[str]:
    """Swap every `GroupedExperts` of `model` for a `LoRAGroupedExperts` adapting both stacked weights.

    Used by `ftune.peft.apply_lora` for the target `experts`; freezing the rest is left to it.

    Returns:
        The module paths swapped, e.g. ["layers.0.mlp.experts", ...].

    Raises:
        ValueError: the model has no stacked experts.
    """
    matches = [
        (f"{fqn}.{name}" if fqn else name, parent, name, child)
        for fqn, parent in model.named_modules()
        for name, child in parent.named_children()
        if type(child) is GroupedExperts
    ]
    if not matches:
        raise ValueError(
            f"apply_lora: target 'experts' matches no mixture-of-experts layer in {type(model).__name__}; "
            "only MoE models (e.g. qwen3_moe) have one. Remove 'experts' from peft.targets."
        )
    for _, parent, name, child in matches:
        layer = LoRAGroupedExperts(
            child,
            targets=EXPERT_WEIGHTS,
            rank=rank,
            alpha=alpha,
            dropout=dropout,
            quantize_base=quantize_base,
        )
        setattr(parent, name, layer.train(child.training))
    return [fqn for fqn, *_ in matches]


def expert_adapter_params(model: nn.Module) -> list[nn.Parameter]:
    """The A and B tensors of every expert adapter of `model`, in model order."""
    return [p for m in model.modules() if isinstance(m, LoRAGroupedExperts) for p in m.lora.parameters()]


def is_expert_adapter_key(key: str) -> bool:
    """True for ftune expert-adapter keys, `layers.{L}.mlp.experts.lora.<weight>.lora_{a,b}.weight`."""
    return ".experts.lora." in key


def is_peft_expert_key(key: str) -> bool:
    """True for PEFT's expert-adapter keys (`to_peft_experts`'s output)."""
    return _PEFT_EXPERTS.match(key) is not None


def expert_base_key(module: str) -> str | None:
    """The stacked weight an expert adapter adapts: `layers.0.mlp.experts.lora.gate_up_proj` ->
    `layers.0.mlp.experts.gate_up_proj`; None for a module that is not an expert adapter."""
    head, sep, weight = module.rpartition(".experts.lora.")
    return f"{head}.experts.{weight}" if sep and weight in EXPERT_WEIGHTS else None


def merge_expert_lora(
    weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float
) -> torch.Tensor:
    """``W_e + scale·B_e·A_e`` for every expert e, as a new (E, out, in) tensor in W's dtype.

    Args:
        weight: stacked base weight (E, out, in). lora_a: (E, rank, in). lora_b: (E, out, rank).
        scale: alpha / rank.
    """
    return torch.baddbmm(weight, lora_b.to(weight.dtype), lora_a.to(weight.dtype), alpha=scale)


def num_experts_of(base_shapes: Mapping[str, torch.Size] | None) -> int:
    """The experts per layer of a model, read from its stacked weights' shapes (ftune names).

    Raises:
        ValueError: no shapes, or none of a stacked expert weight.
    """
    for key, shape in (base_shapes or {}).items():
        if key.endswith(".experts.gate_up_proj"):
            return int(shape[0])
    raise ValueError(
        "The adapter has expert LoRA tensors (PEFT target_parameters on mlp.experts), whose files fold "
        "the experts into one dimension: pass base_shapes (the base model's weight shapes) to read "
        "them, from a mixture-of-experts base model."
    )


def to_peft_experts(adapter: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ftune expert-adapter keys -> PEFT's (a `ParamWrapper` per stacked weight of transformers 5).

    PEFT nests one wrapper per targeted parameter, the first of `target_parameters` innermost:
    with ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"] gate_up's adapter is saved under
    `mlp.experts.base_layer.lora_A.weight` and down's under `mlp.experts.lora_A.weight`.

    Args:
        adapter: `layers.{L}.mlp.experts.lora.<weight>.lora_{a,b}.weight` tensors.

    Returns:
        `base_model.model.model.layers.{L}.mlp.experts[.base_layer].lora_{A,B}.weight` tensors.

    Raises:
        KeyError: a key that is not an expert-adapter key.
    """
    out = {}
    for key, tensor in adapter.items():
        module, sep, rest = key.partition(".mlp.experts.lora.")
        weight, _, suffix = rest.partition(".")
        if not sep or weight not in EXPERT_WEIGHTS or suffix not in ("lora_a.weight", "lora_b.weight"):
            raise KeyError(
                f"{key!r} is not an expert-adapter key; expected layers.<L>.mlp.experts.lora."
                f"<{'|'.join(EXPERT_WEIGHTS)}>.lora_a.weight or .lora_b.weight."
            )
        wrapper = "base_layer." if weight == "gate_up_proj" else ""
        prefix = f"base_model.model.model.{module}.mlp.experts.{wrapper}"
        if suffix == "lora_a.weight":
            out[prefix + "lora_A.weight"] = tensor.reshape(-1, tensor.shape[-1])  # (E * rank, in)
        else:
            experts, out_features, rank = tensor.shape
            out[prefix + "lora_B.weight"] = tensor.permute(1, 2, 0).reshape(out_features, rank * experts)
    return out


def expert_adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The expert adapters' tensors (detached) under ftune keys, `layers.{L}.mlp.experts.lora.*`."""
    return {k: v.detach() for k, v in model.state_dict().items() if ".experts.lora." in k}


_PEFT_EXPERTS = re.compile(
    r"^base_model\.model\.model\.(layers\.\d+)\.mlp\.experts\.(base_layer\.)?lora_([AB])\.weight$"
)


def from_peft_experts(peft_sd: dict[str, torch.Tensor], *, num_experts: int) -> dict[str, torch.Tensor]:
    """The inverse of `to_peft_experts`: PEFT's expert-adapter tensors -> ftune keys and layouts.

    Args:
        peft_sd: `base_model.model.model.layers.{L}.mlp.experts[.base_layer].lora_{A,B}.weight` tensors.
        num_experts: experts per layer (PEFT's tensors fold them into one dimension).

    Raises:
        KeyError: a key that is not a PEFT expert-adapter key.
    """
    out = {}
    for key, tensor in peft_sd.items():
        match = _PEFT_EXPERTS.match(key)
        if match is None:
            raise KeyError(
                f"{key!r} is not a PEFT expert-adapter key; expected base_model.model.model.layers.<L>.mlp."
                "experts[.base_layer].lora_A.weight or lora_B.weight (target_parameters on the experts)."
            )
        layer, inner, which = match.groups()
        prefix = f"{layer}.mlp.experts.lora.{'gate_up_proj' if inner else 'down_proj'}."
        if which == "A":
            out[prefix + "lora_a.weight"] = tensor.reshape(num_experts, -1, tensor.shape[-1])  # (E, r, in)
        else:
            out_features = tensor.shape[0]
            out[prefix + "lora_b.weight"] = tensor.reshape(out_features, -1, num_experts).permute(2, 0, 1)
    return out
