"""The reward-model parts of the generated configs (scripts/make_configs.py): the reward_model recipes'
methods and loss, and the demo's GRPO config that scores completions with a trained reward model
(ftune.evaluation.RewardModel: the LoRA reward model smollm2/135M_demo_lora_rm trains) beside the exact match.
"""

from __future__ import annotations

from scripts.config_grpo import DEMO_REWARDS

# Reward models (the reward_model recipes; configs for smollm2/135M, on the demo task's pairs).
RM = ("full_rm", "lora_rm")
RM_PAIRS_NOTE = "  # pairs are scored as whole rows, each at its last token"
RM_LOSS = (
    "loss:  # Bradley-Terry: -log sigmoid(r_chosen - r_rejected - margin), TRL's RewardTrainer\n"
    "  _component_: ftune.training.RewardLoss\n"
    "  center_rewards_coefficient: null  # c x (r_chosen + r_rejected)^2 keeps scores near 0 (TRL suggests 0.01)\n"
)
REWARD_MODEL_REWARDS = (
    "rewards:\n  _component_: ftune.rewards.RewardSet\n  rewards:\n"
    "    correct: {_component_: ftune.rewards.ExactMatch, field: answer}\n"
    "    preference:  # a trained reward model: ftune run reward_model_single_device --config smollm2/135M_demo_lora_rm\n"
    "      _component_: ftune.evaluation.RewardModel\n"
    "      checkpoint_dir: ${checkpointer.checkpoint_dir}  # its base model (a full reward model: its step folder)\n"
    "      adapter_dir: output/smollm2_135M_demo_lora_rm/step_60  # its adapters and score head (null: full)\n"
    "      tokenizer:  # the reward model's, as it read its training pairs\n"
    "        _component_: ftune.models.smollm2.smollm2_tokenizer\n"
    "        path: ${tokenizer.path}\n"
    "        max_seq_len: ${tokenizer.max_seq_len}\n"
    "      device: cpu  # auto: the policy's GPU when there is one\n"
    "      batch_size: 16  # completions a forward\n"
    "  weights: {correct: 1.0, preference: 0.5}\n"
)


def with_reward_model(plain: str, text: str, title: str, name: str) -> str:
    """The demo's GRPO config `plain` (its `text`, its method's `title`) as the config `name`: the same with a
    trained reward model among its rewards (the rewards section replaced, its name in the header and output_dir)."""
    for old, new in (
        (f"--config {plain}\n", f"--config {name}\n"),
        (f"output_dir: output/{plain.replace('/', '_')}\n", f"output_dir: output/{name.replace('/', '_')}\n"),
        (f"{title}.\n", f"{title}, exact match and a trained reward model.\n"),
        (DEMO_REWARDS, REWARD_MODEL_REWARDS),
    ):
        assert old in text, old
        text = text.replace(old, new)
    return text
