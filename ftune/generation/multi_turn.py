"""Multi-turn rollouts: G conversations per record with an environment, grown turn by turn on the KV cache.

For each record, ``group_size`` episodes are started (``Environment.start``); their opening messages are
rendered with the chat template (:class:`ftune.generation.chat_tokens.ChatTokens`) and prefilled once per
record. Then, turn after turn, for all rows still running together:

1. decode: every running row samples until its stop token, its per-turn budget (``max_turn_tokens``) or
   what is left of its trajectory budget (``max_trajectory_tokens``: the tokens after the prompt, the
   model's and the environment's alike, as TRL's ``max_completion_length``);
2. answer: a turn that ended on a stop token is decoded (special tokens kept), parsed (``parse(text) ->
   Turn``, the family's tool-call format) and given to its episode, which answers with messages, a
   reward and done. The trajectory stops at done, after ``max_turns`` turns, when a turn is cut by a
   budget (the template would close a turn the model never closed; the episode does not see it), or
   when the answer leaves no room for one more model token (the answer is then dropped, as TRL drops a
   tool result past its budget; the step's reward still counts);
3. prefill: the answer's tokens (:meth:`ChatTokens.extension`, with the turn's last sampled token, which
   decoding did not feed yet) are prefilled onto each continuing row's cache in one batched forward.
   The history is never prefilled again.

Rows that finish at different turns: a conversation that has ended leaves the batch (its cache row is
dropped before the next prefill, ``keep_cache_rows``), and a row still running but with nothing to do in
a forward (its turn ended before the others') is fed a pad token written to a scratch cache slot past the
budget (slot ``longest prompt + max_trajectory_tokens``) that no real position ever attends to. A
record's G conversations start from one prompt: it is prefilled once and its cache row copied. Only
running rows draw tokens, each from its own generator: a row's trajectory does not depend on which rows
share its batch or when they finish (tests/generation/test_multi_turn.py checks it against each record
run alone, and the greedy path against recomputing the whole history without a cache).

Log-probabilities follow ``ftune.generation.rollout``'s convention (``log_softmax(logits / T)`` at the
sampled token; greedy decoding at T = 1) and are recorded at sampling, for model tokens only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ftune.agents import Environment, Episode, Message, Turn
from ftune.generation.chat_tokens import ChatTokens
from ftune.generation.rollout import IGNORE_INDEX
from ftune.generation.sampling import check_sampling_args, sample

#: Why a trajectory stopped.
STOPS = ("done", "max_turns", "turn_budget", "max_trajectory_tokens")


@dataclass
class Trajectory:
    """One conversation: its prompt, every token after it, which of them the model sampled, and its rewards.

    Attributes:
        prompt: the opening messages' tokens (ending with the first turn's generation prompt).
        tokens: every token after the prompt, in context order: model turns and environment answers.
        sampled: per token of `tokens`, True where the model sampled it (trained), False for the
            environment's (context only).
        logps: per token of `tokens`, its sampled log-probability (0.0 at environment tokens).
        messages: the conversation (opening messages, each model turn's raw text, each answer).
        env_reward: the sum of the environment's step rewards.
        turns: model turns taken.
        stop: why it stopped, one of ``STOPS``.
        answer: the last model turn's text (special tokens dropped): what rule rewards score.
    """

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    env_reward: float = 0.0
    turns: int = 0
    stop: str | None = None
    answer: str = ""


@dataclass
class Trajectories:
    """A multi-turn rollout's N = records x group_size trajectories, grouped by record in record order.

    Read like ``ftune.generation.Rollout`` by ``ftune.training.rollout_batch`` (``training_batch()``,
    ``group_size``, ``logp_temperature``, ``lengths``, ``finished``).
    """

    rows: list[Trajectory]
    group_size: int
    pad_id: int
    logp_temperature: float

    @property
    def lengths(self) -> torch.Tensor:
        """[N] long, each trajectory's tokens after its prompt (model and environment)."""
        return torch.tensor([len(r.tokens) for r in self.rows], dtype=torch.long)

    @property
    def finished(self) -> torch.Tensor:
        """[N] bool, True where the environment ended the conversation (done)."""
        return torch.tensor([r.stop == "done" for r in self.rows], dtype=torch.bool)

    def training_batch(self) -> dict[str, torch.Tensor]:
        """One right-padded row per trajectory: prompt + all turns; only sampled tokens labelled.

        Labels are aligned with tokens (the loss shifts them), -100 at the prompt, at every
        environment token and at padding.

        Returns:
            {"tokens": [N, L] long, "labels": [N, L] long, "old_logps": [N, L] fp32 (each sampled
            token's log-probability at its label's position, 0 elsewhere)}.
        """
        width = max(len(r.prompt) + len(r.tokens) for r in self.rows)
        n = len(self.rows)
        tokens = torch.full((n, width), self.pad_id, dtype=torch.long)
        labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long)
        old_logps = torch.zeros((n, width), dtype=torch.float32)
        for i, r in enumerate(self.rows):
            start, end = len(r.prompt), len(r.prompt) + len(r.tokens)
            ids = torch.tensor(r.prompt + r.tokens, dtype=torch.long)
            tokens[i, :end] = ids
            keep = torch.tensor(r.sampled, dtype=torch.bool)
            labels[i, start:end] = torch.where(keep, ids[start:], IGNORE_INDEX)
            old_logps[i, start:end] = torch.tensor(r.logps, dtype=torch.float32)
        return {"tokens": tokens, "labels": labels, "old_logps": old_logps}


