"""The step core: a micro-batch and its token loss, the losses, normalised accumulation and
validation (``StepLoss``, ``accumulate``, ``validate``), the optimizer and the LR schedules.

Imports ``ftune.training.features`` only (the all-reduce, the optimizer in backward). Recipes read
the names from ``ftune.training``.
"""
