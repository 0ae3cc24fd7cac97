"""Tanh soft-capping of logits (Gemma 2): values pass almost unchanged near zero, never exceed ±cap.

Gemma 2 caps two kinds of logits: the attention scores of every layer (cap 50, before the mask and
the softmax) and the model's output logits (cap 30). SDPA has no hook between q·kᵀ and the softmax,
so capped attention is computed here with explicit products, in blocks of queries so that one
(b, h, block, s_kv) score tensor exists at a time rather than the whole (b, h, s, s_kv).
"""

import torch

# Query rows per block of the explicit attention: the score buffer is (b, h, 128, s_kv).
QUERY_BLOCK = 128


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(x / cap), elementwise; same shape and dtype."""
    return torch.tanh(x / cap) * cap


def softcapped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, cap: float
) -> torch.Tensor:
    """softmax(softcap(q·kᵀ / sqrt(d)) masked) · v, the scores upcast to fp32 for the softmax.

    Same contract as `F.scaled_dot_product_attention` with its default scale and `enable_gqa`:
    any other scale is already folded into `q` by the caller.

    Args:
        q: queries (b, h, s, d).
        k: keys (b, h_kv, s_kv, d); h must be a multiple of h_kv (grouped-query attention).
        v: values (b, h_kv, s_kv, d).
        mask: bool (b or 1, 1, s, s_kv), True = may attend; None = causal (s_kv == s).
        cap: the soft cap on the scaled scores.

    Returns:
        (b, h, s, d) in the dtype of `q`.
    """
    b, h, s, d = q.shape
    groups = h // k.shape[1]
    # (b, h_kv, groups, s, d): query heads grouped under their key/value head, no repeated copies of k, v.
    qg = q.view(b, k.shape[1], groups, s, d)
    kt, vg = k[:, :, None].transpose(-1, -2), v[:, :, None]  # (b, h_kv, 1, d, s_kv), (b, h_kv, 1, s_kv, d)
    if mask is None:
        mask = torch.ones(s, k.shape[2], dtype=torch.bool, device=q.device).tril()[None, None]
    mask = mask[:, :, None]  # (b or 1, 1, 1, s, s_kv): broadcast over kv heads and groups
    outs = []
    for q0 in range(0, s, QUERY_BLOCK):
        q1 = min(q0 + QUERY_BLOCK, s)
        scores = softcap((qg[:, :, :, q0:q1] @ kt) * d**-0.5, cap)  # (b, h_kv, groups, block, s_kv)
        scores = scores.masked_fill(~mask[..., q0:q1, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        outs.append(probs @ vg)  # (b, h_kv, groups, block, d)
    return torch.cat(outs, dim=3).view(b, h, s, d)
