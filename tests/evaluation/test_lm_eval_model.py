"""FtuneLM's scoring against a direct computation on the tiny llama: log-likelihoods, greedy flags,
left truncation, batching, BOS handling and stop strings (parity with lm-eval's HF model is in
tests/recipes/test_eval_lm_eval.py)."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from ftune.evaluation.lm_eval_model import FtuneLM  # noqa: E402
from ftune.generation import generate  # noqa: E402


def direct_loglikelihood(model, context: list[int], continuation: list[int]) -> tuple[float, bool]:
    """Independently: one forward over context + continuation, read each continuation token's log-prob."""
    seq = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = F.log_softmax(model(seq)[0, :-1].float(), dim=-1)  # position t predicts seq[t + 1]
    rows = logprobs[len(context) - 1 :]
    target = torch.tensor(continuation)
    return float(rows.gather(-1, target[:, None]).sum()), bool((rows.argmax(-1) == target).all())


def request(kind: str, *args, idx: int = 0) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=idx, metadata=("t", idx, 1))


def test_loglikelihood_equals_a_direct_forward_whatever_the_batch(model, tokenizer):
    pairs = [("The date is", " 2023-07-14"), ("A", "bc"), ("Rewrite the date 1999-07-02 as", " 02/07/1999")]
    results = [
        FtuneLM(model, tokenizer, batch_size=b).loglikelihood([request("loglikelihood", *p) for p in pairs])
        for b in (1, 2, 8)
    ]
    for other in results[1:]:
        assert [g for _, g in other] == [g for _, g in results[0]]
        assert [ll for ll, _ in other] == pytest.approx([ll for ll, _ in results[0]], abs=1e-5)
    for (context, continuation), (ll, greedy) in zip(pairs, results[0]):
        want = direct_loglikelihood(model, list(context.encode()), list(continuation.encode()))
        assert ll == pytest.approx(want[0], abs=1e-5) and greedy == want[1]


def test_greedy_flag_and_left_truncation(model, tokenizer):
    context = "Rewrite the date 2023-07-14 in the format DD/MM/YYYY:"
    # One character per byte (latin-1), so any greedy byte is a character that encodes back to it.
    tokenizer.encode = lambda text, add_bos=True, add_eos=True: list(text.encode("latin-1"))
    greedy = generate(model, list(context.encode()), max_new_tokens=3)
    assert all(t < 256 for t in greedy), greedy
    continuation = bytes(greedy).decode("latin-1")
    (ll, is_greedy), (_, not_greedy) = FtuneLM(model, tokenizer, max_length=16).loglikelihood(
        [
            request("loglikelihood", context, continuation),
            request("loglikelihood", context, continuation[::-1]),
        ]
    )
    assert is_greedy and (not_greedy is (continuation[::-1] == continuation))
    # 16 inputs: the last 17 tokens of context + continuation, the final one only a target.
    tokens = list(context.encode()) + greedy
    assert ll == pytest.approx(direct_loglikelihood(model, tokens[-17:-3], greedy)[0], abs=1e-5)
    assert ll != pytest.approx(direct_loglikelihood(model, tokens[:-3], greedy)[0], abs=1e-5)


def test_bos_is_added_once_as_the_tokenizer_does(model, tokenizer):
    tokenizer.bos_id = 259
    tokenizer.encode = lambda text, add_bos=True, add_eos=True: [259] * add_bos + list(text.encode())
    decode = tokenizer.decode
    tokenizer.decode = lambda ids, skip_special_tokens=True: "".join(
        "<s>" if i == 259 and not skip_special_tokens else decode([i], skip_special_tokens) for i in ids
    )
    lm = FtuneLM(model, tokenizer)
    assert lm.tok_encode("ab") == [259, 97, 98]
    assert lm.tok_encode("<s>ab") == list(b"<s>ab")  # already starts with BOS's text: no second one
    assert lm.tok_encode("ab", add_special_tokens=False) == [97, 98]
    assert lm.prefix_token_id == 259


def test_generation_stops_at_the_first_stop_string(model, tokenizer):
    prompt = "Rewrite the date 2023-07-14:"
    free = FtuneLM(model, tokenizer).generate_until(
        [request("generate_until", prompt, {"max_gen_toks": 12})]
    )[0]
    assert len(free) >= 3
    stop = free[1:3]
    got = FtuneLM(model, tokenizer).generate_until(
        [request("generate_until", prompt, {"until": [stop], "max_gen_toks": 12})]
    )[0]
    assert got == free.split(stop)[0]
    with pytest.raises(ValueError, match=r"generation_kwargs \['num_beams'\] of task 't' are not supported"):
        FtuneLM(model, tokenizer).generate_until([request("generate_until", prompt, {"num_beams": 2})])
