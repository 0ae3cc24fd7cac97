import copy
import functools

import pytest
import torch
from recipe_step import train_step

from ftune.settings import check_optimizer_in_backward
from ftune.training.features.optimizer_in_backward import OptimizerInBackward
from ftune.training.step.loss import CrossEntropyLoss
from ftune.training.step.schedulers import cosine_with_warmup
from ftune.training.step.step_loss import NonFiniteError

CPU = torch.device("cpu")


def _batches(batch_factory, n: int):
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, 64, (2, 8), generator=g).tolist()
        out.append(batch_factory(tokens, tokens))
    return out


def _run(model, optimizer, batches, *, scheduler=None, start: int = 1) -> list[float]:
    return [
        train_step(model, CrossEntropyLoss(), [b], optimizer, step=i, device=CPU, scheduler=scheduler).loss
        for i, b in enumerate(batches, start=start)
    ]


@pytest.mark.parametrize(
    "make",
    [functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9), functools.partial(torch.optim.AdamW, lr=1e-2)],
)
def test_equals_a_normal_optimizer_with_a_scheduler(tiny_model, batch_factory, make):
    batches = _batches(batch_factory, 4)
    model = tiny_model()
    twin = copy.deepcopy(model)
    opt = make(model.parameters())
    losses = _run(
        model, opt, batches, scheduler=cosine_with_warmup(opt, num_warmup_steps=1, num_training_steps=4)
    )
    opt_bwd = OptimizerInBackward(twin.parameters(), make)
    sched = cosine_with_warmup(opt_bwd, num_warmup_steps=1, num_training_steps=4)
    losses_bwd = _run(twin, opt_bwd, batches, scheduler=sched)

    assert losses_bwd == pytest.approx(losses, rel=1e-6)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
    assert all(p.grad is None for p in twin.parameters())  # freed as soon as used
    assert {g["lr"] for g in opt_bwd._optimizers[0].param_groups} == {sched.get_last_lr()[0]}


def test_state_dict_resume_equals_straight_run(tiny_model, batch_factory):
    batches = _batches(batch_factory, 4)
    make = functools.partial(torch.optim.AdamW, lr=1e-2)
    model = tiny_model()
    resumed = copy.deepcopy(model)
    straight = _run(model, OptimizerInBackward(model.parameters(), make), batches)

    opt = OptimizerInBackward(resumed.parameters(), make)
    _run(resumed, opt, batches[:2])
    state = copy.deepcopy(opt.state_dict())
    opt.remove_hooks()
    fresh = OptimizerInBackward(resumed.parameters(), make)
    fresh.load_state_dict(state)
    assert _run(resumed, fresh, batches[2:], start=3) == pytest.approx(straight[2:], rel=1e-6)
    for p, q in zip(model.parameters(), resumed.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_incompatible_settings_raise(tiny_model, batch_factory):
    batches = _batches(batch_factory, 2)
    model = tiny_model()
    opt = OptimizerInBackward(model.parameters(), functools.partial(torch.optim.SGD, lr=0.1))
    with pytest.raises(
        ValueError, match="optimizer_in_backward needs grad_accum_steps=1, got grad_accum_steps=2"
    ):
        train_step(model, CrossEntropyLoss(), batches, opt, step=1, device=CPU)
    with pytest.raises(
        ValueError, match=r"cannot clip gradients \(clip_grad_norm=1.0\).*Set clip_grad_norm=null"
    ):
        check_optimizer_in_backward(grad_accum_steps=1, clip_grad_norm=1.0)
    with pytest.raises(ValueError, match=r"expected \{'optimizers': \[...\]\} with \d+ entries .* got 1"):
        opt.load_state_dict({"optimizers": [{}]})
    with pytest.raises(ValueError, match="needs a non-empty iterable of parameters"):
        OptimizerInBackward([], torch.optim.SGD)


def test_non_finite_loss_raises_before_any_weight_changes(tiny_model, batch_factory):
    (batch,) = _batches(batch_factory, 1)
    model = tiny_model()
    with torch.no_grad():
        model.output.weight[0, 0] = float("inf")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = OptimizerInBackward(model.parameters(), functools.partial(torch.optim.SGD, lr=0.1))
    with pytest.raises(NonFiniteError, match="at step 5"):
        train_step(model, CrossEntropyLoss(), [batch], opt, step=5, device=CPU)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