@dataclass(frozen=True)
class TurnLimits:
    """The budgets of a multi-turn rollout (config keys, no defaults).

    Attributes:
        max_turns: model turns per trajectory (>= 1).
        max_turn_tokens: tokens of one model turn (>= 1).
        max_trajectory_tokens: tokens after the prompt, the model's and the environment's (>= 1).
    """

    max_turns: int
    max_turn_tokens: int
    max_trajectory_tokens: int

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_turn_tokens", "max_trajectory_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"multi-turn rollout: {name} must be an int >= 1; got {value!r}.")


class _Cache:
    """The running rows on one KV cache with a scratch slot (see the module docstring).

    Cache row ``slot[i]`` holds trajectory i; :meth:`keep` drops the rows of ended trajectories (when
    the model can: ``keep_cache_rows``), so they cost nothing in the turns that follow.
    """

    def __init__(self, model: nn.Module, length: int, pad_id: int, device: torch.device) -> None:
        self.model, self.pad_id, self.device = model, pad_id, device
        self.scratch = length  # never attended to by a real position (< length)
        self.slots = torch.arange(length + 1, device=device)
        self.pos: dict[int, int] = {}  # each trajectory's next free position
        self.slot: dict[int, int] = {}  # each trajectory's cache row

    def prefill(self, prompts: list[list[int]], group_size: int) -> dict[int, torch.Tensor]:
        """Set the cache up and prefill every prompt; a group whose G prompts are equal is prefilled once
        and its cache row copied G times (when the model can: ``repeat_caches``)."""
        rows = len(prompts)
        distinct = prompts[::group_size]
        grouped = group_size > 1 and callable(getattr(self.model, "repeat_caches", None))
        grouped = grouped and all(prompts[i] == distinct[i // group_size] for i in range(rows))
        firsts = list(range(0, rows, group_size)) if grouped else list(range(rows))
        self.model.setup_caches(len(firsts), self.scratch + 1)
        self.slot, self.pos = {i: k for k, i in enumerate(firsts)}, {i: 0 for i in firsts}
        last = self.feed({i: prompts[i] for i in firsts})
        if grouped:
            self.model.repeat_caches(rows)
            self.slot, self.pos = {i: i for i in range(rows)}, {i: len(prompts[i]) for i in range(rows)}
            last = {i: last[i - i % group_size] for i in range(rows)}
        return last

    def keep(self, rows: list[int]) -> None:
        """Drop every cache row but those of `rows` (trajectories still running)."""
        if len(rows) == len(self.slot) or not callable(getattr(self.model, "keep_cache_rows", None)):
            return
        self.model.keep_cache_rows(torch.tensor([self.slot[i] for i in rows], device=self.device))
        self.slot = {i: k for k, i in enumerate(rows)}
        self.pos = {i: self.pos[i] for i in rows}

    def feed(self, pieces: Mapping[int, Sequence[int]]) -> dict[int, torch.Tensor]:
        """Write each trajectory's ids at its next positions in one forward; return each one's last logits."""
        n, width = len(self.slot), max(len(p) for p in pieces.values())
        tokens = torch.full((n, width), self.pad_id, dtype=torch.long, device=self.device)
        positions = torch.full((n, width), self.scratch, dtype=torch.long, device=self.device)
        for i, ids in pieces.items():
            row, start = self.slot[i], self.pos[i]
            tokens[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long, device=self.device)
            positions[row, : len(ids)] = torch.arange(start, start + len(ids), device=self.device)
        mask = self.slots[None, None, :] <= positions[:, :, None]  # (n, s, length + 1)
        hidden = self.model.hidden(tokens, input_pos=positions, mask=mask)  # (n, s, dim)
        fed = sorted(pieces)
        rows = torch.tensor([self.slot[i] for i in fed], device=self.device)
        last = torch.tensor([len(pieces[i]) - 1 for i in fed], device=self.device)
        logits = self.model.project(hidden[rows, last])  # (fed, vocab)
        for i in fed:
            self.pos[i] += len(pieces[i])
        return dict(zip(fed, logits))


def _check_generators(generators: object, rows: int, device: torch.device) -> list[torch.Generator | None]:
    if generators is None:
        return [None] * rows
    if not isinstance(generators, (list, tuple)) or len(generators) != rows:
        raise ValueError(
            f"multi-turn rollout: generator must be a list of one torch.Generator per trajectory ({rows}) "
            f"or None; got {type(generators).__name__} of {len(generators) if isinstance(generators, (list, tuple)) else '-'}."
        )
    for g in generators:
        if not isinstance(g, torch.Generator) or g.device.type != device.type:
            raise ValueError(
                f"multi-turn rollout: every generator must be a torch.Generator on the model's device ({device}); "
                f"got {g!r}."
            )
    return list(generators)


@torch.no_grad()
def multi_turn_rollout(
    model: nn.Module,
    records: Sequence[Mapping[str, Any]],
    *,
    environment: Environment,
    chat: ChatTokens,
    parse: Callable[[str], Turn],
    group_size: int,
    limits: TurnLimits,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    stop_ids: Sequence[int],
    pad_id: int,
    generator: Sequence[torch.Generator] | None,
) -> Trajectories:
    """Run `group_size` episodes of every record with the model, all rows batched on one KV cache.

    Args:
        model: an ftune decoder (``setup_caches``, ``hidden``, ``project``); caches are freed after.
        records: the records episodes start from (``environment.start(record)``).
        environment: answers each turn (``ftune.agents.Environment``).
        chat: the tokenizer's chat template (:class:`ChatTokens`).
        parse: the family's tool-call format: a turn's text (special tokens kept, stop token dropped)
            to a ``Turn``.
        group_size: episodes per record (G).
        limits: :class:`TurnLimits`.
        temperature, top_k, top_p: sampling, as ``ftune.generation.rollout``.
        stop_ids: token ids that end a model turn (kept as its last token: the template's end of turn).
        pad_id: the id fed to idle rows and padding the training batch.
        generator: one generator per trajectory (N, in row order), or None for torch's global RNG.

    Returns:
        :class:`Trajectories`, N = len(records) * group_size rows.

    Raises:
        ValueError: a bad argument, or a prompt + max_trajectory_tokens longer than the model's max_seq_len.
        ConversationError: the template cannot extend a cached conversation (``ChatTokens.extension``).
    """
    check_sampling_args(temperature, top_k, top_p)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"multi-turn rollout: group_size must be an int >= 1; got {group_size!r}.")
    device = next(model.parameters()).device
    episodes: list[Episode] = []
    rows: list[Trajectory] = []
    for record in records:
        for _ in range(group_size):
            messages, episode = environment.start(record)
            episodes.append(episode)
            rows.append(Trajectory(prompt=chat.prompt(messages), messages=list(messages)))
    gens = _check_generators(generator, len(rows), device)
    longest = max(len(r.prompt) for r in rows)
    model_max = getattr(model, "max_seq_len", None)
    if isinstance(model_max, int) and longest + limits.max_trajectory_tokens > model_max:
        raise ValueError(
            f"multi-turn rollout: the longest prompt ({longest} tokens) plus max_trajectory_tokens "
            f"({limits.max_trajectory_tokens}) is more than the model's max_seq_len ({model_max}); lower "
            "max_trajectory_tokens or shorten the prompts."
        )
    logp_t = temperature if temperature > 0 else 1.0
    sampling = (temperature, top_k, top_p, logp_t)
    stops = set(stop_ids)
    cache = _Cache(model, longest + limits.max_trajectory_tokens, pad_id, device)
    try:
        last = cache.prefill([r.prompt for r in rows], group_size)
        running = list(range(len(rows)))
        while running:
            turns = _decode_turn(cache, last, running, rows, gens, limits, sampling, stops)
            answers = {}
            for i in running:
                suffix = _answer(rows[i], turns[i], episodes[i], chat, parse, limits, stops, i)
                if suffix is not None:
                    answers[i] = turns[i][-1:] + suffix  # the turn's stop token: sampled, not fed yet
                    rows[i].tokens += suffix
                    rows[i].sampled += [False] * len(suffix)
                    rows[i].logps += [0.0] * len(suffix)
            running = sorted(answers)
            if answers:
                cache.keep(running)  # ended conversations leave the batch
                last.update(cache.feed(answers))
    finally:
        model.delete_caches()
    return Trajectories(rows, group_size, pad_id, float(logp_t))


def _decode_turn(cache, last, running, rows, gens, limits, sampling, stops) -> dict[int, list[int]]:
    """Sample one turn of every running row; the rows' last tokens are not fed (the answer's prefill does)."""
    temperature, top_k, top_p, logp_t = sampling
    budget = {
        i: min(limits.max_turn_tokens, limits.max_trajectory_tokens - len(rows[i].tokens)) for i in running
    }
    new: dict[int, list[int]] = {i: [] for i in running}
    live = sorted(running)
    while live:
        logits = torch.stack([last[i] for i in live])  # (n, vocab)
        drawn = sample(logits, temperature, top_k, top_p, generator=_pick(gens, live))  # (n,)
        logps = torch.log_softmax(logits.float() / logp_t, dim=-1).gather(-1, drawn[:, None])[:, 0]
        for i, token, logp in zip(live, drawn.tolist(), logps.tolist()):
            new[i].append(token)
            rows[i].tokens.append(token)
            rows[i].sampled.append(True)
            rows[i].logps.append(logp)
        live = [i for i in live if new[i][-1] not in stops and len(new[i]) < budget[i]]
        if live:
            last.update(cache.feed({i: new[i][-1:] for i in live}))
    return new


def _pick(gens: list[torch.Generator | None], live: list[int]) -> Any:
    picked = [gens[i] for i in live]
    return None if picked[0] is None else picked


def _answer(
    row: Trajectory,
    turn: list[int],
    episode: Episode,
    chat: ChatTokens,
    parse: Callable[[str], Turn],
    limits: TurnLimits,
    stops: set[int],
    index: int,
) -> list[int] | None:
    """Give a finished turn to its episode; the answer's tokens, or None when the trajectory stops here."""
    row.turns += 1
    if turn[-1] not in stops:  # cut by a budget: no end of turn, the episode does not see it
        row.answer = chat.text(turn, special=False)
        full = len(row.tokens) >= limits.max_trajectory_tokens
        row.stop = "max_trajectory_tokens" if full else "turn_budget"
        return None
    text = chat.text(turn[:-1], special=True)
    row.answer = chat.text(turn[:-1], special=False)
    row.messages.append({"role": "assistant", "content": text})
    step = episode.step(parse(text))
    row.env_reward += float(step.reward)
    if step.done or row.turns >= limits.max_turns:
        row.stop = "done" if step.done else "max_turns"
        return None
    suffix = chat.extension(row.prompt + row.tokens, row.messages + list(step.messages), row=index)
    if len(row.tokens) + len(suffix) >= limits.max_trajectory_tokens:  # no room for one more model token
        row.stop = "max_trajectory_tokens"
        return None
    row.messages += list(step.messages)
    return suffix
