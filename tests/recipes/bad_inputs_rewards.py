"""Bad-input cases of issue 41 items 1 and 2: reward models (their loss, their data) and a reward model
given to GRPO as a reward.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `SETUPS`, `_write`, `GRPO` come from
there), so the catalogue stays one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

# fmt: off
_RM = ('run', 'reward_model_single_device', '{tiny}', 'max_steps=1')
_RM_REWARD = "rewards.rewards={rm: {_component_: ftune.evaluation.RewardModel, checkpoint_dir: {ckpt}, tokenizer: {_component_: ftune.models.smollm2.smollm2_tokenizer, path: {ckpt}}}}"
CASES += [  # noqa: F821
    _c('rm-center-negative', 'reward models', (*_RM, 'loss.center_rewards_coefficient=-0.5'), 'RewardLoss needs a number >= 0 or null', 'loss.center_rewards_coefficient', 'got -0.5', "TRL's default is null"),  # noqa: F821
    _c('rm-loss-not-bradley-terry', 'reward models', (*_RM, 'loss={_component_: ftune.training.ChunkedCrossEntropyLoss}'), 'train a scalar score with the Bradley-Terry loss', 'loss:', 'got ftune.training.step.loss.ChunkedCrossEntropyLoss', 'loss._component_=ftune.training.RewardLoss'),  # noqa: F821
    _c('rm-margin-not-a-number', 'reward models', (*_RM, 'dataset={_component_: ftune.datasets.preference_dataset, source: {tmp}/pairs.jsonl, margin_column: margin}'), 'a reward margin must be a finite number', 'dataset.margin_column: {tmp}/pairs.jsonl:2', "margin='big'", 'set dataset.margin_column=null', 'rm_margin_text'),  # noqa: F821
    _c('grpo-reward-model-is-a-language-model', 'online RL', (*GRPO, _RM_REWARD, 'rewards.weights={rm: 1.0}'), 'holds a language model, not a reward model', 'RewardModel: {ckpt}', '(adapter_dir None)', 'give checkpoint_dir the step folder of a full reward_model run'),  # noqa: F821
]
# fmt: on

_MARGIN_PAIR = '{"prompt": "q", "chosen": "a", "rejected": "b", "margin": %s}\n'
SETUPS.update(  # noqa: F821
    {
        "rm_margin_text": lambda tmp, ckpt: _write(
            tmp / "pairs.jsonl", _MARGIN_PAIR % "1.0" + _MARGIN_PAIR % '"big"' + _MARGIN_PAIR % "0.5" * 6
        )
    }  # noqa: F821
)
