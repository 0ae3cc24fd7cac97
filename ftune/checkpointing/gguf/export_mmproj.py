"""GGUF export, vision: an image-text model's vision tower and projector as llama.cpp's projector file.

    path = write_mmproj(state, config, "mmproj-ft.gguf", file_type="f16", source=folder, name="ft")
    # state: the ImageTextModel's state dict (ftune names); config: its HF config.json

llama.cpp runs an image-text model from two files: the text decoder (an ordinary model GGUF) and a
projector file, `mmproj-*.gguf` (`general.architecture` "clip"), which its multimodal library (mtmd:
`llama-mtmd-cli -m model.gguf --mmproj mmproj-model.gguf --image photo.png`) loads to turn an image
into the rows that stand for it in the text. This module writes the second file as llama.cpp's own
`convert_hf_to_gguf.py --mmproj` writes it: `clip.*` metadata (projector type, the SigLIP tower's
sizes, image size, patch size, image mean and standard deviation, norm epsilon, the projector's merge
factor) and the tower and projector under llama.cpp's tensor names (`MMPROJ_NAMES`).

Families, by the projector llama.cpp implements for them:

- Gemma 3 (4B, 12B, 27B image-text): projector type "gemma3" (average pooling to `mm_tokens_per_image`,
  RMSNorm, projection). The norm is stored as 1 + weight, as Gemma's text norms are.
- SmolVLM (Idefics3): projector type "idefics3" (pixel shuffle by `scale_factor`, a linear layer).
  llama.cpp cuts an image into tiles as SmolVLM's processor does, up to the longest edge written
  here (`clip.vision.preproc_image_size`).
- LLaVA compositions are refused (`ftune.config.gguf_args.NO_MMPROJ` says why): llama.cpp's LLaVA
  projector ("mlp") applies GELU in its tanh approximation where ftune's (and transformers') LLaVA
  projector applies the exact GELU, so the file would not compute the model ftune trained.

Types: an f32 export writes every tensor F32; every other type writes the projector file F16 (its
1-D tensors and the patch and position embeddings F32), as llama.cpp's published `mmproj-*-f16.gguf`
files are: the tower is small beside the text model.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from ftune.checkpointing.atomic import atomic_path
from ftune.checkpointing.gguf.export_tensors import to_numpy
from ftune.checkpointing.gguf.export_types import GGMLType, encode
from ftune.config.gguf_args import MMPROJ_PROJECTORS, NO_MMPROJ, no_mmproj_error
from ftune.data.image_ops import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD
from ftune.models._image_text_config import (  # sizes and defaults, as ftune builds the model
    GEMMA3_TOKENS_PER_IMAGE,
    IDEFICS3_SCALE_FACTOR,
    IMAGE_TEXT_MODEL_TYPES,
    _vision_kwargs,
)

logger = logging.getLogger(__name__)

PREPROCESSOR_FILE = "preprocessor_config.json"
# SmolVLM's and Idefics3's processors cut tiles from a longest edge of 4 tiles (2048 = 4 x 512 px).
IDEFICS3_TILES_PER_SIDE = 4
# llama.cpp's default Gemma 3 merge (64 x 64 patches pooled to 16 x 16): written only when it differs.
GEMMA3_MERGE = 4

# ftune key (under `vision_encoder.` / `projector.`) -> llama.cpp tensor name; {} is the layer index.
MMPROJ_NAMES: dict[str, str] = {
    "vision_encoder.patch_embedding.weight": "v.patch_embd.weight",
    "vision_encoder.patch_embedding.bias": "v.patch_embd.bias",
    "vision_encoder.position_embedding.weight": "v.position_embd.weight",
    "vision_encoder.post_layernorm.weight": "v.post_ln.weight",
    "vision_encoder.post_layernorm.bias": "v.post_ln.bias",
    **{
        f"vision_encoder.layers.{{}}.{ours}.{kind}": f"v.blk.{{}}.{theirs}.{kind}"
        for ours, theirs in (
            ("layer_norm1", "ln1"),
            ("layer_norm2", "ln2"),
            ("self_attn.q_proj", "attn_q"),
            ("self_attn.k_proj", "attn_k"),
            ("self_attn.v_proj", "attn_v"),
            ("self_attn.out_proj", "attn_out"),
            ("mlp.fc1", "ffn_up"),
            ("mlp.fc2", "ffn_down"),
        )
        for kind in ("weight", "bias")
    },
    # Gemma 3's projector: stored (vision_dim, text_dim) in both; llama.cpp transposes it in its graph.
    "projector.mm_input_projection_weight": "mm.input_projection.weight",
    "projector.mm_soft_emb_norm.weight": "mm.soft_emb_norm.weight",
    # Idefics3's connector.
    "projector.proj.weight": "mm.model.fc.weight",
}
_LAYER = re.compile(r"^(vision_encoder\.layers\.)(\d+)(\..+)$")
_F32_ALWAYS = ("v.patch_embd.weight", "v.position_embd.weight")  # as llama.cpp's converter keeps them


def projector_type(config: Mapping[str, Any], *, source: str | os.PathLike) -> str:
    """llama.cpp's projector type for an image-text model's config.json.

    Raises:
        ValueError: a model llama.cpp has no matching projector for, with the reason (`no_mmproj_error`).
    """
    model_type = str(config.get("model_type"))
    if model_type not in MMPROJ_PROJECTORS:
        if model_type in NO_MMPROJ:
            raise no_mmproj_error(model_type, source)
        raise ValueError(
            f"{str(Path(source) / 'config.json')!r}: model_type {model_type!r} is no image-text model ftune "
            f"writes a projector file for; accepted: {', '.join(MMPROJ_PROJECTORS)}."
        )
    return MMPROJ_PROJECTORS[model_type]


def mmproj_name(key: str) -> str:
    """llama.cpp's name of an ftune vision-tower or projector tensor.

    Raises:
        KeyError: a key of neither, or one llama.cpp's projector file has no tensor for.
    """
    match = _LAYER.match(key)
    pattern, layer = (f"{match.group(1)}{{}}{match.group(3)}", match.group(2)) if match else (key, None)
    if pattern not in MMPROJ_NAMES:
        raise KeyError(
            f"tensor {key!r} has no llama.cpp counterpart in a projector (mmproj) file, which holds the SigLIP "
            "tower (vision_encoder.*) and the Gemma 3 or Idefics3 projector (projector.*) only."
        )
    name = MMPROJ_NAMES[pattern]
    return name.format(layer) if layer is not None else name


def mmproj_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The vision tower and projector of an `ImageTextModel` state dict (ftune names; other keys are
    ignored) under llama.cpp's names, Gemma 3's projector norm as 1 + weight.

    Raises:
        KeyError: see `mmproj_name`.
    """
    out = {}
    for key, value in state.items():
        if not key.startswith(("vision_encoder.", "projector.")):
            continue
        name = mmproj_name(key)
        if name == "mm.soft_emb_norm.weight":
            value = value.float() + 1.0  # llama.cpp's RMSNorm multiplies by the stored weight
        out[name] = value
    return out


