import math

import pytest
import torch

from ftune.training.step.schedulers import constant_with_warmup, cosine_with_warmup, linear_with_warmup


def _lrs(make, steps: int, **kwargs) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = make(opt, **kwargs)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_constant_with_warmup():
    assert _lrs(constant_with_warmup, 6, num_warmup_steps=4) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0])
    assert _lrs(constant_with_warmup, 3, num_training_steps=10) == pytest.approx([2.0, 2.0, 2.0])


def test_linear_with_warmup():
    lrs = _lrs(linear_with_warmup, 14, num_warmup_steps=2, num_training_steps=12, min_lr_ratio=0.1)
    assert lrs[:3] == pytest.approx([0.0, 1.0, 2.0])
    assert lrs[7] == pytest.approx(2.0 * (1 - 0.9 * 0.5))  # half-way through the decay
    assert lrs[12:] == pytest.approx([0.2, 0.2])  # at and past num_training_steps: the floor


def test_cosine_with_warmup():
    lrs = _lrs(cosine_with_warmup, 13, num_warmup_steps=4, num_training_steps=12)
    assert lrs[:5] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert lrs[6] == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert lrs[8] == pytest.approx(1.0)  # midpoint of the decay
    assert lrs[12] == pytest.approx(0.0, abs=1e-12)
    floor = _lrs(cosine_with_warmup, 11, num_warmup_steps=0, num_training_steps=10, min_lr_ratio=0.25)
    assert floor[0] == pytest.approx(2.0) and floor[10] == pytest.approx(0.5)


def test_resume_continues_the_schedule():
    straight = _lrs(cosine_with_warmup, 8, num_warmup_steps=2, num_training_steps=8)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = cosine_with_warmup(opt, num_warmup_steps=2, num_training_steps=8)
    for _ in range(3):
        opt.step()
        sched.step()
    state = sched.state_dict()
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched2 = cosine_with_warmup(opt2, num_warmup_steps=2, num_training_steps=8)
    sched2.load_state_dict(state)
    resumed = []
    for _ in range(5):
        resumed.append(sched2.get_last_lr()[0])
        opt2.step()
        sched2.step()
    assert resumed == pytest.approx(straight[3:])


def test_errors_name_the_argument():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(
        ValueError, match="linear_with_warmup: num_training_steps must be an int >= 0, got -1"
    ):
        linear_with_warmup(opt, num_warmup_steps=0, num_training_steps=-1)
    with pytest.raises(ValueError, match=r"min_lr_ratio must be in \[0, 1\], got 1.5"):
        cosine_with_warmup(opt, num_warmup_steps=0, num_training_steps=10, min_lr_ratio=1.5)
    with pytest.raises(
        ValueError, match="constant_with_warmup: num_warmup_steps must be an int >= 0, got 2.5"
    ):
        constant_with_warmup(opt, num_warmup_steps=2.5)


@pytest.mark.parametrize("make", [constant_with_warmup, linear_with_warmup, cosine_with_warmup])
def test_warmup_longer_than_the_run_is_clamped_with_one_warning(make, caplog):
    # A smoke test (max_steps=3) with a shipped config's 10 warm-up steps must run.
    with caplog.at_level("WARNING", logger="ftune.training.step.schedulers"):
        clamped = _lrs(make, 4, num_warmup_steps=10, num_training_steps=3)
    assert clamped == _lrs(make, 4, num_warmup_steps=3, num_training_steps=3)
    assert clamped[:3] == pytest.approx([0.0, 2 / 3, 4 / 3])  # the warm-up spans the whole run
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "num_warmup_steps (10) is larger than the run's num_training_steps (3)" in warnings[0]
    assert "\n" not in warnings[0]
