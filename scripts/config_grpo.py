"""The GRPO parts of the generated configs (scripts/make_configs.py): settings, prompts, rewards, loss.

The demo models train on the demo task's prompts with an exact-match reward; the others on GSM8K's
questions from the hub with a numeric-answer reward (the task GRPO users start with). SmolLM2-135M also
has an agent config (a calculator tool), one playing a TextArena game and one on a reasoning-gym task with
that task's own scorer.
"""

from __future__ import annotations

GRPO = ("lora_grpo", "full_grpo")


def grpo_settings(demo: bool) -> str:
    return (
        f"group_size: 8  # completions sampled per prompt; batch_size counts prompts\n"
        f"max_new_tokens: {16 if demo else 256}  # the most tokens of a completion\n"
        "temperature: 1.0  # sampling; the loss reads log-probabilities at this temperature\n"
        "top_k: null\n"
        "top_p: null\n"
        "stop_strings: []  # strings that end a completion (e.g. ['</answer>']), besides the stop tokens\n"
        "num_iterations: 1  # optimizer steps per rollout (> 1: PPO-style, the ratio clipped by loss.epsilon)\n"
        "scale_rewards: true  # divide advantages by the group's reward std (false: Dr. GRPO)\n"
        "padding_free: false  # true: the update lays the rollout's rows end to end (no compute on padding)\n"
    )


def grpo_data(demo: bool) -> str:
    if demo:
        section = "  _component_: ftune.datasets.demo_prompt_dataset\n  data_dir: ${ftune_home:}/data/demo\n"
        return (
            "dataset:  # the demo task's questions with their answers (field `answer`)\n"
            f"{section}  split: train\n"
            f"dataset_val:  # the 100 held-out questions\n{section}  split: heldout\n" + DEMO_REWARDS
        )
    return (
        "dataset:  # prompts from any hub id or local file (json, jsonl, csv, parquet): dataset.source=...\n"
        "  _component_: ftune.datasets.prompt_dataset\n"
        "  source: openai/gsm8k\n"
        "  name: main\n"
        "  column_map: {prompt: question}  # the other columns (answer) reach the rewards\n"
        "  new_system_prompt: \"Solve the problem step by step. End with the final answer as '#### <number>'.\"\n"
        "dataset_val: null\n"
        "rewards:\n  _component_: ftune.rewards.RewardSet\n  rewards:\n"
        "    correct: {_component_: ftune.rewards.NumericAnswer, field: answer}\n"
        "    format: {_component_: ftune.rewards.RegexMatch, pattern: '####'}\n"
        "  weights: {correct: 1.0, format: 0.1}\n"
    )


def grpo_loss() -> str:
    return (
        "loss:  # grpo (per-sequence mean), dapo (token mean; epsilon_high: 0.28), dr_grpo (set scale_rewards:\n"
        "       # false and max_completion_length: ${max_new_tokens})\n"
        "  _component_: ftune.training.GRPOLoss\n"
        "  loss_type: grpo\n"
        "  epsilon: 0.2  # the policy ratio is clipped to [1 - epsilon, 1 + epsilon_high]\n"
        "  epsilon_high: null  # null: epsilon\n"
        "  beta: 0.04  # KL to the reference; 0 runs no reference pass\n"
        "  kl_estimator: k3  # the published GRPO term; k3_ratio: k3 times the ratio (TRL's default)\n"
        "  max_completion_length: null  # dr_grpo only\n"
        "  num_chunks: 8  # completion tokens go to the vocabulary in blocks: never the full fp32 logits\n"
    )


# The demo task's rewards (scripts/config_rm.py adds a trained reward model beside them).
DEMO_REWARDS = (
    "rewards:\n  _component_: ftune.rewards.RewardSet\n  rewards:\n"
    "    correct: {_component_: ftune.rewards.ExactMatch, field: answer}\n"
    "  weights: {correct: 1.0}\n"
)


def agent_config(lora_grpo: str) -> str:
    """smollm2/135M_lora_grpo_agent: the LoRA GRPO config with the turn budgets, an environment (a calculator
    tool over the demo task's questions) and the family's tool-call format."""
    text = lora_grpo.replace(
        "LoRA GRPO (online RL with rewards)", "LoRA agent GRPO (multi-turn, with a tool)"
    )
    text = text.replace(
        "lora_grpo_single_device --config smollm2/135M_lora_grpo",
        "lora_grpo_agent_single_device --config smollm2/135M_lora_grpo_agent",
    )
    text = "\n".join(line for line in text.splitlines() if "lora_grpo_distributed" not in line) + "\n"
    text = text.replace("output/smollm2_135M_lora_grpo\n", "output/smollm2_135M_lora_grpo_agent\n")
    text = text.replace(
        "max_new_tokens: 16  # the most tokens of a completion\n",
        "max_new_tokens: 16  # not read by the agent recipe: the three budgets below bound the turns\n"
        "max_turns: 4  # model turns per conversation\n"
        "max_turn_tokens: 48  # tokens of one model turn\n"
        "max_trajectory_tokens: 192  # tokens after the prompt, the model's and the tools' (dr_grpo's constant)\n"
        "max_off_policy_steps: null  # null: sample in the step; k >= 0: a worker process samples up to k steps ahead\n"
        "refresh_every: 1  # steps between two refreshes of the worker's copy of the policy\n"
        "importance_sampling_cap: 3.0  # C of the truncated importance weights of stale rollouts (TRL's default)\n",
    )
    return text.replace(
        "  weights: {correct: 1.0}\n",
        "  weights: {correct: 1.0}\n"
        "environment:  # answers each model turn: a calculator tool, run in a sandbox\n"
        "  _component_: ftune.agents.ToolEnvironment\n"
        "  tools: [{_component_: ftune.agents.Calculator}]\n"
        "  prompt_field: prompt\n"
        "  max_turns: ${max_turns}\n"
        "  max_output_chars: 500\n"
        "tool_format:  # how the model writes a tool call (the family's chat-template format)\n"
        "  _component_: ftune.agents.tool_formats.tool_format\n"
        "  family: smollm2\n",
    )


