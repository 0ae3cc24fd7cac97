"""Rollout rows: each prompt prefilled once for its G rows, and per-row generators that make a row's
completion independent of the other rows of its batch (what makes GRPO sample the same at any world size)."""

import pytest
import torch

from ftune.generation import rollout
from ftune.generation.generate import decode_rows
from ftune.modules.kv_cache import KVCache
from ftune.modules.transformer import TransformerDecoder

PROMPTS = [[3, 17, 42, 5, 9, 11, 2], [8, 1, 30], [50, 22, 7, 7, 61]]


def gens(n: int, offset: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(1000 + offset + i) for i in range(n)]


def test_repeat_rows_interleaves_each_row():
    cache = KVCache(batch_size=2, max_seq_len=4, num_kv_heads=1, head_dim=2, dtype=torch.float32)
    cache.k_cache[0].fill_(1.0)
    cache.k_cache[1].fill_(2.0)
    cache.repeat_rows(6)
    assert cache.k_cache[:, 0, 0, 0].tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="multiple of 6"):
        cache.repeat_rows(8)


def test_prefilling_each_prompt_once_gives_what_prefilling_every_row_gives(model: TransformerDecoder):
    rows = [p for p in PROMPTS for _ in range(4)]
    steps: dict[int, list[torch.Tensor]] = {1: [], 4: []}
    outs = {}
    for group in (1, 4):
        outs[group] = decode_rows(
            model, rows, max_new_tokens=8, temperature=1.0, top_k=None, top_p=None, stop_tokens=(),
            generator=gens(len(rows)), pad_id=0, on_step=lambda logits, tokens, g=group: steps[g].append(logits),
            group_size=group,
        )  # fmt: skip
    assert outs[4] == outs[1]
    for a, b in zip(steps[1], steps[4]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not groups of 4"):
        decode_rows(model, rows[1:] + rows[:1], max_new_tokens=2, temperature=0.0, top_k=None, top_p=None,
                    stop_tokens=(), generator=None, pad_id=0, group_size=4)  # fmt: skip


def test_a_rows_completion_does_not_depend_on_its_batch(model: TransformerDecoder):
    """Prompt 2's 3 completions, sampled with the others or alone, from the same per-row generators."""
    kwargs = dict(
        group_size=3, max_new_tokens=8, temperature=1.0, top_k=None, top_p=None, stop_ids=[], pad_id=0
    )
    together = rollout(model, PROMPTS, generator=gens(9), **kwargs).completions()
    alone = rollout(model, PROMPTS[2:], generator=gens(3, offset=6), **kwargs).completions()
    assert together[6:] == alone
    shared = rollout(model, PROMPTS, generator=torch.Generator().manual_seed(0), **kwargs).completions()
    alone_shared = rollout(
        model, PROMPTS[2:], generator=torch.Generator().manual_seed(0), **kwargs
    ).completions()
    assert shared[6:] != alone_shared  # one stream for the batch: a row's draws depend on the rows before it
    with pytest.raises(ValueError, match="3 generators for 9 rows"):
        rollout(model, PROMPTS, generator=gens(3), **kwargs)
