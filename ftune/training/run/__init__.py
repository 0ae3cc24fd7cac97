"""The run around the steps: its budget and cadence, resume and step checkpoints, stopping on a
signal, what it reports (metric loggers, progress bar, throughput, peak memory), the profiler and
``ftune plot``'s curves.

Imports ``ftune.training.features`` and ``ftune.training.step``; never ``ftune.training.methods``.
Recipes read the names from ``ftune.training``.
"""
