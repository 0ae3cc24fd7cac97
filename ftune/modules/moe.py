"""The mixture-of-experts feed-forward block, and a decoder that exposes its load-balancing loss.

    logits = model(tokens)                      # every MoE block keeps its router logits
    loss = ce + model.aux_loss_coef * model.aux_loss()

The auxiliary loss is not added inside the model: a recipe adds it (scaled by its config key
`router_aux_loss_coef`, the builder argument `aux_loss_coef`) and logs it as a term of its own.
"""

import torch
from torch import nn

from ftune.modules.moe_experts import GroupedExperts
from ftune.modules.moe_router import TopKRouter, load_balancing_loss
from ftune.modules.transformer import TransformerDecoder


class MoEFeedForward(nn.Module):
    """Route each token to its top-k experts and mix their outputs (HF `SparseMoeBlock`).

    Sub-modules take HF's names: `gate` (the router; `mlp.gate.weight`) and `experts`. The router
    logits of the last forward stay in `router_logits` (T, num_experts), with their autograd graph,
    for the load-balancing loss; the next forward replaces them.

    Args:
        gate: the router.
        experts: the stacked experts.
        shared_expert: a feed-forward every token also goes through, added unweighted (families
            with shared experts); None for Qwen3-MoE.
        jitter_noise: in training only, multiply the block's input by noise drawn uniformly from
            [1 - jitter_noise, 1 + jitter_noise] before routing (Mixtral's `router_jitter_noise`, as
            transformers applies it: router and experts see the same jittered input); 0 = off.

    Raises:
        ValueError: jitter_noise outside [0, 1).
    """

    def __init__(
        self,
        *,
        gate: TopKRouter,
        experts: GroupedExperts,
        shared_expert: nn.Module | None = None,
        jitter_noise: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= jitter_noise < 1.0:
            raise ValueError(
                f"MoEFeedForward: jitter_noise must be in [0, 1), got {jitter_noise}; set "
                "router_jitter_noise (HF) / jitter_noise (ftune builder) to 0 to turn it off."
            )
        self.gate = gate
        self.experts = experts
        self.shared_expert = shared_expert
        self.jitter_noise = jitter_noise
        self.router_logits: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., embed_dim) -> (..., embed_dim)."""
        if self.training and self.jitter_noise > 0:
            noise = torch.empty_like(x).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
            x = x * noise
        flat = x.reshape(-1, x.shape[-1])  # (T, embed_dim)
        routing = self.gate(flat)
        self.router_logits = routing.logits  # (T, E)
        out = self.experts(flat, routing.indices, routing.weights)  # (T, embed_dim)
        if self.shared_expert is not None:
            out = out + self.shared_expert(flat)
        return out.view(x.shape)


class MoETransformerDecoder(TransformerDecoder):
    """A `TransformerDecoder` whose feed-forwards are (some or all) `MoEFeedForward` blocks.

    Computes what its parent computes; adds `aux_loss()` over the blocks' last router logits and
    carries the family's coefficient for it.

    Args:
        aux_loss_coef: the weight a recipe gives `aux_loss()` (HF `router_aux_loss_coef`).
        **kwargs: as for `TransformerDecoder`.
    """

    def __init__(self, *, aux_loss_coef: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.aux_loss_coef = aux_loss_coef

    def moe_blocks(self) -> list[MoEFeedForward]:
        """The MoE feed-forwards, in layer order."""
        return [m for m in self.modules() if isinstance(m, MoEFeedForward)]

    def router_logits(self) -> list[torch.Tensor]:
        """Each MoE block's (T, num_experts) router logits from the last forward."""
        blocks = self.moe_blocks()
        if any(b.router_logits is None for b in blocks):
            raise ValueError("MoETransformerDecoder: no router logits yet; call the model on a batch first.")
        return [b.router_logits for b in blocks]

    def aux_loss(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The load-balancing loss of the last forward (unscaled; multiply by `aux_loss_coef`).

        Args:
            mask: (b, s), nonzero = a token to count (e.g. not padding); None counts every token,
                as transformers does without an attention mask.

        Returns:
            Scalar fp32 tensor; top_k when routing is perfectly balanced.

        Raises:
            ValueError: no forward yet, or a mask that does not fit the last forward.
        """
        gate = self.moe_blocks()[0].gate
        return load_balancing_loss(
            self.router_logits(), num_experts=gate.num_experts, top_k=gate.top_k, mask=mask
        )
