"""Quiet the harmless lines torchao logs while it is imported on a machine without CUDA.

`import torchao` (0.18) tries to load every compiled extension it ships. Two are CUDA-only
(`_C_mxfp8*.so`, `_C_cutlass_90a*.so`); on a CPU-only machine each failed load is logged as a
warning on the `torchao` logger. With torch >= 2.13 torchao also registers its Enums
(KernelPreference at import, ScaleCalculationMode when QAT first runs) with
`torch.utils._pytree.register_constant`, which torch answers with a deprecation line per Enum on
the `torch.utils._pytree` logger, addressed to torchao's developers. None of these affect ftune.

We drop exactly those records with logger filters, instead of raising the loggers' levels,
so that every other torchao warning (e.g. "Skipping import of cpp extensions due to
incompatible torch version") still reaches the user. On a machine with CUDA the extension
lines are kept: there a failed load is a real problem.
"""

from __future__ import annotations

import logging

import torch

TORCHAO_LOGGER = "torchao"
PYTREE_LOGGER = "torch.utils._pytree"

# Compiled extensions that only build/load with CUDA; failing to load them on CPU is expected.
_CUDA_ONLY_EXTENSIONS = ("_C_mxfp8", "_C_cutlass_90a")


class _DropCudaOnlyExtensionLoadFailures(logging.Filter):
    """Drops torchao's 'Failed to load .../_C_<cuda-only>.so' records on machines without CUDA."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Failed to load") or not any(e in message for e in _CUDA_ONLY_EXTENSIONS):
            return True
        return torch.cuda.is_available()


class _DropTorchaoEnumRegisterConstantDeprecation(logging.Filter):
    """Drops torch's "register_constant() on Enum subclasses is deprecated" line for torchao's enums."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "register_constant() on Enum subclasses" not in str(record.msg):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        module = getattr(args[0], "__module__", "") if args else ""
        return not module.startswith("torchao")


def quiet_torchao_import_logs() -> None:
    """Install the filters on the `torchao` and `torch.utils._pytree` loggers (idempotent).

    Call it before the first `import torchao` of the process; `ftune.quantization` does so on
    import, and `ftune.checkpointing` before it imports torchao to read a quantized file. Records other than those described in the module docstring pass unchanged.
    """
    for logger_name, filter_type in (
        (TORCHAO_LOGGER, _DropCudaOnlyExtensionLoadFailures),
        (PYTREE_LOGGER, _DropTorchaoEnumRegisterConstantDeprecation),
    ):
        logger = logging.getLogger(logger_name)
        if not any(isinstance(f, filter_type) for f in logger.filters):
            logger.addFilter(filter_type())
