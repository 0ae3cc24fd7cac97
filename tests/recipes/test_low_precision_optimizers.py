"""Low-precision optimizers as the optimizer component: they train, and resume bit for bit.

torchao's AdamW8bit/AdamW4bit run their per-parameter step through `torch.compile(fullgraph=True,
dynamic=False)`, which on this CPU costs ~35 s per distinct parameter shape. The tests replace
`torch.compile` with the identity while they run, so the same step code runs eagerly; what is
tested (the state's type, its save and load through recipe_state.pt, exact resume) does not depend
on compilation.
"""

import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from ftune.checkpointing import load_recipe_state

# End to end through a recipe: one torchao variant and ftune's own (AdamW4bit's state round trip,
# the same code path as AdamW8bit's, is checked below without a recipe run).
OPTIMIZERS = {
    "torchao.optim.AdamW8bit": "OptimState8bit",
    "ftune.training.AdamWBf16State": "Tensor",
}
CONFIG = "smollm2/135M_full"
RECIPE = "full_finetune_single_device"


@pytest.fixture
def eager_torchao(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kwargs: fn)


def _losses(logs):
    return [row["loss"] for row in logs if "loss" in row]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_low_precision_optimizer_trains_and_resumes_exactly(optimizer, run_recipe, tmp_path, eager_torchao):
    opt = [
        f"optimizer._component_={optimizer}",
        "~optimizer.weight_decay",
        "~optimizer.fused",
        "optimizer.lr=1e-3",
    ]
    out = tmp_path / "run"
    straight, _ = run_recipe(RECIPE, CONFIG, "max_steps=4", "save_every_n_steps=2", *opt, output_dir=out)
    assert _losses(straight)[-1] < _losses(straight)[0]  # it trains
    state = load_recipe_state(out / "step_2")["optimizer"]["state"]
    big = max(state.values(), key=lambda s: s["exp_avg"].numel())  # torchao keeps small tensors in fp32
    assert type(big["exp_avg"]).__name__ == OPTIMIZERS[optimizer]
    if optimizer.startswith("ftune"):
        assert big["exp_avg"].dtype == big["exp_avg_sq"].dtype == torch.bfloat16

    final = load_file(str(out / "step_4/model.safetensors"))
    shutil.rmtree(out / "step_4")  # the interruption: resume from step 2
    (out / "logs").rename(tmp_path / "straight_logs")
    resumed, _ = run_recipe(
        RECIPE, CONFIG, "max_steps=4", "checkpointer.resume_from_checkpoint=auto", *opt, output_dir=out
    )
    assert _losses(straight)[:2] + _losses(resumed) == _losses(straight)
    again = load_file(str(out / "step_4/model.safetensors"))
    for k in final:
        assert torch.equal(final[k], again[k]), k


@pytest.mark.parametrize("name", ["AdamW8bit", "AdamW4bit"])
def test_quantized_state_round_trips_through_recipe_state(name, tmp_path, eager_torchao):
    import torchao.optim

    from ftune.checkpointing import save_recipe_state

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(256, 256)
        return model, getattr(torchao.optim, name)(model.parameters(), lr=1e-2)

    def step(model, optimizer, seed):
        g = torch.Generator().manual_seed(seed)
        model(torch.randn(4, 256, generator=g)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    straight, opt = make()
    for seed in range(2):
        step(straight, opt, seed)
    save_recipe_state({"optimizer": opt.state_dict(), "model": straight.state_dict()}, tmp_path)
    step(straight, opt, 2)

    resumed, opt2 = make()
    state = load_recipe_state(tmp_path)
    resumed.load_state_dict(state["model"])
    opt2.load_state_dict(state["optimizer"])
    assert type(opt2.state[resumed.weight]["exp_avg"]).__name__ == f"OptimState{name[5:]}"
    step(resumed, opt2, 2)
    assert torch.equal(resumed.weight, straight.weight) and torch.equal(resumed.bias, straight.bias)


def test_quantized_state_loads_in_a_fresh_process(tmp_path, eager_torchao):
    """A resumed run reads recipe_state.pt before building its optimizer, i.e. before torchao is imported."""
    import torchao.optim

    model = torch.nn.Linear(256, 256)
    optimizer = torchao.optim.AdamW8bit(model.parameters())
    model(torch.randn(2, 256)).sum().backward()
    optimizer.step()
    from ftune.checkpointing import save_recipe_state

    save_recipe_state({"optimizer": optimizer.state_dict()}, tmp_path)
    code = (
        "import sys; from ftune.checkpointing import load_recipe_state\n"
        "assert 'torchao' not in sys.modules\n"
        f"s = load_recipe_state({str(tmp_path)!r})['optimizer']['state'][0]['exp_avg']\n"
        "print(type(s).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "OptimState8bit", out.stderr
