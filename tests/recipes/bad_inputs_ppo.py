"""Bad-input cases of issue 41 item 4: the PPO recipe (its sizes, its KL settings, its loss, its reward model).

Run by bad_inputs.py inside its own namespace (`_c`, `CASES` come from there), so the catalogue stays one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

# fmt: off
_PPO = ('run', 'ppo_full_finetune_single_device', '{tiny}', 'max_steps=1', 'max_generated_tokens=4')
_LM = ('reward_checkpointer.checkpoint_dir={ckpt}', 'value_checkpointer.checkpoint_dir={ckpt}')
CASES += [  # noqa: F821
    _c('ppo-batch-not-a-multiple', 'online RL', (*_PPO, 'ppo_batch_size=3'), 'must be a multiple of ppo_batch_size', 'ppo_batch_size:', 'batch_size (4) must be a multiple of ppo_batch_size (3)', 'E.g. ppo_batch_size=4'),  # noqa: F821
    _c('ppo-kl-target-zero', 'online RL', (*_PPO, 'kl_target=0.0'), 'must be a number > 0 or null', 'kl_target:', 'got 0.0', '(a fixed kl_coeff)'),  # noqa: F821
    _c('ppo-epsilon-zero', 'online RL', (*_PPO, 'loss.epsilon=0'), 'PPOLoss needs a number > 0', 'loss.epsilon', 'got 0', "torchtune's PPO configs use epsilon 0.2"),  # noqa: F821
    _c('ppo-reward-model-is-a-language-model', 'online RL', (*_PPO, *_LM), 'holds a language model, not a reward model', 'reward_checkpointer.checkpoint_dir: {ckpt}', '(no score.weight)', 'Give it the step folder of a full reward_model_single_device run'),  # noqa: F821
]
# fmt: on
