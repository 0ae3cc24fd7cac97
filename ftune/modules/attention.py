"""Grouped-query self-attention (Ainslie et al., 2023) on `F.scaled_dot_product_attention`."""

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.context_exchange import gather_context, global_causal_mask
from ftune.modules.cpu_attention import CPU_ATTENTION_FROM, cpu_attention
from ftune.modules.kv_cache import KVCache
from ftune.modules.rope import RotaryEmbedding
from ftune.modules.softcap import softcapped_attention


class GroupedQueryAttention(nn.Module):
    """Multi-head attention where groups of query heads share one key/value head.

    The projections are passed in (usually `nn.Linear`) and kept under Hugging Face's names,
    so LoRA and quantization swaps find them by attribute name, and HF conversion is a rename.
    num_kv_heads == num_heads is plain multi-head attention, num_kv_heads == 1 is multi-query.

    Args:
        q_proj: embed_dim -> num_heads * head_dim (may have a bias, as in Qwen2).
        k_proj: embed_dim -> num_kv_heads * head_dim.
        v_proj: embed_dim -> num_kv_heads * head_dim.
        o_proj: num_heads * head_dim -> embed_dim.
        num_heads: query heads.
        num_kv_heads: key/value heads; must divide num_heads.
        head_dim: per-head feature size.
        rope: rotary embedding applied to queries and keys (may be shared by all layers).
        sliding_window: attend only to the last `sliding_window` positions, the query's own
            included (Mistral, Gemma 3's local layers); None = the whole causal context.
        q_norm: norm over head_dim applied to each query head before RoPE (Qwen3, Gemma 3), or None.
        k_norm: the same for key heads; given together with `q_norm`.
        softmax_scale: the factor on q·k before the softmax; None = head_dim ** -0.5. Gemma 3 uses
            query_pre_attn_scalar ** -0.5.
        logit_softcap: cap the scaled scores at ±cap with tanh before the mask and softmax (Gemma 2's
            attn_logit_softcapping); None = no cap (SDPA). Capped attention runs `softcapped_attention`.
    """

    def __init__(
        self,
        *,
        q_proj: nn.Module,
        k_proj: nn.Module,
        v_proj: nn.Module,
        o_proj: nn.Module,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        rope: RotaryEmbedding,
        sliding_window: int | None = None,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        softmax_scale: float | None = None,
        logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(
                f"GroupedQueryAttention: num_heads ({num_heads}) must be a multiple of "
                f"num_kv_heads ({num_kv_heads})."
            )
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope = rope
        self.sliding_window = sliding_window
        if (q_norm is None) != (k_norm is None):
            raise ValueError("GroupedQueryAttention: give both q_norm and k_norm, or neither.")
        self.q_norm, self.k_norm = q_norm, k_norm
        # SDPA (and the CPU block path) scale by head_dim ** -0.5; another scale is folded into q
        # once, which keeps every attention path unchanged. 1.0 (Gemma 3 up to 12B) skips the multiply.
        self.q_multiplier = 1.0 if softmax_scale is None else softmax_scale * head_dim**0.5
        self.logit_softcap = logit_softcap
        self.kv_cache: KVCache | None = None
        # Context parallel (`ftune.training.features.context_parallel`): the ranks holding the other
        # slices of each sequence, whose keys and values this layer gathers; None = the whole sequence here.
        self.context_group: torch.distributed.ProcessGroup | None = None

    def setup_cache(
        self, batch_size: int, max_seq_len: int, dtype: torch.dtype, device: torch.device | str | None
    ) -> None:
        """Allocate a KV cache for incremental decoding (replaces any existing one)."""
        self.kv_cache = KVCache(batch_size, max_seq_len, self.num_kv_heads, self.head_dim, dtype, device)

    def forward(
        self, x: torch.Tensor, *, input_pos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Attend over the sequence (and, with a cache, over everything cached so far).

        Args:
            x: input (b, s, embed_dim).
            input_pos: positions (b, s) or (1, s), long; used by RoPE and to place cache writes.
            mask: bool (b, s, s_kv), True = may attend. None = causal. With a cache, s_kv is the
                cache length and None means "attend to every cached position <= my position".

        Returns:
            (b, s, embed_dim).
        """
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim)  # (b, s, h, d)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim)  # (b, s, h_kv, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # per head, over d
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (b, h, s, d), (b, h_kv, s, d)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (b, h_kv, s, d)
        q, k = self.rope(q, k, input_pos)
        if self.q_multiplier != 1.0:
            q = q * self.q_multiplier

        if self.context_group is not None:  # this slice's queries over every slice's keys
            k, v, key_pos = gather_context(k, v, input_pos, self.context_group)  # (b, h_kv, s * cp, d)
            mask = global_causal_mask(input_pos, key_pos, self.sliding_window, mask)  # (b or 1, s, s * cp)
        elif self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)  # (b, h_kv, max_seq_len, d)
            cache_pos = torch.arange(k.shape[2], device=x.device)
            if mask is None:
                mask = cache_pos[None, None, :] <= input_pos[:, :, None]  # (b or 1, s, max_seq_len)
            if self.sliding_window is not None and k.shape[2] > self.sliding_window:
                mask = mask & (input_pos[:, :, None] - cache_pos[None, None, :] < self.sliding_window)
        elif self.sliding_window is not None and s > self.sliding_window:
            # Positions, not indices: packed documents restart theirs, and never see each other anyway.
            near = input_pos[:, :, None] - input_pos[:, None, :] < self.sliding_window  # (b or 1, s, s)
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            mask = (causal if mask is None else mask) & near
        if self.logit_softcap is not None:  # no SDPA kernel caps the scores: explicit products
            attn_mask = mask[:, None] if mask is not None else None  # (b, 1, s, s_kv)
            out = softcapped_attention(q, k, v, attn_mask, cap=self.logit_softcap)
            return self.o_proj(out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim))
        if self.kv_cache is None and x.device.type == "cpu" and s == k.shape[2] >= CPU_ATTENTION_FROM:
            # CPU kernels compute every (query, key) pair: skip the blocks the mask excludes.
            return cpu_attention(q, k, v, mask, gqa=self.num_kv_heads != self.num_heads, o_proj=self.o_proj)
        # No mask left means plain causal (with a cache there always is one): is_causal lets SDPA pick
        # the flash / memory-efficient kernels with no mask tensor.
        attn_mask = mask[:, None] if mask is not None else None  # (b, 1, s, s_kv): broadcast over heads
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=mask is None,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )  # (b, h, s, d)
        out = out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)  # (b, s, h * d)
        return self.o_proj(out)
