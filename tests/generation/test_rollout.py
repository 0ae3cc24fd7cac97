"""rollout(): G sampled completions per prompt on the KV cache, with the log-probabilities they were drawn with."""

import pytest
import torch

from ftune.generation import Rollout, generate_batch, rollout
from ftune.modules.transformer import TransformerDecoder

PROMPTS = [[3, 17, 42, 5, 9, 11, 2], [8, 1, 30], [50, 22, 7, 7, 61]]
SAMPLING = {"temperature": 0.7, "top_k": 20, "top_p": 0.9}


def run(model: TransformerDecoder, seed: int | None = 0, **overrides) -> Rollout:
    prompts = overrides.pop("prompts", PROMPTS)
    kwargs = {
        "group_size": 4,
        "max_new_tokens": 10,
        **SAMPLING,
        "stop_ids": [],
        "pad_id": 0,
        "generator": None if seed is None else torch.Generator().manual_seed(seed),
        **overrides,
    }
    return rollout(model, prompts, **kwargs)


def forward_logps(
    model: TransformerDecoder, batch: dict[str, torch.Tensor], temperature: float
) -> torch.Tensor:
    """An independent policy forward: log_softmax(logits / T) of each next token, label-aligned [N, L]."""
    with torch.no_grad():
        logits = model(batch["tokens"]).float()  # (N, L, vocab), no cache
    logprobs = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    picked = logprobs.gather(-1, batch["tokens"][:, 1:, None]).squeeze(-1)  # (N, L-1): token p from p-1
    return torch.nn.functional.pad(picked, (1, 0))  # (N, L), aligned with labels


def test_greedy_and_top_k_one_rollouts_equal_generate_batch(model: TransformerDecoder) -> None:
    expected = generate_batch(model, PROMPTS, max_new_tokens=10)
    want = [c for c in expected for _ in range(3)]
    assert run(model, group_size=3, temperature=0.0, top_k=None, top_p=None).completions() == want
    top1 = run(model, group_size=3, temperature=1.3, top_k=1, top_p=None)
    assert top1.completions() == want
    assert top1.lengths.tolist() == [10] * 9 and top1.completion_ids.shape == (9, 10)


@pytest.mark.parametrize("sampling", [SAMPLING, {"temperature": 0.0, "top_k": None, "top_p": None}])
def test_logps_equal_a_full_forward_at_the_sampling_temperature(model: TransformerDecoder, sampling) -> None:
    r = run(model, **sampling, stop_ids=[5, 9, 40])
    assert r.lengths.min() < r.lengths.max()  # rows of different lengths: padding is exercised
    batch = r.training_batch()
    expected = forward_logps(model, batch, r.logp_temperature)
    scored = batch["labels"] != -100
    torch.testing.assert_close(batch["old_logps"][scored], expected[scored], rtol=0, atol=1e-5)
    assert torch.all(batch["old_logps"][~scored] == 0)
    # The same values in the rollout's own [N, T] layout: completion token t sits at len(prompt) + t.
    for i, prompt in enumerate(r.prompt_ids):
        n = int(r.lengths[i])
        torch.testing.assert_close(
            r.logps[i, :n], expected[i, len(prompt) : len(prompt) + n], rtol=0, atol=1e-5
        )
    if sampling["temperature"]:
        # The convention is pinned: logps at temperature 1 or of the top-k/top-p filtered distribution differ.
        raw = forward_logps(model, batch, 1.0)
        assert (batch["old_logps"][scored] - raw[scored]).abs().max() > 1e-2
        assert r.logp_temperature == 0.7
    else:
        assert r.logp_temperature == 1.0


def test_training_batch_lays_out_prompt_then_completion(model: TransformerDecoder) -> None:
    r = run(model, prompts=[[1, 2, 3], [4]], group_size=1, max_new_tokens=3, stop_ids=[], pad_id=63)
    batch = r.training_batch()
    done = r.completions()
    assert batch["tokens"].tolist() == [[1, 2, 3, *done[0]], [4, *done[1], 63, 63]]
    assert batch["labels"].tolist() == [[-100, -100, -100, *done[0]], [-100, *done[1], -100, -100]]
    assert batch["old_logps"][0, 3:].tolist() == r.logps[0].tolist()


