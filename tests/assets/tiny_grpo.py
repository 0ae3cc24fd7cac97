"""Overrides that make a shipped GRPO config's run small: 4 completions of 6 tokens per prompt, and a
reward that varies between a tiny random model's completions (tests/assets/recipe_test_components.py)."""

GRPO_TINY = [
    "group_size=4",
    "max_new_tokens=6",
    "rewards.rewards={varied: {_component_: recipe_test_components.char_code_reward, _partial_: true}}",
    "rewards.weights={varied: 1.0}",
]

# The agent recipe's tiny runs: the scripted environment in place of the shipped tool environment, small budgets.
AGENT_TINY = [
    "~environment",
    "environment._component_=recipe_test_components.ScriptedCalculator",
    "tool_format._component_=recipe_test_components.plain_turn",
    "tool_format._partial_=true",
    "~tool_format.family",
    "max_turns=3",
    "max_turn_tokens=6",
    "max_trajectory_tokens=40",
]

# A reasoning-gym config's tiny runs: its task and rewards as shipped, fewer prompts, short completions.
REASONING_GYM_TINY = ["group_size=4", "max_new_tokens=6", "dataset.size=16", "dataset_val.size=8"]

# The TextArena config's tiny runs: its game, dataset and rewards as shipped, fewer games, small budgets (the
# game's rules are a long prompt: about 550 tokens with the tiny tokenizer, so the limits are raised).
TEXTARENA_TINY = [
    "group_size=4",
    "dataset.size=8",
    "dataset_val.size=4",
    "max_turns=3",
    "max_turn_tokens=6",
    "max_trajectory_tokens=40",
    "tokenizer.max_seq_len=1024",
    "model.max_seq_len=1024",
]
