"""What a training method adds to the step: preference tuning (DPO, IPO, SimPO, RSO, ORPO and KTO:
log-probabilities through the head, the losses, the reference model), GRPO (rollouts, rewards and
advantages, its loss), knowledge distillation (the teacher and its loss) and adapters (LoRA, DoRA,
QLoRA set-up).

Imports ``ftune.training.step`` (the micro-batch, ``Loss``, ``IGNORE_INDEX``); never
``ftune.training.run``. Recipes read the names from ``ftune.training``.
"""
