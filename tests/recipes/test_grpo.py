"""The GRPO recipes end to end on the tiny checkpoint: the reference, the KL term, reused rollouts, exact
resume, validation and the sampling's independence from the batch split. Each check of a GRPO-specific
guarantee comes with a mutant (the guarantee's code replaced by the plausible wrong one, through
monkeypatch) that the check must fail on: `killed` below.

The tiny runs (tests/assets/tiny_grpo.py) score completions with a reward that varies between a random
model's completions. A GRPO loss at the first update is ~0 by construction (ratio 1, advantages summing
to 0 per group, no KL yet): the checks read gradient norms, rewards, KL and the trained weights.
"""

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from run_logs import _weights
from spies import models_run

import ftune.training.methods.reference as reference_module
from ftune import training
from ftune.settings import GRPOSettings

LORA, FULL = "lora_grpo_single_device", "full_grpo_single_device"
CONFIG = {LORA: "smollm2/135M_lora_grpo", FULL: "smollm2/135M_full_grpo"}
# Updates large enough to move the policy away from the reference in a step or two.
MOVE = ("optimizer.lr=0.02", "lr_scheduler.num_warmup_steps=0", "loss.beta=0.5")


def col(logs, key):
    return [r[key] for r in logs if key in r and "loss" in r]


def killed(check, mutate, monkeypatch, tmp_path):
    """The check fails (AssertionError) with the mutant applied (its runs in a folder of their own)."""
    with monkeypatch.context() as m:
        mutate(m)
        with pytest.raises(AssertionError):
            check(tmp_path / "mutant")


def test_lora_reference_is_the_policy_with_adapters_off(run_recipe, tmp_path, monkeypatch):
    def check(tmp_path):
        entered = []
        real = reference_module.adapters_disabled

        def spy(model):
            entered.append(model)
            return real(model)

        with monkeypatch.context() as m, models_run() as models:
            m.setattr(reference_module, "adapters_disabled", spy)
            logs, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=3", *MOVE, output_dir=tmp_path / "r")
        assert len(models) == 1, f"{len(models)} models ran: the LoRA reference must be no second copy"
        assert entered and all(e is models[0] for e in entered), (
            "the reference pass did not switch adapters off"
        )
        kl = col(logs, "kl")
        assert kl[0] == pytest.approx(0.0, abs=1e-6) and kl[-1] > 1e-4, f"KL per step: {kl}"

    check(tmp_path)

    def reference_is_policy(m):  # the reference pass with the adapters left on: KL stays 0
        m.setattr(reference_module, "adapters_disabled", lambda model: contextlib.nullcontext())

    killed(check, reference_is_policy, monkeypatch, tmp_path)


def test_full_reference_is_a_frozen_copy_and_beta_0_runs_none(run_recipe, tmp_path, monkeypatch):
    with models_run() as models:
        logs, _ = run_recipe(FULL, CONFIG[FULL], "max_steps=3", *MOVE, output_dir=tmp_path / "f")
    assert len(models) == 2, "the full recipe's reference is a second model"
    policy, ref = models
    assert not any(p.requires_grad for p in ref.parameters()) and not ref.training
    assert col(logs, "kl")[-1] > 1e-4

    calls = []
    real = training.ReferenceModel.scores
    monkeypatch.setattr(training.ReferenceModel, "scores", lambda *a: calls.append(1) or real(*a))
    logs, _ = run_recipe(
        FULL, CONFIG[FULL], "max_steps=2", *MOVE, "loss.beta=0.0", output_dir=tmp_path / "b0"
    )
    assert not calls and col(logs, "kl") == [0.0, 0.0], "beta 0 must run no reference pass"