def preprocessing(folder: Path, kind: str, image_size: int) -> dict[str, Any]:
    """Image mean, std and (Idefics3) longest edge from the folder's preprocessor_config.json. Without
    one (a step folder saved before step folders carried it), the published Gemma 3 and SmolVLM values,
    which are ftune's image transforms' defaults: mean and std 0.5, longest edge 4 tiles (said in a
    warning, as the file then may not preprocess as the fine-tune did)."""
    path = folder / PREPROCESSOR_FILE
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    longest = int((config.get("size") or {}).get("longest_edge", IDEFICS3_TILES_PER_SIDE * image_size))
    if not config:
        logger.warning(
            "%s has no %s: the projector file gets the published values (image mean %s, std %s%s); copy the "
            "base model's %s into the folder if the model was trained with others",
            folder, PREPROCESSOR_FILE, list(IMAGENET_STANDARD_MEAN), list(IMAGENET_STANDARD_STD),
            f", tiles cut from a longest edge of {longest} pixels" if kind == "idefics3" else "", PREPROCESSOR_FILE,
        )  # fmt: skip
    return {
        "mean": [float(v) for v in config.get("image_mean", IMAGENET_STANDARD_MEAN)],
        "std": [float(v) for v in config.get("image_std", IMAGENET_STANDARD_STD)],
        "longest_edge": longest,
    }


