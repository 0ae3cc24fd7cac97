"""Configs: YAML + overrides in, checked settings and built components out.

Importing this package does not import torch.
"""

from ftune.config.errors import ConfigError
from ftune.config.instantiate import instantiate, resolve
from ftune.config.loading import Config, ftune_home, load_config
from ftune.config.run import run
from ftune.config.settings import Settings, setting

__all__ = [
    "Config",
    "ConfigError",
    "Settings",
    "ftune_home",
    "instantiate",
    "load_config",
    "resolve",
    "run",
    "setting",
]
