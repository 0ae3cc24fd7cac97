"""Overrides that make a shipped GRPO config's run small: 4 completions of 6 tokens per prompt, and a
reward that varies between a tiny random model's completions (tests/assets/recipe_test_components.py)."""

GRPO_TINY = [
    "group_size=4",
    "max_new_tokens=6",
    "rewards.rewards={varied: {_component_: recipe_test_components.char_code_reward, _partial_: true}}",
    "rewards.weights={varied: 1.0}",
]
