"""Build a model for inference: a checkpoint, optionally with a PEFT adapter folder merged in, or a
native quantized checkpoint written by the quantize recipe.

The generate, eval and quantize recipes load their model here, so that the four sources a user
can point them at behave the same everywhere:

- a base model (the checkpointer's `checkpoint_dir`);
- a base model + `adapter_dir` (a LoRA/DoRA step folder, PEFT format): the adapter is merged into
  the weights before the model is built, so decoding costs what the base model costs;
- a merged or fully fine-tuned folder: just another `checkpoint_dir`;
- `quantized_checkpoint`: the quantize recipe's folder (or its `model.pt`), torchao weights.

The architecture comes from the config's optional `model` section, else from `config.json` next
to the weights, so switching models needs only a different folder.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftune.checkpointing._checkpointer import Checkpointer
from ftune.checkpointing.adapter import ADAPTER_CONFIG_FILE, has_adapter, load_adapter, merged_state_dict
from ftune.checkpointing.loaded import Loaded
from ftune.checkpointing.model_build import build_model, meta_model, read_hf_config
from ftune.checkpointing.native import QUANTIZED_FILE
from ftune.checkpointing.quantized import load_quantized
from ftune.checkpointing.readers import read_json
from ftune.modules.score_head import SCORE_KEY
from ftune.peft.moe_lora import expert_base_key

logger = logging.getLogger(__name__)

StateDict = dict[str, torch.Tensor]


def _check_adapter_fits(
    adapter: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], folder: Path
) -> None:
    problems = []
    for key, a in adapter.items():
        if not key.endswith(".lora_a.weight"):
            continue
        module = key.removesuffix(".lora_a.weight")
        # An expert adapter's base is a stacked (experts, out, in) weight: B (E, out, r) · A (E, r, in).
        weight = state.get(expert_base_key(module) or f"{module}.weight")
        b = adapter.get(f"{module}.lora_b.weight")
        if weight is None:
            problems.append(f"{module} is not a layer of the base model")
        elif b is None:
            problems.append(f"{module}.lora_b.weight is missing")
        elif (*b.shape[:-1], a.shape[-1]) != tuple(weight.shape):
            problems.append(
                f"{module}: adapter gives shape {(*b.shape[:-1], a.shape[-1])}, base weight is {tuple(weight.shape)}"
            )
    if problems:
        raise ValueError(
            f"the adapter in {str(folder)!r} does not fit the base model: {'; '.join(problems[:4])}. It was trained "
            "on another base model: set checkpointer.checkpoint_dir to the folder named by base_model_name_or_path "
            f"in its {ADAPTER_CONFIG_FILE}."
        )


def merge_adapter_folder(
    state: Mapping[str, torch.Tensor], adapter_dir: str | os.PathLike, *, family: str
) -> StateDict:
    """The base weights with the adapter of a PEFT folder folded in (LoRA or DoRA).

    Adapted weights are merged in float32, then keep the base weight's dtype.

    Args:
        state: base model weights in ftune names.
        adapter_dir: a folder with adapter_model.safetensors + adapter_config.json (a LoRA run's
            step folder, or any PEFT LoRA/DoRA adapter of this model).
        family: the model family (for PEFT's tensor names).

    Returns:
        A new state dict with the base model's keys, plus a reward model's head (``score.weight``) when
        the adapter holds one (a reward model's LoRA step folder: the result builds a reward model).

    Raises:
        FileNotFoundError: the folder holds no adapter.
        ValueError: an unsupported adapter config (rsLoRA) or an adapter that does not fit.
    """
    folder = Path(adapter_dir).expanduser()
    if not has_adapter(folder):
        held = (
            sorted(p.name for p in folder.iterdir())[:12] if folder.is_dir() else "nothing: it does not exist"
        )
        raise FileNotFoundError(
            f"adapter_dir {str(folder)!r} holds no adapter_model.safetensors (it holds {held}). Pass a step folder "
            "of a LoRA run (output_dir/step_<N>); for a full fine-tune's step folder or a LoRA run's merged/ "
            "folder, set checkpointer.checkpoint_dir to it instead."
        )
    config = read_json(folder / ADAPTER_CONFIG_FILE)
    if config.get("use_rslora"):
        raise ValueError(
            f"{str(folder / ADAPTER_CONFIG_FILE)!r} sets use_rslora=true; ftune merges plain LoRA and DoRA "
            "adapters (scale alpha / rank) only. Merge it with peft's merge_and_unload() and load the result."
        )
    adapter = load_adapter(folder, family=family, base_shapes={k: v.shape for k, v in state.items()})
    _check_adapter_fits(adapter, state, folder)
    modules = {k.removesuffix(".lora_a.weight") for k in adapter if k.endswith(".lora_a.weight")}
    targets = {expert_base_key(m) or f"{m}.weight" for m in modules}  # the base weights they change
    full = {k: (v.float() if k in targets else v) for k, v in state.items()}
    merged = merged_state_dict({**full, **{k: v.float() for k, v in adapter.items()}}, config)
    base = Path(str(config.get("base_model_name_or_path", ""))).name
    logger.info("Merged the adapter of %s (%d layers, trained on %s)", folder, len(modules), base or "?")
    out = {k: merged[k].to(state[k].dtype) if k in targets else merged[k] for k in state}
    if SCORE_KEY in adapter:  # PEFT's modules_to_save of a SEQ_CLS adapter: the trained head itself
        out[SCORE_KEY] = adapter[SCORE_KEY]
    return out


def build_float_model(
    loaded: Loaded,
    *,
    checkpoint_dir: str | os.PathLike,
    model: Any = None,
    adapter_dir: str | os.PathLike | None = None,
    device: torch.device,
    dtype: torch.dtype,
) -> nn.Module:
    """The checkpoint's model in eval mode, frozen, with an adapter folder merged in when given.

    Args:
        loaded: what the checkpointer loaded (`Checkpointer.load()`); an adapter it carries (a
            LoRA step folder given as `resume_from_checkpoint`) is merged too.
        checkpoint_dir: the checkpointer's folder (its config.json sizes the model).
        model: the config's optional `model` section.
        adapter_dir: a PEFT adapter folder to merge, or None.
        device: where the model runs.
        dtype: parameter dtype.

    Raises:
        ValueError / FileNotFoundError: see `build_model` and `merge_adapter_folder`.
    """
    state = loaded.model
    if adapter_dir is None and loaded.adapter is not None:
        adapter_dir = loaded.step_dir
    if adapter_dir is not None:
        state = merge_adapter_folder(state, adapter_dir, family=loaded.family)
    net = build_model(model, state, device=device, dtype=dtype, checkpoint_dir=checkpoint_dir)
    return net.eval().requires_grad_(False)


def quantized_file(path: str | os.PathLike) -> Path:
    """The quantized weights file of a quantize-recipe folder (its `model.pt`), or `path` if it is a file.

    Raises:
        FileNotFoundError: neither a file nor a folder holding `model.pt`.
    """
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if (path / QUANTIZED_FILE).is_file():
        return path / QUANTIZED_FILE
    raise FileNotFoundError(
        f"quantized_checkpoint {str(path)!r} is neither a quantized checkpoint file nor a folder holding "
        f"{QUANTIZED_FILE}. Pass the output_dir of `ftune run quantize` (or its {QUANTIZED_FILE})."
    )


def load_quantized_model(
    path: str | os.PathLike, *, model: Any = None, device: torch.device
) -> tuple[nn.Module, dict[str, Any]]:
    """Load a native quantized checkpoint (the quantize recipe's output) for inference.

    The model is built on the meta device from the config's `model` section, else from the
    config.json beside the file, else from the file's metadata, and receives the stored torchao
    tensors as they are: nothing is quantized again. The dtype is the one it was quantized in.

    Args:
        path: the quantize recipe's output folder, or its model.pt.
        model: the config's optional `model` section.
        device: where the tensors are loaded.

    Returns:
        (model in eval mode, the checkpoint's metadata).

    Raises:
        FileNotFoundError / ValueError: see `quantized_file` and `ftune.checkpointing.quantized.load_quantized`.
    """
    file = quantized_file(path)
    builder = None
    if model is not None or read_hf_config(file.parent) is not None:
        # dtype only sizes the meta build: every tensor is replaced by the stored one.
        builder = lambda: meta_model(file.parent, model, dtype=torch.float32)  # noqa: E731
    net, metadata = load_quantized(file, builder, device=device)
    logger.info("Loaded quantized %s (%s)", file, metadata.get("quantizer", {}).get("_component_", "?"))
    return net.eval(), metadata


def load_inference_model(
    checkpointer: Checkpointer,
    *,
    model: Any = None,
    adapter_dir: str | os.PathLike | None = None,
    quantized_checkpoint: str | os.PathLike | None = None,
    device: torch.device,
    dtype: torch.dtype,
) -> nn.Module:
    """The model generate and eval run: quantized when `quantized_checkpoint` is set, else float.

    Args:
        checkpointer: the config's checkpointer (not read when `quantized_checkpoint` is set).
        model: the config's optional `model` section.
        adapter_dir: a PEFT adapter folder to merge into the float model.
        quantized_checkpoint: the quantize recipe's output folder (or its model.pt).
        device: where the model runs.
        dtype: parameter dtype of a float model (a quantized one keeps its own).

    Returns:
        The model in eval mode with frozen parameters.

    Raises:
        ValueError: both `adapter_dir` and `quantized_checkpoint`, or see the functions above.
    """
    if quantized_checkpoint is not None:
        if adapter_dir is not None:
            raise ValueError(
                f"adapter_dir ({adapter_dir}) and quantized_checkpoint ({quantized_checkpoint}) cannot be combined: "
                "a quantized checkpoint has no float weights to merge an adapter into. Quantize with the adapter "
                "instead (ftune run quantize ... adapter_dir=<step folder>) and load that checkpoint alone."
            )
        return load_quantized_model(quantized_checkpoint, model=model, device=device)[0]
    loaded = checkpointer.load()
    return build_float_model(
        loaded,
        checkpoint_dir=checkpointer.checkpoint_dir,
        model=model,
        adapter_dir=adapter_dir,
        device=device,
        dtype=dtype,
    )
