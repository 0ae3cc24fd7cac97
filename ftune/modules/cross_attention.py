"""Cross-attention from text to image features (Llama 3.2 Vision), with its cache of image keys/values.

Queries come from the text, keys and values from the projected image features; there is no RoPE
(image features carry their own positions) and each head's queries and keys pass an RMSNorm (HF
`MllamaTextCrossAttention`). During decoding the images do not change, so their keys and values are
computed once, at the prefill, and every later step reads them from `ImageKVCache`.
"""

import torch
import torch.nn.functional as F
from torch import nn


class ImageKVCache(nn.Module):
    """The image keys and values of one cross-attention layer, written once per prompt.

    Args:
        batch_size: sequences decoded together.
        max_seq_len: the text cache's length (read by the decoder's checks; the image keys have their
            own length, that of the images' features).
    """

    def __init__(self, batch_size: int, max_seq_len: int) -> None:
        super().__init__()
        self.batch_size, self.max_seq_len = batch_size, max_seq_len
        self.k: torch.Tensor | None = None  # (b, h_kv, image tokens, d)
        self.v: torch.Tensor | None = None

    @property
    def filled(self) -> bool:
        """True once a prefill with images has written the keys and values."""
        return self.k is not None

    def reset(self) -> None:
        """Forget the images (a new prompt)."""
        self.k = self.v = None

    def store(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep the keys and values of this prompt's images.

        Raises:
            ValueError: if the batch does not match the cache.
        """
        if k.shape[0] != self.batch_size:
            raise ValueError(
                f"ImageKVCache.store: batch size {k.shape[0]} does not match the cache's {self.batch_size}; "
                f"call model.setup_caches(batch_size={k.shape[0]}, ...) first."
            )
        self.k, self.v = k, v

    def repeat_rows(self, batch_size: int) -> None:
        """As `KVCache.repeat_rows`: each row repeated in place to `batch_size` rows.

        Raises:
            ValueError: if `batch_size` is not a multiple of the cache's rows.
        """
        if batch_size % self.batch_size:
            raise ValueError(
                f"ImageKVCache.repeat_rows: the cache holds {self.batch_size} rows, which do not repeat to "
                f"{batch_size}; give a multiple of {self.batch_size}."
            )
        if self.k is not None:
            times = batch_size // self.batch_size
            self.k = self.k.repeat_interleave(times, dim=0)
            self.v = self.v.repeat_interleave(times, dim=0)
        self.batch_size = batch_size

    def keep_rows(self, rows: torch.Tensor) -> None:
        """As `KVCache.keep_rows`: keep only the rows `rows`, in their new order."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)
        self.batch_size = int(rows.numel())


class CrossAttention(nn.Module):
    """Grouped-query attention of text queries over image keys/values, q/k normed per head, no RoPE.

    Args:
        q_proj: embed_dim -> num_heads * head_dim.
        k_proj: embed_dim -> num_kv_heads * head_dim (reads the projected image features).
        v_proj: embed_dim -> num_kv_heads * head_dim.
        o_proj: num_heads * head_dim -> embed_dim.
        q_norm: RMSNorm over head_dim for each query head [cross_attn.q_norm].
        k_norm: the same for each key head [cross_attn.k_norm].
        num_heads: query heads.
        num_kv_heads: key/value heads; must divide num_heads.
        head_dim: per-head size.
    """

    def __init__(
        self,
        *,
        q_proj: nn.Module,
        k_proj: nn.Module,
        v_proj: nn.Module,
        o_proj: nn.Module,
        q_norm: nn.Module,
        k_norm: nn.Module,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
    ) -> None:
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(
                f"CrossAttention: num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
            )
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.q_norm, self.k_norm = q_norm, k_norm
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.kv_cache: ImageKVCache | None = None

    def setup_cache(
        self, batch_size: int, max_seq_len: int, dtype: torch.dtype, device: torch.device | str | None
    ) -> None:
        """Start caching the image keys/values (the signature of `GroupedQueryAttention.setup_cache`;
        the image keys are stored at the dtype they are computed in)."""
        self.kv_cache = ImageKVCache(batch_size, max_seq_len)

    def has_images(self) -> bool:
        """True when a cache holds a prompt's image keys/values."""
        return self.kv_cache is not None and self.kv_cache.filled

    def forward(self, x: torch.Tensor, images: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """Attend from the text to the images.

        Args:
            x: text (b, s, embed_dim).
            images: projected image features (b, n, embed_dim); None = the cached images (decoding).
            mask: bool (b, s, n), True = may attend; no row may be all False.

        Returns:
            (b, s, embed_dim).
        """
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, s, self.num_heads, self.head_dim)).transpose(1, 2)
        if images is None:
            k, v = self.kv_cache.k, self.kv_cache.v  # (b, h_kv, n, d)
        else:
            n = images.shape[1]
            k = self.k_norm(self.k_proj(images).view(b, n, self.num_kv_heads, self.head_dim)).transpose(1, 2)
            v = self.v_proj(images).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
            if self.kv_cache is not None:
                self.kv_cache.store(k, v)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[:, None], enable_gqa=self.num_kv_heads != self.num_heads
        )  # (b, h, s, d)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim))
