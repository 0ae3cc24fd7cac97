"""Pick the device and the floating-point dtype a run uses, with errors that say how to fix a bad choice."""

import contextlib
import logging
import os
from collections.abc import Iterator

import torch

logger = logging.getLogger(__name__)

_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}
_DEVICE_NAMES = "'cpu', 'cuda', 'cuda:<index>', 'mps' or 'auto'"


def _mps_available() -> bool:
    return torch.backends.mps.is_available()


def get_device(name: str | torch.device = "auto") -> torch.device:
    """Resolve a device name to a ``torch.device``, checking that it is usable here.

    ``"cuda"`` resolves to ``cuda:<LOCAL_RANK>`` when torchrun set ``LOCAL_RANK``, so each
    process of a distributed run gets its own GPU, and that GPU becomes the current one.

    Args:
        name: ``"cpu"``, ``"cuda"``, ``"cuda:<index>"``, ``"mps"`` or ``"auto"`` (CUDA if available,
            else MPS if available, else CPU), or a ``torch.device``.

    Returns:
        The device.

    Raises:
        ValueError: if the name is not one of the accepted ones, or the device is not available
            in this PyTorch build / on this machine.
    """
    text = str(name).strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
        logger.info("device='auto' resolved to %r", text)
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"Unknown device {str(name)!r}. Accepted: {_DEVICE_NAMES}. Set e.g. device=cpu.")
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "mps":
        if not _mps_available():
            raise ValueError(
                f"device={str(name)!r} was requested but MPS is not available "
                f"(torch {torch.__version__}, torch.backends.mps.is_available() is False). "
                "Set device=cpu or device=auto."
            )
        return torch.device("mps")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={str(name)!r} was requested but CUDA is not available "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False). "
            "Install a CUDA build of torch, or set device=cpu or device=auto."
        )
    gpu = int(index) if index else int(os.environ.get("LOCAL_RANK", "0"))
    if gpu >= torch.cuda.device_count():
        raise ValueError(
            f"device={str(name)!r} resolves to cuda:{gpu}, but this machine has "
            f"{torch.cuda.device_count()} CUDA device(s) (indices 0..{torch.cuda.device_count() - 1})."
        )
    torch.cuda.set_device(gpu)
    return torch.device("cuda", gpu)


def get_dtype(name: str | torch.dtype, device: torch.device | None = None) -> torch.dtype:
    """Resolve a dtype name to a floating ``torch.dtype``, checking the device supports it.

    Args:
        name: ``"fp32"``/``"float32"``, ``"bf16"``/``"bfloat16"``, ``"fp16"``/``"float16"``, or one of
            those ``torch.dtype`` objects.
        device: if given, also check that this device supports the dtype (bf16 on old GPUs fails).

    Returns:
        The dtype.

    Raises:
        ValueError: for an unknown name, or a dtype the device does not support.
    """
    if isinstance(name, torch.dtype):
        dtype = name
        if dtype not in _DTYPES.values():
            raise ValueError(f"Unsupported dtype {dtype}. Accepted: fp32, bf16, fp16.")
    else:
        key = str(name).strip().lower()
        if key not in _DTYPES:
            raise ValueError(f"Unknown dtype {name!r}. Accepted: {', '.join(repr(k) for k in _DTYPES)}.")
        dtype = _DTYPES[key]
    if device is not None and torch.device(device).type == "cuda" and dtype == torch.bfloat16:
        if not torch.cuda.is_bf16_supported():
            raise ValueError(
                f"dtype={name!r} (bfloat16) is not supported by {torch.cuda.get_device_name(device)}. "
                "Use dtype=fp32, or a GPU with compute capability >= 8.0."
            )
    return dtype


@contextlib.contextmanager
def default_dtype(dtype: str | torch.dtype) -> Iterator[torch.dtype]:
    """Set torch's default floating dtype inside the block and restore the previous one after.

    Modules built inside the block (``nn.Linear``, ``nn.Embedding``, ...) get parameters of this
    dtype directly, so a bf16 model never exists in fp32 first.

    Args:
        dtype: a name or dtype accepted by :func:`get_dtype`.

    Yields:
        The resolved dtype.

    Raises:
        ValueError: for an unknown dtype name.
    """
    resolved = get_dtype(dtype)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(resolved)
    try:
        yield resolved
    finally:
        torch.set_default_dtype(previous)
