"""benchmarks/reward_demo.py's arguments and dry run: the stages' commands, without weights or data."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import reward_demo  # noqa: E402


def test_dry_run_prints_each_stage_command(tmp_path, capsys):
    sft = tmp_path / "sft_merged"
    reward_demo.main(
        ["--dry-run", "--sft-merged", str(sft), "--out", str(tmp_path / "out"), "--rm-steps", "7"]
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    names = [line.split("]")[0][1:] for line in lines]
    assert names == ["eval_sft", "rm", "grpo_reward_model", "grpo_exact_match", "ppo", "eval_grpo_reward_model",
                     "eval_grpo_exact_match", "eval_ppo"]  # fmt: skip
    by = dict(zip(names, lines, strict=True))
    rm_step = tmp_path / "out" / "rm" / "step_7"
    assert "checkpointer.save_adapter_weights_only=false" in by["rm"] and "max_steps=7" in by["rm"]
    # The two GRPO runs differ in their reward weights only; both read the trained reward model.
    assert "rewards.weights.correct=0.0 rewards.weights.preference=1.0" in by["grpo_reward_model"]
    assert "rewards.weights.correct=1.0 rewards.weights.preference=0.0" in by["grpo_exact_match"]
    strip = lambda line: line.split("] ", 1)[1].replace("reward_model", "X").replace("exact_match", "X")  # noqa: E731
    assert strip(by["grpo_reward_model"]).replace("=0.0", "=W").replace("=1.0", "=W") == strip(
        by["grpo_exact_match"]
    ).replace("=0.0", "=W").replace("=1.0", "=W")
    assert f"rewards.rewards.preference.adapter_dir={rm_step}" in by["grpo_exact_match"]
    # PPO: the merged reward model is its reward model and its value model's start; the SFT model its policy.
    for key in ("value_checkpointer", "reward_checkpointer"):
        assert f"{key}.checkpoint_dir={rm_step / 'merged'}" in by["ppo"]
    assert f"checkpointer.checkpoint_dir={sft}" in by["ppo"]
    assert f"checkpointer.checkpoint_dir={tmp_path / 'out' / 'ppo' / 'step_10'}" in by["eval_ppo"]
    assert not (tmp_path / "out" / "eval_sft.log").exists(), "the dry run ran something"


@pytest.mark.parametrize("arg", ["--grpo-steps=0", "--minutes=0", "--ppo-steps=-1"])
def test_bad_budgets_are_refused(arg, capsys):
    with pytest.raises(SystemExit):
        reward_demo.parse_args([arg])
    assert arg.split("=")[0] in capsys.readouterr().err
