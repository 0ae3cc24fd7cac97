"""quiet_torchao_import_logs drops exactly torchao's harmless CPU import lines."""

import logging
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
import torch

from ftune.quantization import quiet_torchao_import_logs
from ftune.runtime.torchao_logs import PYTREE_LOGGER, TORCHAO_LOGGER

needs_cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason="CUDA machines keep the extension lines"
)


def passes(logger_name: str, msg: str, *args: object) -> bool:
    logger = logging.getLogger(logger_name)
    return bool(logger.filter(logger.makeRecord(logger_name, logging.WARNING, __file__, 1, msg, args, None)))


class TorchaoEnum(Enum):
    A = 1


TorchaoEnum.__module__ = "torchao.quantization.fake"


class UserEnum(Enum):
    A = 1


@needs_cpu_only
def test_filters_drop_only_the_known_lines() -> None:
    quiet_torchao_import_logs()
    quiet_torchao_import_logs()  # idempotent
    assert sum(type(f).__name__.startswith("_Drop") for f in logging.getLogger(TORCHAO_LOGGER).filters) == 1
    so = "/venv/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
    assert not passes(TORCHAO_LOGGER, f"Failed to load {so}: Could not load this library: {so}")
    assert not passes(TORCHAO_LOGGER, "Failed to load /x/torchao/_C_cutlass_90a.abi3.so: nope")
    assert passes(TORCHAO_LOGGER, "Failed to load /x/torchao/_C.abi3.so: undefined symbol")
    assert passes(TORCHAO_LOGGER, "Skipping import of cpp extensions due to incompatible torch version.")
    deprecation = "%s is an Enum subclass ... Calling register_constant() on Enum subclasses is deprecated"
    assert not passes(PYTREE_LOGGER, deprecation, TorchaoEnum)
    assert passes(PYTREE_LOGGER, deprecation, UserEnum)


@needs_cpu_only
def test_importing_torchao_through_ftune_prints_nothing() -> None:
    code = "import ftune.quantization, torchao.quantization.qat"
    root = Path(__file__).parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""
