"""Key/value cache for incremental decoding."""

import torch
from torch import nn


class KVCache(nn.Module):
    """Pre-allocated keys and values of one attention layer, written at explicit positions.

    The buffers are non-persistent: they never appear in a state dict, so a model with caches
    enabled saves and loads exactly like one without.

    Args:
        batch_size: number of sequences decoded together.
        max_seq_len: number of positions the cache holds.
        num_kv_heads: key/value heads of the layer.
        head_dim: per-head feature size.
        dtype: storage dtype (usually the model's).
        device: storage device (usually the model's).
    """

    def __init__(
        self,
        batch_size: int,
        max_seq_len: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        shape = (batch_size, num_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.batch_size = batch_size
        self.max_seq_len = max_seq_len

    def reset(self) -> None:
        """Forget every cached position."""
        self.k_cache.zero_()
        self.v_cache.zero_()

    def repeat_rows(self, batch_size: int) -> None:
        """Repeat each row of the cache in place of itself, to `batch_size` rows: one row into
        `batch_size` copies (a shared prompt prefix), or b rows into `batch_size / b` consecutive
        copies of each (a prompt's G sampled completions, ``repeat_interleave``).

        Raises:
            ValueError: if `batch_size` is not a multiple of the cache's rows.
        """
        if batch_size % self.batch_size:
            raise ValueError(
                f"KVCache.repeat_rows: the cache holds {self.batch_size} rows, which do not repeat to "
                f"{batch_size}; give a multiple of {self.batch_size}."
            )
        times = batch_size // self.batch_size
        if self.batch_size == 1:
            self.k_cache = self.k_cache.expand(batch_size, -1, -1, -1).clone()
            self.v_cache = self.v_cache.expand(batch_size, -1, -1, -1).clone()
        else:
            self.k_cache = self.k_cache.repeat_interleave(times, dim=0)
            self.v_cache = self.v_cache.repeat_interleave(times, dim=0)
        self.batch_size = batch_size

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only the cache rows `rows` (long indices, in their new order): rows whose sequences ended
        stop costing compute in the batch's later steps (a multi-turn rollout's finished conversations)."""
        self.k_cache = self.k_cache.index_select(0, rows)
        self.v_cache = self.v_cache.index_select(0, rows)
        self.batch_size = int(rows.numel())

    def update(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write `k`/`v` at `input_pos` and return the whole cache.

        Args:
            input_pos: positions (b, s) or (1, s), long; each row may start anywhere.
            k: keys (b, h_kv, s, head_dim).
            v: values (b, h_kv, s, head_dim).

        Returns:
            (keys, values), each (b, h_kv, max_seq_len, head_dim). Positions never written hold
            zeros; the caller masks them out. Positions must be < max_seq_len (checked once per
            step by `TransformerDecoder`, not here, to avoid a host sync in every layer).

        Raises:
            ValueError: if the batch does not match the cache.
        """
        b = k.shape[0]
        if b != self.batch_size:
            raise ValueError(
                f"KVCache.update: batch size {b} does not match the cache's {self.batch_size}; "
                f"call model.setup_caches(batch_size={b}, ...) first."
            )
        rows = torch.arange(b, device=k.device)[:, None]  # (b, 1)
        pos = input_pos.expand(b, -1)  # (b, s)
        # Advanced indices on dims 0 and 2 go first in the indexed view: (b, s, h_kv, head_dim).
        self.k_cache[rows, :, pos] = k.transpose(1, 2).to(self.k_cache.dtype)
        self.v_cache[rows, :, pos] = v.transpose(1, 2).to(self.v_cache.dtype)
        return self.k_cache, self.v_cache