def reasoning_gym_config(lora_grpo: str) -> str:
    """smollm2/135M_reasoning_gym_lora_grpo: the LoRA GRPO config on a reasoning-gym task (two-term sums and
    differences of small numbers, seeded) scored by reasoning-gym's own checker, with a format reward."""
    text = lora_grpo.replace("LoRA GRPO (online RL with rewards)", "LoRA GRPO on a reasoning-gym task")
    text = text.replace(
        "--config smollm2/135M_lora_grpo\n", "--config smollm2/135M_reasoning_gym_lora_grpo\n"
    )
    text = text.replace("output/smollm2_135M_lora_grpo\n", "output/smollm2_135M_reasoning_gym_lora_grpo\n")
    text = text.replace(
        "max_new_tokens: 16  # the most tokens of a completion\n",
        "max_new_tokens: 32  # the most tokens of a completion\n",
    )
    text = text.replace(
        "stop_strings: []  # strings that end a completion (e.g. ['</answer>']), besides the stop tokens\n",
        "stop_strings: ['</answer>']  # strings that end a completion, besides the stop tokens\n",
    )
    start, end = text.index("dataset:  # the demo task"), text.index("loss:  #")
    task = (
        "  _component_: ftune.datasets.reasoning_gym_dataset\n"
        "  task: basic_arithmetic  # any reasoning-gym task name; task_config is that task's own settings\n"
        "  task_config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 2, operators: ['+', '-'],\n"
        "                allow_parentheses: false, allow_negation: false}\n"
        "  new_system_prompt: 'Give only the result, inside <answer></answer>: e.g. <answer>42</answer>.'\n"
    )
    data = (
        "dataset:  # generated by reasoning-gym from the seed: the records carry the task's answer and metadata\n"
        f"{task}  size: 2000\n  seed: 0\n"
        f"dataset_val:  # other questions of the same task (another seed)\n{task}  size: 100\n  seed: 1\n"
        "rewards:\n  _component_: ftune.rewards.RewardSet\n  rewards:\n"
        "    correct: {_component_: ftune.rewards.ReasoningGymScore, answer_tag: answer}  # the task's own scorer\n"
        "    format: {_component_: ftune.rewards.RegexMatch, pattern: '<answer>.*</answer>'}\n"
        "  weights: {correct: 1.0, format: 0.1}\n"
    )
    return text[:start] + data + text[end:]


def textarena_config(agent: str) -> str:
    """smollm2/135M_textarena_lora_grpo_agent: the agent config playing a TextArena game from the package
    index (Guess The Number: the game answers each guess with higher or lower, and its own reward scores
    the game), offline: the game needs no download."""
    name = "smollm2/135M_textarena_lora_grpo_agent"
    text = agent.replace("LoRA agent GRPO (multi-turn, with a tool)", "LoRA agent GRPO on a TextArena game")
    text = text.replace("--config smollm2/135M_lora_grpo_agent\n", f"--config {name}\n")
    text = text.replace(
        "output/smollm2_135M_lora_grpo_agent\n", "output/smollm2_135M_textarena_lora_grpo_agent\n"
    )
    text = text.replace("max_turns: 4  # model turns", "max_turns: 6  # model turns")
    text = text.replace("max_turn_tokens: 48  # tokens", "max_turn_tokens: 24  # tokens")
    text = text.replace("max_trajectory_tokens: 192  # tokens", "max_trajectory_tokens: 224  # tokens")
    text = text.replace("  max_seq_len: 256\n", "  max_seq_len: 512\n")
    start, end = text.index("dataset:  # the demo task"), text.index("tool_format:  #")
    game = "  _component_: ftune.datasets.textarena_dataset\n  game: GuessTheNumber-v0\n"
    data = (
        "dataset:  # games dealt from their seeds by textarena: each record's prompt is its game's rules\n"
        f"{game}  size: 400\n  seed: 0\n"
        f"dataset_val:  # other games (other seeds)\n{game}  size: 40\n  seed: 100000\n"
        "rewards:  # on the last turn, besides the game's own reward (the environment's)\n"
        "  _component_: ftune.rewards.RewardSet\n  rewards:\n"
        "    format: {_component_: ftune.rewards.RegexMatch, pattern: '\\[\\d+\\]'}  # a guess in brackets\n"
        "  weights: {format: 0.1}\n"
        "environment:  # the game plays the user: it answers each guess and scores the game (reward 1: guessed)\n"
        "  _component_: ftune.agents.TextArenaEnvironment\n"
        "  game: GuessTheNumber-v0  # any one-player TextArena game that needs no download\n"
        "  max_turns: ${max_turns}\n"
    )
    return text[:start] + data + text[end:]


def task_configs(lora_grpo: str) -> dict[str, str]:
    """SmolLM2-135M's GRPO configs on tasks beyond the demo's, by the end of their file names."""
    agent = agent_config(lora_grpo)
    return {
        "lora_grpo_agent": agent,
        "textarena_lora_grpo_agent": textarena_config(agent),
        "reasoning_gym_lora_grpo": reasoning_gym_config(lora_grpo),
    }