def test_stop_tokens_end_a_completion_and_mask_the_rest(model: TransformerDecoder) -> None:
    free = run(model, seed=5).completions()
    stop = free[0][3]
    r = run(model, seed=5, stop_ids=[stop])  # the same draws, cut at each row's first stop
    cut = [row[: row.index(stop) + 1] if stop in row else row for row in free]
    assert r.completions() == cut
    assert any(stop not in row for row in free)  # some rows run to max_new_tokens
    assert r.finished.tolist() == [stop in row for row in free]
    for i, row in enumerate(cut):
        n = len(row)
        assert r.lengths[i] == n
        assert r.completion_mask[i].tolist() == [1] * n + [0] * (r.completion_ids.shape[1] - n)
        assert torch.all(r.completion_ids[i, n:] == 0) and torch.all(r.logps[i, n:] == 0)
        assert torch.all(r.logps[i, :n] < 0)


def test_stop_when_ends_rows_and_marks_them_finished(model: TransformerDecoder) -> None:
    r = run(model, seed=5, stop_when=lambda row, tokens: row % 2 == 0 and len(tokens) == 2)
    assert r.lengths.tolist() == [2 if i % 2 == 0 else 10 for i in range(12)]
    assert r.finished.tolist() == [i % 2 == 0 for i in range(12)]


def test_the_generator_makes_rollouts_reproducible_and_leaves_the_global_rng_alone(
    model: TransformerDecoder,
) -> None:
    torch.manual_seed(123)
    a = run(model, seed=7)
    after_a = torch.rand(1)
    torch.manual_seed(123)
    b = run(model, seed=7)
    after_b = torch.rand(1)
    assert a.completions() == b.completions() and torch.equal(a.logps, b.logps)
    assert torch.equal(after_a, after_b)
    assert run(model, seed=8).completions() != a.completions()


def test_a_restored_generator_state_resumes_the_same_draws(model: TransformerDecoder) -> None:
    generator = torch.Generator().manual_seed(11)
    run(model, generator=generator)
    state = generator.get_state()  # what a step checkpoint saves
    second = run(model, generator=generator).completions()
    resumed = torch.Generator()
    resumed.set_state(state)
    assert run(model, generator=resumed).completions() == second


def test_group_size_gives_g_rows_per_prompt_in_prompt_order(model: TransformerDecoder) -> None:
    r = run(model, group_size=5)
    assert r.completion_ids.shape[0] == 15 and r.num_prompts == 3 and r.group_size == 5
    assert r.prompt_ids == [p for p in PROMPTS for _ in range(5)]
    rows = r.completions()
    for g in range(3):
        assert len({tuple(c) for c in rows[5 * g : 5 * g + 5]}) > 1  # the group's samples differ
    # Each group is its own prompt's: a row sampled with top_k=1 equals that prompt's greedy output.
    greedy = run(model, group_size=2, top_k=1).completions()
    assert greedy[::2] == generate_batch(model, PROMPTS, max_new_tokens=10)
    assert not model.caches_are_enabled()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"prompts": []}, r"^rollout: prompts must be a non-empty list of token-id lists; got list \[\]\.$"),
        (
            {"prompts": [[1, 2], []]},
            r"^rollout: prompt 1 must be a non-empty list of int token ids; got \[\]\.$",
        ),
        (
            {"prompts": [[1, "a"]]},
            r"^rollout: prompt 0 must be a non-empty list of int token ids; got \[1, 'a'\]",
        ),
        ({"group_size": 0}, r"^rollout: group_size must be an int >= 1; got 0\.$"),
        ({"max_new_tokens": 0}, r"^rollout: max_new_tokens must be an int >= 1; got 0\.$"),
        ({"temperature": -1.0}, r"^temperature must be >= 0 \(0 means greedy decoding\); got -1\.0\.$"),
        ({"top_p": 1.5}, r"^top_p must be in \(0, 1\] or None"),
        ({"stop_ids": 2}, r"^rollout: stop_ids must be a list of int token ids \(may be empty\); got 2\.$"),
        ({"stop_ids": [2, None]}, r"^rollout: stop_ids must hold int token ids only; got \[2, None\]\.$"),
        ({"pad_id": -1}, r"^rollout: pad_id must be an int token id >= 0; got -1\.$"),
        ({"generator": 7}, r"^rollout: generator must be a torch.Generator or None; got int\.$"),
        (
            {"max_new_tokens": 60},
            r"^the longest prompt \(7 tokens\) plus max_new_tokens \(60\) is 67 tokens, more than the model's "
            r"max_seq_len \(64\); shorten the prompt or lower max_new_tokens\.$",
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line(
    model: TransformerDecoder, overrides: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match) as info:
        run(model, **overrides)
    assert "\n" not in str(info.value)
    assert not model.caches_are_enabled()


def test_a_generator_on_another_device_than_the_model_is_refused(model: TransformerDecoder) -> None:
    with pytest.raises(
        ValueError, match=r"^rollout: the generator is on cpu but the model on meta; create it with "
    ):
        run(model.to("meta"))