def write_mmproj(
    state: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
    output: str | os.PathLike,
    *,
    file_type: str,
    source: str | os.PathLike,
    name: str,
) -> Path:
    """Write the projector file of an image-text model.

    Args:
        state: the model's state dict in ftune names (`ImageTextModel`: `vision_encoder.*`,
            `projector.*`; the decoder's keys are ignored).
        config: the model's HF config.json (vision_config, scale_factor / mm_tokens_per_image).
        output: the file to write (replaced).
        file_type: the export's `--type`: "f32" writes F32, any other F16.
        source: the model folder (its preprocessor_config.json; messages).
        name: `general.name`.

    Returns:
        The path written.

    Raises:
        ValueError: a model llama.cpp has no projector for (`projector_type`).
        KeyError: a tensor of no llama.cpp name (`mmproj_name`).
    """
    kind = projector_type(config, source=source)
    vision = _vision_kwargs(dict(config), IMAGE_TEXT_MODEL_TYPES[config["model_type"]][1])
    tensors = mmproj_tensors(state)
    text_dim = int(
        tensors["mm.input_projection.weight"].shape[1]
        if kind == "gemma3"
        else tensors["mm.model.fc.weight"].shape[0]
    )
    pre = preprocessing(Path(source), kind, vision["image_size"])
    f32 = file_type == "f32"

    writer = gguf.GGUFWriter(None, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_clip_has_vision_encoder(True)
    writer.add_clip_projector_type(kind)
    writer.add_vision_projection_dim(text_dim)
    writer.add_vision_image_size(int(vision["image_size"]))
    writer.add_vision_patch_size(int(vision["patch_size"]))
    writer.add_vision_embedding_length(int(vision["vision_embed_dim"]))
    writer.add_vision_feed_forward_length(int(vision["vision_intermediate_dim"]))
    writer.add_vision_block_count(int(vision["vision_num_layers"]))
    writer.add_vision_head_count(int(vision["vision_num_heads"]))
    writer.add_vision_image_mean(pre["mean"])
    writer.add_vision_image_std(pre["std"])
    writer.add_vision_attention_layernorm_eps(float(vision["vision_norm_eps"]))
    writer.add_vision_use_gelu(True)  # SigLIP's tanh GELU: ggml_gelu
    patches_per_side = vision["image_size"] // vision["patch_size"]
    if kind == "gemma3":
        side = round(int(config.get("mm_tokens_per_image", GEMMA3_TOKENS_PER_IMAGE)) ** 0.5)
        if patches_per_side // side != GEMMA3_MERGE:
            writer.add_vision_projector_scale_factor(patches_per_side // side)
    else:
        writer.add_vision_projector_scale_factor(int(config.get("scale_factor", IDEFICS3_SCALE_FACTOR)))
        writer.add_vision_preproc_image_size(pre["longest_edge"])

    types = {}
    for gguf_name, value in tensors.items():
        shape = tuple(int(d) for d in value.shape)
        wide = value.dim() > 1 and gguf_name not in _F32_ALWAYS and not f32
        types[gguf_name] = GGMLType.F16 if wide else GGMLType.F32
        dtype = np.dtype(np.float16 if wide else np.float32)
        writer.add_tensor_info(gguf_name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    out = Path(output)
    with atomic_path(out) as tmp:
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for gguf_name, value in tensors.items():
            writer.write_tensor_data(encode(to_numpy(value), types[gguf_name]))
        writer.close()
    return out
