"""Checkpoint weights -> model: the one place a model is built and its weights loaded.

Training, generate, eval, quantize and `ftune.models.load_hf` all build their model here: the
architecture on the meta device (no memory, no init), then the checkpoint's tensors assigned
into it (memory-mapped ones stay mapped), so an 8B model never exists twice in memory. The
architecture comes from the config's `model` section, else from the checkpoint's config.json
(`model_from_checkpoint`, what a training config without a model section reads as).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftune.checkpointing.hf_config_check import check_against_model
from ftune.checkpointing.model_fit import load_into
from ftune.checkpointing.readers import read_json
from ftune.config import instantiate
from ftune.config.model_source import is_checkpoint_model
from ftune.models import (
    SAME_ARCHITECTURE,
    family_from_hf_config,
    image_text_model_from_hf_config,
    image_text_text_config,
    model_from_hf_config,
    text_model_config,
)
from ftune.modules.score_head import SCORE_KEY, add_score_head
from ftune.modules.vision import ImageTextModel
from ftune.runtime.device import default_dtype
from ftune.runtime.rank import is_rank_zero

HF_CONFIG_FILE = "config.json"
VISION_PREFIX = "vision_encoder."  # an ImageTextModel's state: what an image-text checkpoint read whole holds


def cast_floating(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`state` with its floating tensors in `dtype`; integer tensors (and quantized ones) unchanged.

    A same-dtype `.to()` returns the tensor itself, so weights already in `dtype` are not copied
    (a memory-mapped tensor stays mapped).
    """
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def read_hf_config(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed `config.json` of `folder`, or None when there is none.

    For an image-text checkpoint (Gemma 3 4B/12B/27B) it is the config.json of the text decoder
    that ftune builds, loads and saves (`ftune.models.text_model_config`).
    """
    path = Path(folder) / HF_CONFIG_FILE
    return text_model_config(read_json(path)) if path.is_file() else None


def meta_model(
    checkpoint_dir: str | os.PathLike | None,
    model: Any = None,
    *,
    dtype: torch.dtype,
    image_text: bool = False,
) -> nn.Module:
    """The model architecture on the meta device (no memory), ready for `load_into`.

    Args:
        checkpoint_dir: the folder the weights come from; its `config.json` sizes the model when
            `model` is None, and is checked against the built model otherwise.
        model: the config's `model` section (a `_component_` builder), or None (or the
            `model_from_checkpoint` component a training config without one reads as).
        dtype: parameter dtype.
        image_text: without a model section, build the whole image-text model config.json describes
            (`ftune.models.image_text_model_from_hf_config`), not its text decoder.

    Raises:
        ValueError: no `model` section and no config.json in `checkpoint_dir`, or a config.json
            that disagrees with the built model on anything that changes the computation (shapes,
            RoPE base and scaling, norm eps, tied embeddings, sliding windows; both config.json
            layouts, `rope_theta` and transformers 5's `rope_parameters`). A different
            `max_position_embeddings` is a warning.
    """
    if model is not None and not is_checkpoint_model(model):
        with default_dtype(dtype), torch.device("meta"):
            net = instantiate(model, _path="model")
        if checkpoint_dir is not None and (config := _raw_config(checkpoint_dir)) is not None:
            if isinstance(net, ImageTextModel):  # the decoder against text_config
                check_against_model(
                    image_text_text_config(config), Path(checkpoint_dir) / HF_CONFIG_FILE, net.decoder
                )
            else:
                check_against_model(text_model_config(config), Path(checkpoint_dir) / HF_CONFIG_FILE, net)
        return net
    if image_text:
        config = _raw_config(checkpoint_dir) if checkpoint_dir is not None else None
        if config is None:
            raise ValueError(
                f"checkpoint folder {str(checkpoint_dir)!r} has no {HF_CONFIG_FILE}, so the image-text model is "
                "unknown. Add a model section (e.g. model._component_=ftune.models.gemma3.gemma3_vision_4b)."
            )
        return image_text_model_from_hf_config(config, dtype=dtype, device="meta")[2]
    family, net = _from_config_json(checkpoint_dir, dtype=dtype, device="meta")
    if model is None and is_rank_zero():  # a training run's start-up line says it (`sized_line`)
        print(f"ftune: model: {sized_line(checkpoint_dir)}.", file=sys.stderr, flush=True)
    return net


def _raw_config(folder: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(folder) / HF_CONFIG_FILE
    return read_json(path) if path.is_file() else None


def _check_parts(net: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """An image-text model needs an image-text checkpoint read whole, and a text model a text one."""
    whole = any(k.startswith(VISION_PREFIX) for k in state)
    if isinstance(net, ImageTextModel) and not whole:
        raise ValueError(
            "the model section builds an image-text model (vision encoder, projector, text decoder), but the "
            "checkpointer read a text model (no vision_encoder.* tensors). For an image-text checkpoint set "
            "checkpointer.image_text=true; for a text checkpoint name a text builder in the model section."
        )
    if whole and not isinstance(net, ImageTextModel):
        raise ValueError(
            f"the checkpointer read an image-text model whole (checkpointer.image_text=true), but the model "
            f"section builds a {type(net).__name__}. Name the image-text builder in the model section (e.g. "
            "ftune.models.gemma3.gemma3_vision_4b) or leave it out, or set checkpointer.image_text=false to "
            "train the text decoder only (Gemma 3)."
        )


def _from_config_json(
    checkpoint_dir: str | os.PathLike | None, *, dtype: torch.dtype | None, device: str | None
) -> tuple[str, nn.Module]:
    config = read_hf_config(checkpoint_dir) if checkpoint_dir is not None else None
    if config is None:
        raise ValueError(
            f"checkpoint folder {str(checkpoint_dir)!r} has no {HF_CONFIG_FILE}, so the model architecture is "
            "unknown. Add a model section to the config (e.g. model._component_=ftune.models.llama3.llama3_8b), "
            "or point checkpointer.checkpoint_dir at a Hugging Face folder."
        )
    return model_from_hf_config(config, dtype=dtype, device=device)


def sized_line(checkpoint_dir: str | os.PathLike | None) -> str | None:
    """What the start-up line says of a model sized by its checkpoint: the family and the sizes that
    `checkpoint_dir`'s config.json gives, e.g. ``smollm2 (30 layers, width 576, vocabulary 49152), as
    '<folder>/config.json' says (no model section in the config)``. A family whose config.json reads
    as another's (`SAME_ARCHITECTURE`: Qwen2 is built as Qwen2.5) names both. None when config.json is
    missing or names no family ftune builds: building the model then says why."""
    try:
        config = read_hf_config(checkpoint_dir) if checkpoint_dir is not None else None
        family = family_from_hf_config(config) if config is not None else None
    except (OSError, ValueError):
        return None
    if config is None or family is None:
        return None
    also = [name for name, same in SAME_ARCHITECTURE.items() if same == family]
    named = f"{family} (or {', '.join(also)}: the same architecture)" if also else family
    sizes = ", ".join(
        f"{what} {config[key]}"
        for what, key in (("width", "hidden_size"), ("vocabulary", "vocab_size"))
        if key in config
    )
    layers = f"{config.get('num_hidden_layers', '?')} layers" + (f", {sizes}" if sizes else "")
    path = Path(str(checkpoint_dir)) / HF_CONFIG_FILE
    return f"{named} ({layers}), as {str(path)!r} says (no model section in the config)"


def model_from_checkpoint(checkpoint_dir: str | os.PathLike, *, image_text: bool = False) -> nn.Module:
    """The model `checkpoint_dir`'s config.json describes (family and sizes), with random weights.

    What a training config without a `model` section builds (`ftune.config.model_source`): reading
    `cfg.model` then gives ``{_component_: ftune.checkpointing.model_from_checkpoint, checkpoint_dir:
    <checkpointer.checkpoint_dir>}`` (and ``image_text: true`` when the checkpointer reads the folder
    whole: the image-text model, not its text decoder). Built on the current default device and dtype.

    Raises:
        ValueError: no config.json in `checkpoint_dir`, or one naming an architecture ftune does not build.
    """
    if image_text:
        return meta_model(checkpoint_dir, dtype=torch.get_default_dtype(), image_text=True).to_empty(
            device=torch.get_default_device()
        )
    return _from_config_json(checkpoint_dir, dtype=None, device=None)[1]


def build_model(
    model: Any,
    state: Mapping[str, torch.Tensor],
    *,
    device: torch.device | str,
    dtype: torch.dtype,
    checkpoint_dir: str | os.PathLike | None = None,
) -> nn.Module:
    """Build the model on the meta device and load `state` into it, strictly.

    Args:
        model: the config's ``model`` section (a `_component_` builder), or None to size the model
            from `checkpoint_dir`'s config.json.
        state: the model weights in ftune names (``Loaded.model`` from a checkpointer).
        device: where the model lives.
        dtype: the parameter dtype (floating tensors of `state` are cast to it).
        checkpoint_dir: the checkpoint folder: its config.json sizes the model when `model` is
            None, and is checked against the built model otherwise.

    Returns:
        The loaded model on `device` (in train mode, as every new module; inference calls `.eval()`).
        A `state` with a score head (`score.weight`: a reward model's checkpoint) builds a reward model
        (`ftune.modules.score_head.add_score_head`: no LM head).

    Raises:
        ValueError: the checkpoint does not fit the model (names the tensors and shapes), or the
            architecture is unknown (see `meta_model`).
    """
    image_text = any(k.startswith(VISION_PREFIX) for k in state)
    net = meta_model(checkpoint_dir, model, dtype=dtype, image_text=image_text)
    _check_parts(net, state)
    if SCORE_KEY in state:
        add_score_head(net)
    load_into(net, cast_floating(state, dtype))
    return net.to(device)