def test_the_kl_term_reaches_the_gradient(run_recipe, tmp_path, monkeypatch):
    """beta scales a real term: at step 2 (the policy moved) the gradient differs with beta 0.5 and 0."""

    def check(tmp_path):
        with_kl, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=2", *MOVE, output_dir=tmp_path / "k")
        without, _ = run_recipe(
            LORA, CONFIG[LORA], "max_steps=2", *MOVE, "loss.beta=0.0", output_dir=tmp_path / "n"
        )
        assert col(with_kl, "grad_norm")[0] == pytest.approx(col(without, "grad_norm")[0], rel=1e-5)
        assert col(with_kl, "grad_norm")[1] != pytest.approx(col(without, "grad_norm")[1], rel=1e-3)

    check(tmp_path)

    killed(check, _kl_dropped, monkeypatch, tmp_path)


def _kl_dropped(m):
    """Mutant: GRPOLoss without its KL term (the reference still runs, its result is ignored)."""
    real = training.GRPOLoss.forward

    def forward(self, logps, old, ref, adv, mask):
        beta, self.beta = self.beta, 0.0
        try:
            return real(self, logps, old, None, adv, mask)
        finally:
            self.beta = beta

    m.setattr(training.GRPOLoss, "forward", forward)


def test_reused_rollout_clips_the_ratio_and_resumes_exactly(run_recipe, tmp_path, monkeypatch):
    """num_iterations=2: steps 1-2 train on one rollout, 3-4 on the next; a stop after step 1 (inside the
    reuse) resumes with the saved rollout: the same figures and weights as the run without a stop."""
    reuse = ("num_iterations=2", "grad_accum_steps=2", "batch_size=2", "loss.epsilon=0.02", *MOVE)

    def check(tmp_path):
        straight, a = run_recipe(LORA, CONFIG[LORA], "max_steps=4", *reuse, output_dir=tmp_path / "a")
        rollout_s = col(straight, "time/rollout_s")
        assert rollout_s[0] > 0 and rollout_s[1] == 0 and rollout_s[2] > 0 and rollout_s[3] == 0, rollout_s
        rewards = col(straight, "reward")
        assert rewards[0] == rewards[1] and rewards[2] == rewards[3]  # one rollout, served twice
        clipped = col(straight, "clip_ratio/region")
        assert clipped[0] == 0 and clipped[1] > 0, f"clip ratio per step: {clipped}"  # the second pass clips

        first, b = run_recipe(LORA, CONFIG[LORA], "max_steps=4", "save_every_n_steps=1",
                              "checkpointer.keep_last_n_checkpoints=4", *reuse, output_dir=tmp_path / "b")  # fmt: skip
        for later in ("step_2", "step_3", "step_4", "logs"):
            shutil.rmtree(b / later)
        second, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=4", "checkpointer.resume_from_checkpoint=auto",
                               *reuse, output_dir=b)  # fmt: skip
        for key in ("loss", "grad_norm", "reward", "kl", "completions/mean_length"):
            assert col(first, key)[:1] + col(second, key) == col(straight, key), key
        wa, wb = _weights(a / "step_4"), _weights(b / "step_4")
        assert all(torch.equal(wa[k], wb[k]) for k in wa)

    check(tmp_path)

    def old_logps_not_kept(m):  # each pass takes the current log-probabilities as the old ones: ratio 1
        import ftune.training.methods.rollout_batch as rb

        m.setattr(rb, "_policy_logps", lambda *args: None)

    killed(check, old_logps_not_kept, monkeypatch, tmp_path)


def test_completions_do_not_depend_on_the_batch_split(run_recipe, tmp_path, monkeypatch):
    """4 prompts a micro-batch or 2 micro-batches of 2: the same completions and the same step (the
    property that makes a world of 2 sample what one device samples)."""

    def check(tmp_path):
        one, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=2", "batch_size=4", output_dir=tmp_path / "one")
        two, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=2", "batch_size=2", "grad_accum_steps=2",
                            output_dir=tmp_path / "two")  # fmt: skip
        for key in ("reward", "completions/mean_length"):
            assert col(one, key) == pytest.approx(col(two, key), rel=1e-6), key
        assert col(one, "grad_norm") == pytest.approx(col(two, "grad_norm"), rel=1e-4)

    check(tmp_path)

    def one_generator_per_batch(m):  # one random stream for the whole micro-batch
        import ftune.training.methods.rollout_batch as rb

        m.setattr(rb, "row_generators", lambda seed, epoch, indices, g, device: None)

    killed(check, one_generator_per_batch, monkeypatch, tmp_path)


