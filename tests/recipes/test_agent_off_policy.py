"""Rollouts beside training in the agent recipe: a worker process samples up to max_off_policy_steps ahead.

Staleness 0 (a worker, refreshed every step, sampling each step's batch with the current weights) is
exactly the synchronous run; with staleness 1, steps after the first train on rollouts an older policy
sampled, with truncated importance weights; a run stopped and resumed equals the run without a stop.
"""

import multiprocessing
import shutil

import torch
from run_logs import _weights
from test_agent import AGENT, CONFIG
from test_grpo import col

from ftune import training

# Updates large enough for the policy to move between steps (a stale sampler then differs from it).
MOVE = ("optimizer.lr=0.05", "lr_scheduler.num_warmup_steps=0", "batch_size=2")
KEYS = ("loss", "grad_norm", "reward", "kl", "trajectories/turns", "completions/mean_length")


def _spy_stale(monkeypatch) -> list[bool]:
    """Records, per micro-batch, whether the recipe finished it as a stale rollout."""
    stale, real = [], training.rollout_batch

    def spy(*args, importance_cap=None, **kwargs):
        stale.append(importance_cap is not None)
        return real(*args, importance_cap=importance_cap, **kwargs)

    monkeypatch.setattr(training, "rollout_batch", spy)
    return stale


def test_staleness_zero_is_the_synchronous_run(run_recipe, tmp_path, monkeypatch):
    sync, a = run_recipe(AGENT, CONFIG, "max_steps=3", *MOVE, output_dir=tmp_path / "a")
    stale = _spy_stale(monkeypatch)
    worker, b = run_recipe(AGENT, CONFIG, "max_steps=3", "max_off_policy_steps=0", *MOVE,
                           output_dir=tmp_path / "b")  # fmt: skip
    assert stale == [False, False, False]
    assert not multiprocessing.active_children(), "the rollout worker process outlived its run"
    for key in KEYS:
        assert col(worker, key) == col(sync, key), key
    assert col(sync, "loss") != [0.0, 0.0, 0.0] and col(sync, "grad_norm")[0] > 0
    wa, wb = _weights(a / "step_3"), _weights(b / "step_3")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_one_step_stale_rollouts_are_weighted_and_resume_exactly(run_recipe, tmp_path, monkeypatch):
    beside = ("max_off_policy_steps=1", *MOVE)
    stale = _spy_stale(monkeypatch)
    straight, a = run_recipe(AGENT, CONFIG, "max_steps=4", *beside, output_dir=tmp_path / "a")
    assert stale == [
        False,
        True,
        True,
        True,
    ]  # step 1 samples with the start's weights, the others lag one step
    weights = col(straight, "sampling/importance_weight/mean")
    assert len(weights) == 3 and all(w != 1.0 for w in weights), weights
    sync, _ = run_recipe(AGENT, CONFIG, "max_steps=4", *MOVE, output_dir=tmp_path / "s")
    assert (
        col(sync, "loss")[0] == col(straight, "loss")[0]
        and col(sync, "loss")[1:] != col(straight, "loss")[1:]
    )

    first, b = run_recipe(
        AGENT, CONFIG, "max_steps=4", "save_every_n_steps=2", *beside, output_dir=tmp_path / "b"
    )
    for later in ("step_4", "logs"):
        shutil.rmtree(b / later)
    second, _ = run_recipe(AGENT, CONFIG, "max_steps=4", "checkpointer.resume_from_checkpoint=auto", *beside,
                           output_dir=b)  # fmt: skip
    for key in (*KEYS, "sampling/importance_weight/mean"):
        assert col(first, key)[: len(col(first, key)) - len(col(second, key))] + col(second, key) == col(
            straight, key
        ), key
    wa, wb = _weights(a / "step_4"), _weights(b / "step_4")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
