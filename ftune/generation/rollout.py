"""Rollouts for online RL (GRPO): G sampled completions per prompt, with the log-probabilities of their tokens.

All prompts, each repeated G times, are decoded in one batch on the model's KV cache by the loop
`generate_batch` uses (`decode_rows`). Each distinct prompt is prefilled once and its cache copied to
its G rows, and a prefix every prompt shares (a system prompt) is prefilled once for all of them.

Log-probability convention (the same as TRL's GRPOTrainer, trl 1.16): the log-probability of a
sampled token is ``log_softmax(logits / temperature)`` at that token, over the whole vocabulary:
temperature-scaled, but neither top-k nor top-p filtered. This is what TRL's forward pass computes
for the old and the current policy (its fused LM head divides the logits by the sampling
temperature and applies no filter), so the policy ratio is 1 at the first update and a policy
forward on `Rollout.training_batch()` at the same temperature gives the same values. Greedy
decoding (temperature 0) has no such scale; its log-probabilities are taken at temperature 1
(``Rollout.logp_temperature`` says which was used).

The model is used in whatever mode it is in: in train mode, dropout (e.g. LoRA dropout) makes the
log-probabilities those of that dropout draw. Call ``model.eval()`` first for deterministic ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ftune.generation.generate import decode_rows
from ftune.generation.sampling import check_sampling_args

# Same value as ftune.data.CROSS_ENTROPY_IGNORE_IDX (generation sits above data but needs no more of it).
IGNORE_INDEX = -100


@dataclass
class Rollout:
    """G completions of each prompt and the log-probabilities they were sampled with.

    Rows are grouped by prompt, in prompt order: rows ``i * group_size`` to ``(i + 1) * group_size - 1``
    are the completions of prompt i. N = number of prompts x group_size; T = longest completion.

    Attributes:
        prompt_ids: each row's prompt token ids (N lists; the rows of one group are the same list).
        completion_ids: [N, T] long, each row's new tokens right-padded with `pad_id`.
        completion_mask: [N, T] long, 1 up to and including the row's first stop token, 0 after.
        logps: [N, T] fp32 log-probability of each sampled token (see the module docstring for the
            convention), 0 where the mask is 0.
        lengths: [N] long, each completion's number of tokens (the mask's row sums).
        finished: [N] bool, True where the completion ended on a stop token (or `stop_when`),
            False where it was cut at max_new_tokens.
        group_size: completions per prompt (G).
        pad_id: the id padding `completion_ids` and `training_batch()`'s tokens.
        logp_temperature: the temperature the logps were taken at (the sampling temperature, or 1.0
            for greedy decoding); a policy forward must divide its logits by the same value.
        pixel_values: an image-text rollout's images, each row's (its prompt's images, once a row),
            in row order, or None: text prompts.
        image_sample: ``[n]`` long, the row each of `pixel_values` belongs to, or None.
    """

    prompt_ids: list[list[int]]
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logps: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor
    group_size: int
    pad_id: int
    logp_temperature: float
    pixel_values: torch.Tensor | None = None
    image_sample: torch.Tensor | None = None

    @property
    def num_prompts(self) -> int:
        """Number of distinct prompts (N / group_size)."""
        return len(self.prompt_ids) // self.group_size

    def completions(self) -> list[list[int]]:
        """Each row's completion token ids, without padding (N lists)."""
        return [row[:n] for row, n in zip(self.completion_ids.tolist(), self.lengths.tolist())]

    def training_batch(self) -> dict[str, torch.Tensor]:
        """The rollout as a training batch: one right-padded row of prompt + completion per sample.

        Labels are aligned with tokens, as in ftune's SFT batches (the training step shifts them):
        the prompt and the padding are labelled -100, so a policy forward with the usual shift
        scores exactly the completion tokens, each from the logits of the position before it, at
        the positions (0..len-1) it was generated at.

        Returns:
            {"tokens": [N, L] long, "labels": [N, L] long, "old_logps": [N, L] fp32 (each
            completion token's sampled log-probability at its label's position, 0 elsewhere)}, with
            L the longest prompt + completion; for an image-text rollout also "pixel_values" and
            "image_sample" (each row's images, as `ftune.data.padded_collate_vision` lays them out).
        """
        rows = len(self.prompt_ids)
        ends = [len(p) + n for p, n in zip(self.prompt_ids, self.lengths.tolist())]
        width = max(ends)
        device = self.completion_ids.device
        tokens = torch.full((rows, width), self.pad_id, dtype=torch.long, device=device)
        labels = torch.full((rows, width), IGNORE_INDEX, dtype=torch.long, device=device)
        old_logps = torch.zeros((rows, width), dtype=self.logps.dtype, device=device)
        for i, (prompt, end) in enumerate(zip(self.prompt_ids, ends)):
            start, n = len(prompt), end - len(prompt)
            tokens[i, :start] = torch.tensor(prompt, dtype=torch.long, device=device)
            tokens[i, start:end] = self.completion_ids[i, :n]
            labels[i, start:end] = self.completion_ids[i, :n]
            old_logps[i, start:end] = self.logps[i, :n]
        out = {"tokens": tokens, "labels": labels, "old_logps": old_logps}
        if self.pixel_values is not None:
            out["pixel_values"], out["image_sample"] = self.pixel_values, self.image_sample
        return out


def _check_prompts(prompts: object) -> list[list[int]]:
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(
            f"rollout: prompts must be a non-empty list of token-id lists; got {type(prompts).__name__} "
            f"{prompts!r:.80}."
        )
    ids = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor) and prompt.dim() == 1:
            prompt = prompt.tolist()
        if (
            not isinstance(prompt, (list, tuple))
            or not prompt
            or any(isinstance(t, bool) or not isinstance(t, int) for t in prompt)
        ):
            raise ValueError(
                f"rollout: prompt {i} must be a non-empty list of int token ids; got {prompt!r:.80}."
            )
        ids.append(list(prompt))
    return ids


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"rollout: {name} must be an int >= 1; got {value!r}.")
    return value


