"""Learned quantization ranges (learn_ranges=True) on a tiny model: they start as plain QAT's min/max
scales, train, and convert quantizes with them; saved ranges load back or are refused with a reason."""

import pytest
import torch

from ftune.checkpointing.qat_ranges import RANGE_SUFFIX, is_range_key, split_ranges
from ftune.quantization import Int8DynActInt4Weight, IntxWeightOnly, quantizer_from_spec

SCHEMES = [
    (Int8DynActInt4Weight, {"group_size": 32}),
    (Int8DynActInt4Weight, {"group_size": None}),
    (IntxWeightOnly, {"bits": 4, "group_size": 32}),
]
IDS = [f"{cls.name}{kw}" for cls, kw in SCHEMES]


def ranges_of(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if is_range_key(k)}


@pytest.mark.parametrize(("cls", "kwargs"), SCHEMES, ids=IDS)
def test_learned_ranges_start_where_plain_qat_is_and_convert_with_the_trained_scales(
    build_model, tokens, cls, kwargs
):
    plain, learned = build_model(), build_model()
    cls(**kwargs).prepare(plain)
    quantizer = cls(**kwargs, learn_ranges=True)
    fqns = quantizer.prepare(learned)
    assert sorted(ranges_of(learned)) == sorted(f + RANGE_SUFFIX for f in fqns)
    assert not ranges_of(plain)
    with torch.no_grad():
        assert torch.equal(learned(tokens), plain(tokens))  # min/max start: the same forward

    learned(tokens).logsumexp(-1).sum().backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for k, p in learned.named_parameters()
        if is_range_key(k)
    )
    with torch.no_grad():  # what training does to them: here, clip every range by a fifth
        for k, p in learned.named_parameters():
            if is_range_key(k):
                p.mul_(0.8)
        fake, min_max = learned(tokens), plain(tokens)
    assert not torch.equal(fake, min_max)
    quantizer.convert(learned)
    with torch.no_grad():
        torch.testing.assert_close(learned(tokens), fake, rtol=0, atol=1e-5)  # the learned scales, for real


def test_saved_ranges_load_back_and_bad_ones_are_refused(build_model, tokens):
    trained = build_model()
    Int8DynActInt4Weight(32, learn_ranges=True).prepare(trained)
    with torch.no_grad():
        for k, p in trained.named_parameters():
            if is_range_key(k):
                p.mul_(0.9)
    rest, ranges = split_ranges(trained.state_dict())
    assert ranges and not any(is_range_key(k) for k in rest)

    again = build_model()
    Int8DynActInt4Weight(32, learn_ranges=True).prepare(again, ranges=ranges)
    assert all(torch.equal(v, ranges[k]) for k, v in ranges_of(again).items())
    with torch.no_grad():
        assert torch.equal(again(tokens), trained(tokens))

    with pytest.raises(ValueError, match=r"holds learned quantization ranges .*learn_ranges is false"):
        Int8DynActInt4Weight(32).prepare(build_model(), ranges=ranges)
    fewer = dict(list(ranges.items())[1:])
    with pytest.raises(
        ValueError, match=r"do not match the prepared linears: missing \['layers.0.attn.q_proj"
    ):
        Int8DynActInt4Weight(32, learn_ranges=True).prepare(build_model(), ranges=fewer)
    with pytest.raises(
        ValueError, match=r"has shape \(\d+, 2\), the quantizer expects \(\d+, 4\).*group_size"
    ):
        Int8DynActInt4Weight(16, learn_ranges=True).prepare(build_model(), ranges=ranges)


def test_learn_ranges_is_a_bool_and_travels_in_the_spec():
    with pytest.raises(ValueError, match="learn_ranges must be true or false; got 'yes'"):
        Int8DynActInt4Weight(32, learn_ranges="yes")
    q = IntxWeightOnly(bits=4, group_size=32, learn_ranges=True)
    assert quantizer_from_spec(q.spec()).learn_ranges is True
    assert quantizer_from_spec(Int8DynActInt4Weight(32).spec()).learn_ranges is False
