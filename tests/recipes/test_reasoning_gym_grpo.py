"""A reasoning-gym task through GRPO: 2 steps from the shipped config smollm2/135M_reasoning_gym_lora_grpo on
the tiny checkpoint, offline (reasoning-gym generates the task from its seed), the task's own scorer and the
format reward logged under their names."""

from omegaconf import OmegaConf
from test_grpo import col

import ftune.rewards.checkers as checkers
from ftune.config import instantiate, load_config
from ftune.datasets.reasoning_tasks import reasoning_gym_records

LORA, CONFIG = "lora_grpo_single_device", "smollm2/135M_reasoning_gym_lora_grpo"


def test_the_shipped_config_names_the_task_and_its_scorer():
    cfg = load_config(CONFIG, [])
    assert cfg.dataset._component_ == "ftune.datasets.reasoning_gym_dataset"
    assert (cfg.dataset.task, cfg.dataset.seed, cfg.dataset_val.seed) == ("basic_arithmetic", 0, 1)
    rewards = cfg.rewards.rewards
    assert rewards.correct._component_ == "ftune.rewards.ReasoningGymScore"
    assert rewards.format._component_ == "ftune.rewards.RegexMatch"
    assert dict(cfg.rewards.weights) == {"correct": 1.0, "format": 0.1}


def test_the_shipped_rewards_pay_the_tasks_answer_in_its_tag():
    cfg = load_config(CONFIG, [])
    task_config = OmegaConf.to_container(cfg.dataset.task_config)
    records = reasoning_gym_records("basic_arithmetic", size=8, seed=0, task_config=task_config)
    rewards = instantiate(cfg.rewards).rewards
    for r in records:
        right, wrong = f"<answer>{r['answer']}</answer>", f"<answer>{int(r['answer']) + 1}</answer>"
        assert [rewards[n](r["prompt"], right, r) for n in ("correct", "format")] == [1.0, 1.0]
        assert [rewards[n](r["prompt"], wrong, r) for n in ("correct", "format")] == [0.0, 1.0]
        assert [rewards[n](r["prompt"], r["answer"], r) for n in ("correct", "format")] == [0.0, 0.0]


def test_two_steps_score_with_reasoning_gyms_checker(run_recipe, tmp_path, monkeypatch):
    scored = []
    real = checkers.ReasoningGymScore.__call__

    def spy(self, prompt, completion, sample):
        scored.append((sample["task"], sample["answer"], real(self, prompt, completion, sample)))
        return scored[-1][2]

    monkeypatch.setattr(checkers.ReasoningGymScore, "__call__", spy)
    logs, out = run_recipe(LORA, CONFIG, "max_steps=2", output_dir=tmp_path / "r")
    assert len(col(logs, "loss")) == 2
    for name in ("correct", "format"):
        assert all(0.0 <= v <= 1.0 for v in col(logs, f"rewards/{name}/mean")), name
    # batch_size 4 prompts x group_size 4 completions per step, each scored by reasoning-gym's basic_arithmetic
    assert len(scored) == 2 * 4 * 4
    assert {task for task, _, _ in scored} == {"basic_arithmetic"}
    assert all(answer.lstrip("-").isdigit() for _, answer, _ in scored)
    # a tiny random model writes no <answer> tag: the checker gives 0, the weighted reward is 0
    assert col(logs, "reward") == [0.0, 0.0]
    assert (out / "step_2").is_dir()
