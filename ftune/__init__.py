"""ftune: recipe-first LLM fine-tuning in native PyTorch.

Importing `ftune` is cheap on purpose (no torch import), so that `ftune ls` starts fast.
"""

__version__ = "0.1.0"
