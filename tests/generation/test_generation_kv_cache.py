"""generate()/generate_batch() on a real tiny ftune model: KV-cache decoding against recomputation."""

from collections.abc import Callable

import pytest
import torch

from ftune.generation import generate, generate_batch
from ftune.modules.transformer import TransformerDecoder

PROMPT = [3, 17, 42, 5, 9, 11, 2]


def greedy_by_recomputing(model: TransformerDecoder, prompt: list[int], n: int) -> list[int]:
    """The obvious algorithm: run the whole sequence again for every new token, no cache."""
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([tokens]))
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def test_greedy_with_kv_cache_equals_recomputing_the_full_sequence(model: TransformerDecoder) -> None:
    expected = greedy_by_recomputing(model, PROMPT, 20)
    assert generate(model, PROMPT, max_new_tokens=20) == expected
    assert generate(model, torch.tensor(PROMPT), max_new_tokens=20) == expected
    assert len(set(expected)) > 1  # not a degenerate model that repeats one token


def test_caches_are_freed_after_generation(model: TransformerDecoder) -> None:
    before = model(torch.tensor([PROMPT]))
    generate(model, PROMPT, max_new_tokens=3)
    assert not model.caches_are_enabled()
    torch.testing.assert_close(model(torch.tensor([PROMPT])), before, rtol=0, atol=0)


def test_top_k_one_equals_greedy(model: TransformerDecoder) -> None:
    greedy = generate(model, PROMPT, max_new_tokens=12)
    assert generate(model, PROMPT, max_new_tokens=12, temperature=1.5, top_k=1, seed=3) == greedy


def test_stop_tokens_stop_generation(model: TransformerDecoder) -> None:
    free = generate(model, PROMPT, max_new_tokens=20)
    stop = free[5]
    first = free.index(stop)
    out = generate(model, PROMPT, max_new_tokens=20, stop_tokens=[stop, 10_000])
    assert out == free[: first + 1]  # stops at the first occurrence, stop token kept last


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(model: TransformerDecoder) -> None:
    kwargs = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 0.95}
    torch.manual_seed(123)
    a = generate(model, PROMPT, seed=7, **kwargs)
    after_a = torch.rand(1)
    torch.manual_seed(123)
    b = generate(model, PROMPT, seed=7, **kwargs)
    after_b = torch.rand(1)
    assert a == b
    assert torch.equal(after_a, after_b)
    others = {tuple(generate(model, PROMPT, seed=s, **kwargs)) for s in range(3)}
    assert len(others) > 1  # the seed matters


def test_on_token_streams_every_token_in_order(model: TransformerDecoder) -> None:
    streamed: list[int] = []
    out = generate(model, PROMPT, max_new_tokens=9, on_token=streamed.append)
    assert streamed == out and len(out) == 9


def test_batched_generation_equals_one_by_one(model: TransformerDecoder) -> None:
    prompts = [PROMPT, [7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [60, 61, 62]]
    alone = [generate(model, p, max_new_tokens=10) for p in prompts]
    streamed: dict[int, list[int]] = {}
    batched = generate_batch(
        model, prompts, max_new_tokens=10, on_token=lambda i, t: streamed.setdefault(i, []).append(t)
    )
    assert batched == alone
    assert [streamed[i] for i in range(len(prompts))] == alone


def test_batched_generation_stops_each_sequence_on_its_own(model: TransformerDecoder) -> None:
    prompts = [PROMPT, [60, 61, 62]]
    alone = [generate(model, p, max_new_tokens=12) for p in prompts]
    stop = alone[0][3]
    batched = generate_batch(model, prompts, max_new_tokens=12, stop_tokens=[stop])
    for out, free in zip(batched, alone):
        assert out == (free[: free.index(stop) + 1] if stop in free else free)


def test_stop_when_ends_each_sequence_where_it_says(model: TransformerDecoder) -> None:
    prompts = [PROMPT, [60, 61, 62]]
    alone = [generate(model, p, max_new_tokens=12) for p in prompts]
    calls: list[tuple[int, list[int]]] = []

    def stop_when(row: int, tokens: list[int]) -> bool:  # row 0 stops after 3 tokens, row 1 never
        calls.append((row, list(tokens)))
        return row == 0 and len(tokens) == 3

    batched = generate_batch(model, prompts, max_new_tokens=12, stop_when=stop_when)
    assert batched == [alone[0][:3], alone[1]]
    assert [tokens for row, tokens in calls if row == 0] == [alone[0][:n] for n in (1, 2, 3)]
    assert [tokens for row, tokens in calls if row == 1] == [alone[1][:n] for n in range(1, 13)]


def test_max_new_tokens_zero_returns_nothing(model: TransformerDecoder) -> None:
    assert generate(model, PROMPT, max_new_tokens=0) == []


@pytest.mark.parametrize(
    ("prompt", "kwargs", "match"),
    [
        ([], {"max_new_tokens": 4}, r"prompt 0 is empty; generation needs at least one token"),
        (PROMPT, {"max_new_tokens": -1}, r"max_new_tokens must be an int >= 0; got -1"),
        (PROMPT, {"max_new_tokens": 4, "temperature": -1.0}, r"temperature must be >= 0"),
        (
            PROMPT,
            {"max_new_tokens": 60},
            r"longest prompt \(7 tokens\) plus max_new_tokens \(60\) is 67 tokens, more than the model's "
            r"max_seq_len \(64\)",
        ),
        (torch.tensor([PROMPT]), {"max_new_tokens": 4}, r"prompt 0 must be a 1-D tensor of token ids"),
    ],
)
def test_bad_arguments_raise(model: TransformerDecoder, prompt, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate(model, prompt, **kwargs)
    assert not model.caches_are_enabled()


def test_another_seeded_model_decodes_differently(build_model: Callable[..., TransformerDecoder]) -> None:
    # The equalities above are not vacuous: the output depends on the weights.
    assert generate(build_model(seed=1), PROMPT, max_new_tokens=8) != generate(
        build_model(), PROMPT, max_new_tokens=8
    )


def test_prefill_projects_only_each_rows_last_prompt_token(model: TransformerDecoder, monkeypatch) -> None:
    shapes = []
    project = model.project
    monkeypatch.setattr(model, "project", lambda h: shapes.append(tuple(h.shape)) or project(h))
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    out = generate_batch(model, prompts, max_new_tokens=3)
    assert shapes[0] == (2, model.head.weight.shape[1])  # prefill: 2 rows, not 2 x 5 positions
    assert out == [greedy_by_recomputing(model, p, 3) for p in prompts]


def test_shared_prompt_prefix_is_prefilled_once(model: TransformerDecoder, monkeypatch) -> None:
    system = [(7 * i + 3) % 50 + 1 for i in range(20)]  # 20 tokens every prompt starts with
    prompts = [system + [55, 56], system + [57], system + [58, 59, 60]]
    shapes = []
    hidden = model.hidden
    monkeypatch.setattr(model, "hidden", lambda t, **kw: shapes.append(tuple(t.shape)) or hidden(t, **kw))
    out = generate_batch(model, prompts, max_new_tokens=4)
    # The prefix once for one row (it stops a token short of the shortest prompt), then the rest,
    # then one token a row per decoding step.
    assert shapes == [(1, 20), (3, 3), (3, 1), (3, 1), (3, 1)]
    assert out == [greedy_by_recomputing(model, p, 4) for p in prompts]
    shapes.clear()
    generate_batch(model, [system[:10] + [60], system[:10] + [61]], max_new_tokens=1)
    assert shapes == [(2, 11)]  # a shorter shared prefix is not worth a separate pass
