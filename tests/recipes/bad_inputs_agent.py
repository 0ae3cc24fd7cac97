"""Bad-input cases of issue 39 (agents): turn budgets, Dr. GRPO's constant, rollouts beside training, the
environment section.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES` come from there), so the catalogue stays
one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

_AGENT_V = ("validate", "smollm2/135M_lora_grpo_agent")
# The agent recipe on the tiny checkpoint with the tests' scripted environment (tests/assets/tiny_grpo.py).
_AGENT = (
    "run", "lora_grpo_agent_single_device", "{tiny}", "group_size=2", "max_steps=1", "~environment",
    "environment._component_=recipe_test_components.ScriptedCalculator", "~tool_format",
    "tool_format._component_=recipe_test_components.plain_turn", "tool_format._partial_=true",
    "max_turns=2", "max_turn_tokens=4", "max_trajectory_tokens=16",
)  # fmt: skip

# fmt: off
CASES += [
    _c('agent-budget-missing', 'agents', (*_AGENT_V, 'max_turns=null'), 'must be an int >= 1', 'max_turns', 'got None', 'set it in the config'),
    _c('agent-dr-grpo-length', 'agents', (*_AGENT_V, 'loss.loss_type=dr_grpo', 'loss.max_completion_length=16'), "Dr. GRPO's constant must be the trajectory budget", 'loss.max_completion_length', 'got 16', 'loss.max_completion_length: ${max_trajectory_tokens}'),
    _c('agent-off-policy-reuse', 'agents', (*_AGENT_V, 'num_iterations=2', 'max_off_policy_steps=1'), 'must be 1 with max_off_policy_steps set', 'num_iterations', 'got 2', 'set num_iterations=1 or max_off_policy_steps=null'),
    _c('agent-environment-not-one', 'agents', (*_AGENT, 'environment._partial_=true'), 'has no `tools` list and `start(record)` method', 'environment', 'functools.partial', 'set environment._component_ to an ftune.agents.Environment'),
]
# fmt: on
