"""The agent GRPO recipe end to end on the tiny checkpoint: 2 steps from its shipped config with a scripted
environment (tests/assets/recipe_test_components.py), conversations of several turns, environment tokens
never trained."""

from test_grpo import col

import ftune.generation.multi_turn as multi_turn

AGENT, CONFIG = "lora_grpo_agent_single_device", "smollm2/135M_lora_grpo_agent"


def test_two_steps_of_multi_turn_grpo(run_recipe, tmp_path, monkeypatch):
    batches = []
    real = multi_turn.Trajectories.training_batch

    def spy(self):
        batches.append((self, real(self)))
        return batches[-1][1]

    monkeypatch.setattr(multi_turn.Trajectories, "training_batch", spy)
    logs, out = run_recipe(AGENT, CONFIG, "max_steps=2", output_dir=tmp_path / "r")
    assert len(col(logs, "loss")) == 2
    assert col(logs, "trajectories/turns")[0] > 1.0  # conversations went past their first turn
    assert all(0.0 <= r <= 0.5 + 1.0 for r in col(logs, "rewards/environment/mean"))
    turns_seen = 0
    for trajectories, batch in batches:
        for i, row in enumerate(trajectories.rows):
            start = len(row.prompt)
            labels = batch["labels"][i, start : start + len(row.tokens)].tolist()
            assert labels == [t if s else -100 for t, s in zip(row.tokens, row.sampled)]
            turns_seen = max(turns_seen, row.turns)
            if row.turns > 1 and row.stop == "done":
                assert not all(row.sampled)  # a tool message between the turns, labelled -100
    assert turns_seen == 2
    assert (out / "step_2").is_dir()


def test_dr_grpo_constant_is_the_trajectory_budget():
    from ftune.settings import AgentGRPOSettings

    data = {"max_trajectory_tokens": 40, "loss": {"_component_": "ftune.training.GRPOLoss", "loss_type": "dr_grpo",
            "max_completion_length": 16}}  # fmt: skip
    problems = AgentGRPOSettings.section_problems(data)
    assert any("must be the trajectory budget max_trajectory_tokens (40), got 16" in p for p in problems), (
        problems
    )
    assert not AgentGRPOSettings.section_problems(
        {**data, "loss": {**data["loss"], "max_completion_length": 40}}
    )