def rollout(
    model: nn.Module,
    prompts: list[list[int]],
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    stop_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | Sequence[torch.Generator] | None,
    stop_when: Callable[[int, list[int]], bool] | None = None,
    pixel_values: torch.Tensor | None = None,
    image_sample: torch.Tensor | None = None,
) -> Rollout:
    """Sample `group_size` completions of every prompt in one batched generation.

    Args:
        model: an ftune decoder (see `generate_batch`); its caches are set up and freed here.
        prompts: token ids of each prompt (lists of ints or 1-D tensors), of any lengths.
        group_size: completions per prompt (GRPO's G).
        max_new_tokens: the most tokens of each completion.
        temperature: sampling temperature; 0 decodes greedily (every row of a group is then the same).
        top_k: sample among the k most likely tokens only; None for no filter.
        top_p: sample within the nucleus of probability top_p only; None for no filter.
        stop_ids: token ids that end a completion (kept as its last token, inside the mask).
        pad_id: the id padding the prompts during prefill and the completions after their end.
        generator: the random source of every draw, on the model's device; pass it in (and save its
            `get_state()`) to make a run resumable. A list of N generators (N = len(prompts) *
            group_size, in row order) draws each row from its own, so a row's completion does not
            depend on which other prompts share the batch (the same at any world size). None
            draws from torch's global RNG.
        stop_when: called as stop_when(row, new_tokens) after each token of a running row (row i
            belongs to prompt i // group_size); True ends that row, e.g. at a stop string.
        pixel_values: for an image-text model, the images of every prompt in prompt order, each
            prompt's once (its G rows share its prefill); see `generate_batch`.
        image_sample: ``[n]`` long, the prompt each of `pixel_values` belongs to; given, the rollout
            keeps each row's images (``Rollout.pixel_values``) for the policy's forward on its rows.

    Returns:
        A `Rollout` with N = len(prompts) * group_size rows, grouped by prompt in prompt order.

    Raises:
        ValueError: no prompt or an empty one, group_size or max_new_tokens < 1, a bad sampling
            argument, a stop id or pad_id that is not an int, a generator on another device than
            the model, or a prompt + max_new_tokens longer than the model's max_seq_len.
    """
    ids = _check_prompts(prompts)
    group_size = _check_count("group_size", group_size)
    max_new_tokens = _check_count("max_new_tokens", max_new_tokens)
    check_sampling_args(temperature, top_k, top_p)
    if isinstance(stop_ids, (str, bytes)) or not isinstance(stop_ids, Sequence):
        raise ValueError(
            f"rollout: stop_ids must be a list of int token ids (may be empty); got {stop_ids!r}."
        )
    if any(isinstance(t, bool) or not isinstance(t, int) for t in stop_ids):
        raise ValueError(f"rollout: stop_ids must hold int token ids only; got {list(stop_ids)!r}.")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or pad_id < 0:
        raise ValueError(f"rollout: pad_id must be an int token id >= 0; got {pad_id!r}.")
    device = next(model.parameters()).device
    rows = [p for p in ids for _ in range(group_size)]  # each prompt G times, in prompt order
    generators = generator if isinstance(generator, (list, tuple)) else [generator]
    if isinstance(generator, (list, tuple)) and len(generator) != len(rows):
        raise ValueError(
            f"rollout: {len(generator)} generators for {len(rows)} rows ({len(ids)} prompts x group_size "
            f"{group_size}); give one per row, or a single generator."
        )
    for g in generators:
        if g is not None and not isinstance(g, torch.Generator):
            raise ValueError(f"rollout: generator must be a torch.Generator or None; got {type(g).__name__}.")
        if g is not None and g.device.type != device.type:
            raise ValueError(
                f"rollout: the generator is on {g.device} but the model on {device}; create it "
                f"with torch.Generator(device={str(device)!r})."
            )

    logp_temperature = temperature if temperature > 0 else 1.0
    step_logps: list[torch.Tensor] = []
    stops = set(stop_ids)
    finished = [False] * len(rows)

    def ends_row(row: int, tokens: list[int]) -> bool:
        # generate_batch's rule (a stop id, or stop_when), also noting which rows ended by it.
        finished[row] = tokens[-1] in stops or (stop_when is not None and stop_when(row, tokens))
        return finished[row]

    def keep_logps(logits: torch.Tensor, tokens: torch.Tensor) -> None:
        # fp32 before dividing: the same numerics as a policy forward that upcasts its logits.
        logprobs = torch.log_softmax(logits.float() / logp_temperature, dim=-1)  # (N, vocab)
        step_logps.append(logprobs.gather(-1, tokens[:, None]).squeeze(-1))  # (N,)

    new = decode_rows(
        model,
        rows,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        stop_tokens=(),
        generator=generator,
        pad_id=pad_id,
        stop_when=ends_row,
        on_step=keep_logps,
        group_size=group_size,  # each prompt prefilled once for its G rows
        pixel_values=pixel_values,
    )
    lengths = torch.tensor([len(c) for c in new], dtype=torch.long, device=device)  # (N,)
    width = int(lengths.max())
    completion_ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    for i, tokens in enumerate(new):
        completion_ids[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long, device=device)
    mask = torch.arange(width, device=device)[None, :] < lengths[:, None]  # (N, T)
    # The loop runs as many steps as the longest row has tokens, so `width` steps were kept.
    logps = torch.stack(step_logps[:width], dim=1).masked_fill(~mask, 0.0)  # (N, T)
    row_pixels = row_sample = None
    if pixel_values is not None and image_sample is not None:  # each prompt's images, once a row
        order = [(p * group_size + g, j) for p in range(len(ids)) for g in range(group_size)
                 for j in (image_sample == p).nonzero().flatten().tolist()]  # fmt: skip
        row_pixels = pixel_values[
            torch.tensor([j for _, j in order], dtype=torch.long, device=pixel_values.device)
        ]
        row_sample = torch.tensor([r for r, _ in order], dtype=torch.long, device=image_sample.device)
    return Rollout(
        prompt_ids=rows,
        completion_ids=completion_ids,
        completion_mask=mask.long(),
        logps=logps,
        lengths=lengths,
        finished=torch.tensor(finished, dtype=torch.bool, device=device),
        group_size=group_size,
        pad_id=pad_id,
        logp_temperature=float(logp_temperature),
        pixel_values=row_pixels,
        image_sample=row_sample,
    )
