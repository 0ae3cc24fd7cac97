"""What the launcher of a distributed run checked, so that its ranks do not check it again.

`ftune run --nproc_per_node N` loads the config once and makes its checks (keys, types, ranges,
data files, folders) before torchrun starts any rank; it then sets ``FTUNE_LAUNCH_CHECKED`` to a
digest of the config it checked and of the settings class it checked it against. Each rank loads
the config itself (it builds the run from it) and, when its own config and class give the same
digest, skips the key, type and range checks (`Config.values_checked`): it checks only the
component signatures, which the launcher leaves alone because they import torch. A digest that
differs (the file changed in between, another class, a variable set by hand) checks everything.
"""

from __future__ import annotations

import hashlib
import os

from ftune.config.loading import Config

CHECKED_ENV = "FTUNE_LAUNCH_CHECKED"


def digest(cfg: Config, cls: type) -> str:
    """A digest of the resolved config (overrides applied), where it came from, and the settings class."""
    text = f"{cls.__module__}.{cls.__qualname__}\n{cfg.source}\n{cfg.to_yaml()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def launch_stamp(cfg: Config) -> dict[str, str]:
    """The environment a launcher hands its ranks: the digest of the class `cfg` passed its checks with
    (empty when it passed none: a copied recipe with its own settings class is checked by each rank)."""
    checked = sorted(cfg.values_checked, key=lambda c: f"{c.__module__}.{c.__qualname__}")
    return {CHECKED_ENV: digest(cfg, checked[0])} if checked else {}


def launcher_checked(cfg: Config, cls: type) -> bool:
    """Whether the launcher of this process checked this very config against `cls`."""
    stamp = os.environ.get(CHECKED_ENV)
    return bool(stamp) and stamp == digest(cfg, cls)
