"""AdamWBf16State: AdamW's arithmetic with bf16-stored moments; optimizer_state_bytes counts real bytes."""

import pytest
import torch

from ftune.training import AdamWBf16State, optimizer_state_bytes


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(64, 32, generator=g)),
        torch.nn.Parameter(torch.randn(32, generator=g)),
    ]


def _run(cls, steps: int, **kwargs):
    params = _params()
    opt = cls(params, lr=1e-2, weight_decay=0.1, **kwargs)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return params, opt


def test_first_step_equals_torch_adamw_and_later_steps_stay_close():
    # Step 1: m = 0.1 g and v = 0.001 g^2 are rounded to bf16, but the update uses the fp32 values.
    ours, _ = _run(AdamWBf16State, 1)
    ref, _ = _run(torch.optim.AdamW, 1)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    ours, opt = _run(AdamWBf16State, 20)
    ref, _ = _run(torch.optim.AdamW, 20)
    drift = max((a - b).abs().max().item() for a, b in zip(ours, ref))
    assert 0 < drift < 1e-3  # bf16 moments: close to AdamW, not identical
    assert {v.dtype for s in opt.state.values() for k, v in s.items() if k != "step"} == {torch.bfloat16}


def test_state_is_half_of_fp32_adamw_and_stays_bf16_after_load():
    _, ours = _run(AdamWBf16State, 2)
    _, ref = _run(torch.optim.AdamW, 2)
    moments = 2 * (64 * 32 + 32)
    assert optimizer_state_bytes(ref) == moments * 4 + 2 * 4  # + one fp32 step counter per parameter
    assert optimizer_state_bytes(ours) == moments * 2 + 2 * 4
    fresh = AdamWBf16State(_params(), lr=1e-2, weight_decay=0.1)
    fresh.load_state_dict(ours.state_dict())
    for s_new, s_old in zip(fresh.state.values(), ours.state.values()):
        assert s_new["exp_avg"].dtype == torch.bfloat16
        assert torch.equal(s_new["exp_avg_sq"], s_old["exp_avg_sq"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, r"lr \(-1.0\), eps .* must be >= 0"),
        ({"betas": (0.9, 1.0)}, r"betas must be in \[0, 1\)"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdamWBf16State(_params(), **kwargs)


def test_quantized_state_bytes_count_codes_not_logical_size(monkeypatch):
    monkeypatch.setattr(
        torch, "compile", lambda fn=None, **kwargs: fn
    )  # torchao compiles its step; eager here
    import torchao.optim

    p = torch.nn.Parameter(torch.randn(256, 256))
    opt = torchao.optim.AdamW8bit([p])
    p.grad = torch.randn_like(p)
    opt.step()
    # two moments: 1 byte a code, one fp32 scale per 256-value block, a 256-entry fp32 code map; + step
    assert optimizer_state_bytes(opt) == 2 * (256 * 256 + 256 * 4 + 256 * 4) + 4
