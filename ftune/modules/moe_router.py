"""Top-k token routing for mixture-of-experts layers, and the load-balancing loss over its logits."""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class Routing(NamedTuple):
    """What a router decides for T tokens.

    Attributes:
        logits: (T, num_experts) router logits, in the input's dtype (what the balancing loss reads).
        weights: (T, top_k) mixing weights of the chosen experts, in the input's dtype (fp32 with
            `fp32_weights`).
        indices: (T, top_k) long, the chosen experts, most probable first.
    """

    logits: torch.Tensor
    weights: torch.Tensor
    indices: torch.Tensor


class TopKRouter(nn.Module):
    """Linear gate, softmax over experts in fp32, the top-k of those probabilities.

    With `norm_topk_prob` the k chosen probabilities are rescaled to sum to 1 (Qwen3-MoE's
    published models, Mixtral); without, they stay the raw softmax values (Qwen1.5/2-MoE).
    The weight is named `weight` and shaped like HF's `mlp.gate.weight` (num_experts, embed_dim).

    Args:
        embed_dim: token width.
        num_experts: experts to choose from.
        top_k: experts per token, 1 <= top_k <= num_experts.
        norm_topk_prob: renormalise the chosen probabilities to sum to 1.
        fp32_weights: hand out the mixing weights in fp32 rather than the input's dtype, so that the
            experts' outputs are weighted and summed in fp32 before rounding (Mixtral, as transformers
            computes it); False rounds them first (Qwen3-MoE). The same numbers in fp32.

    Raises:
        ValueError: if top_k is out of range.
    """

    def __init__(
        self,
        *,
        embed_dim: int,
        num_experts: int,
        top_k: int,
        norm_topk_prob: bool,
        fp32_weights: bool = False,
    ) -> None:
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(
                f"TopKRouter: top_k must be in [1, num_experts={num_experts}], got {top_k}; set "
                "num_experts_per_tok (HF) / top_k (ftune builder) to at most the number of experts."
            )
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.fp32_weights = fp32_weights
        self.weight = nn.Parameter(torch.empty(num_experts, embed_dim))
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> Routing:
        """x (T, embed_dim) -> Routing of the T tokens."""
        logits = F.linear(x, self.weight)  # (T, E)
        # fp32 softmax whatever the compute dtype: top-k on bf16 probabilities ties too often.
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)  # (T, E)
        top, indices = torch.topk(probs, self.top_k, dim=-1)  # (T, k) each
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return Routing(logits, top if self.fp32_weights else top.to(logits.dtype), indices)

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, top_k={self.top_k}, norm_topk_prob={self.norm_topk_prob}, "
            f"fp32_weights={self.fp32_weights}"
        )


def load_balancing_loss(
    router_logits: list[torch.Tensor], *, num_experts: int, top_k: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Switch Transformer's auxiliary loss over every MoE layer's router logits (Fedus et al., 2021).

    num_experts * sum_e f_e * P_e, where f_e is the share of (token, choice) assignments that went
    to expert e and P_e the mean router probability of e, both over all layers' tokens (as
    transformers' `load_balancing_loss_func` computes it: one f and one P pooled over layers, not
    a mean of per-layer losses). Perfectly uniform routing (f_e = top_k / num_experts, P_e =
    1 / num_experts) gives top_k; the more the router favours a few experts, the larger it is.

    Args:
        router_logits: one (T, num_experts) tensor per MoE layer, the same T tokens in each.
        num_experts: experts per layer.
        top_k: experts chosen per token.
        mask: (T,) or (b, s) with b * s = T, nonzero = count this token (e.g. not padding); None = all.

    Returns:
        A scalar fp32 tensor, differentiable through the router probabilities.

    Raises:
        ValueError: no logits, or a mask that does not fit them.
    """
    if not router_logits:
        raise ValueError(
            "load_balancing_loss: no router logits; run a forward of an MoE model first (the loss reads "
            "the logits each MoE layer keeps from its last forward)."
        )
    tokens = router_logits[0].shape[0]
    weight = None
    if mask is not None:
        if mask.numel() != tokens:
            raise ValueError(
                f"load_balancing_loss: mask has {mask.numel()} entries (shape {tuple(mask.shape)}) but the "
                f"last forward routed {tokens} tokens; pass the (batch, seq_len) mask of that forward."
            )
        weight = mask.reshape(-1).to(device=router_logits[0].device, dtype=torch.float32)  # (T,)
    assigned = torch.zeros(num_experts, dtype=torch.float32, device=router_logits[0].device)
    prob_sum = torch.zeros_like(assigned)
    for logits in router_logits:
        probs = F.softmax(logits.float(), dim=-1)  # (T, E)
        chosen = torch.topk(probs, top_k, dim=-1).indices  # (T, k)
        counts = F.one_hot(chosen, num_experts).float().sum(dim=1)  # (T, E): 1 where chosen
        if weight is not None:
            counts, probs = counts * weight[:, None], probs * weight[:, None]
        assigned = assigned + counts.sum(dim=0)
        prob_sum = prob_sum + probs.sum(dim=0)
    rows = len(router_logits) * (tokens if weight is None else weight.sum())
    return (assigned / rows * (prob_sum / rows)).sum() * num_experts
