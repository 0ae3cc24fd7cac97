"""What a training method adds to the step: DPO (pair log-probs, the loss, the reference model),
knowledge distillation (the teacher and its loss) and adapters (LoRA, DoRA, QLoRA set-up).

Imports ``ftune.training.step`` (the micro-batch, ``Loss``, ``IGNORE_INDEX``); never
``ftune.training.run``. Recipes read the names from ``ftune.training``.
"""
