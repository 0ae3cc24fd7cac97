"""Learned quantization ranges of a QAT run: the file a step folder keeps them in.

A QAT run with `quantizer.learn_ranges=true` trains one weight scale per group (torchao's range
learning). Those scales are parameters of the fake quantizers, `<linear>.weight_fake_quantizer.scale`
in the model's state dict, and no model format (HF, Meta, native) has a place for them. The
checkpointer splits them off and writes them next to the weights, in ftune names:

    step_<N>/model.safetensors        the float weights, as for any full fine-tune
    step_<N>/qat_ranges.safetensors   {"layers.0.attn.q_proj.weight_fake_quantizer.scale": ..., ...}

A resumed QAT run puts them back (`Quantizer.prepare(model, ranges=loaded.qat_ranges)`), and
`ftune run quantize qat=true` converts with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ftune.checkpointing.atomic import save_safetensors
from ftune.checkpointing.readers import read_safetensors

RANGES_FILE = "qat_ranges.safetensors"
RANGE_SUFFIX = ".weight_fake_quantizer.scale"

StateDict = dict[str, torch.Tensor]


def is_range_key(key: str) -> bool:
    """A learned weight scale of a fake-quantized linear."""
    return key.endswith(RANGE_SUFFIX)


def split_ranges(state_dict: Mapping[str, torch.Tensor]) -> tuple[StateDict, StateDict]:
    """Split a state dict into (everything else, learned ranges), names unchanged."""
    rest, ranges = {}, {}
    for k, v in state_dict.items():
        (ranges if is_range_key(k) else rest)[k] = v
    return rest, ranges


def save_ranges(folder: Path, ranges: Mapping[str, torch.Tensor]) -> Path:
    """Write `ranges` to `folder/qat_ranges.safetensors` (atomically) and return the path."""
    path = folder / RANGES_FILE
    save_safetensors(ranges, path)
    return path


def load_ranges(folder: Path) -> StateDict | None:
    """The learned ranges saved in `folder`, or None when it has none (a run without range learning).

    Raises:
        ValueError: the file is corrupt, or holds a tensor that is not a learned range (named).
    """
    path = folder / RANGES_FILE
    if not path.is_file():
        return None
    ranges = read_safetensors(path)
    if other := [k for k in ranges if not is_range_key(k)]:
        raise ValueError(
            f"{path} holds {other[0]!r}, which is not a learned range (<linear>{RANGE_SUFFIX}): the file "
            "was not written by ftune. Delete it to convert or resume without learned ranges."
        )
    return ranges