def test_validation_samples_the_held_out_prompts_and_leaves_training_alone(run_recipe, tmp_path):
    plain, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=4", output_dir=tmp_path / "p")
    logs, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=4", "run_val_every_n_steps=2", "max_val_batches=2",
                         output_dir=tmp_path / "v")  # fmt: skip
    val = [r for r in logs if "val_reward" in r]
    assert [r["step"] for r in val] == [2, 4]
    assert {"val_reward", "val_reward_std", "val_completions/mean_length", "val_kl"} <= val[0].keys()
    for key in ("grad_norm", "reward", "loss"):
        assert col(logs, key) == col(plain, key), key  # validation draws from its own seeds


def test_grpo_settings_refuse_what_cannot_train():
    bad = GRPOSettings(group_size=1, temperature=0.0, top_p=1.5, num_iterations=0, optimizer_in_backward=True)
    text = "\n".join(bad.problems())
    for key in ("group_size", "temperature", "top_p", "num_iterations", "optimizer_in_backward"):
        assert f"{key}:" in text, key
    assert not GRPOSettings().problems()


def test_the_step_logs_what_a_trl_user_reads(run_recipe, tmp_path):
    logs, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=1", output_dir=tmp_path / "m")
    want = {
        "reward", "reward_std", "frac_reward_zero_std", "rewards/varied/mean", "rewards/varied/std",
        "completions/mean_length", "completions/max_length", "completions/clipped_ratio", "kl",
        "clip_ratio/low", "clip_ratio/high", "clip_ratio/region", "time/rollout_s", "step_seconds",
    }  # fmt: skip
    assert want <= logs[0].keys(), sorted(want - logs[0].keys())
    assert 0 <= logs[0]["reward"] <= 1 and logs[0]["completions/mean_length"] <= 6


GOLDENS = Path(__file__).parent / "goldens" / "single_device.json"


def figures(logs):
    """What a GRPO golden holds: the loss (~0 at ratio 1), the gradient norm and the mean reward per step."""
    return {key: col(logs, key) for key in ("loss", "grad_norm", "reward")}


def assert_same_figures(got, want):
    assert got["loss"] == pytest.approx(want["loss"], abs=1e-6)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
    assert got["reward"] == pytest.approx(want["reward"], rel=1e-6)  # the same completions


@pytest.mark.parametrize("recipe", [LORA, FULL])
def test_golden_figures(recipe, run_recipe, request):
    """4 steps of each one-device GRPO recipe; the distributed ones give the same at world size 2
    (tests/recipes/test_distributed.py)."""
    logs, _ = run_recipe(recipe, CONFIG[recipe], "max_steps=4")
    goldens = json.loads(GOLDENS.read_text())
    if request.config.getoption("--update-goldens"):
        goldens[recipe] = figures(logs)
        GOLDENS.write_text(json.dumps(goldens, indent=2) + "\n")
    assert recipe in goldens, "no golden figures yet: run pytest tests/recipes/test_grpo.py --update-goldens"
    assert_same_figures(figures(logs), goldens[recipe])


def test_stop_strings_end_completions(run_recipe, tmp_path):
    """A completion ends at the first token that completes a stop string (the string kept in it)."""
    plain, _ = run_recipe(LORA, CONFIG[LORA], "max_steps=1", output_dir=tmp_path / "p")
    stopped, _ = run_recipe(
        LORA, CONFIG[LORA], "max_steps=1", "stop_strings=[a, e, o, i]", output_dir=tmp_path / "s"
    )
    assert col(plain, "completions/clipped_ratio")[0] == 1.0  # a tiny random model never emits a stop token
    assert col(stopped, "completions/mean_length")[0] < col(plain, "completions/mean_length")[0]
    assert col(stopped, "completions/clipped_ratio")[0] < 1.0
