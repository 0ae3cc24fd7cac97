"""GGUF export: an ftune model folder (optionally + a LoRA/DoRA adapter, merged) to one llama.cpp file.

    export_gguf("out/step_200/merged", "smollm2-ft.Q8_0.gguf", file_type="q8_0")
    export_gguf("checkpoints/SmolLM2-135M", "ft.gguf", file_type="f16", adapter_dir="out/step_200")

The input is anything ftune reads as a Hugging Face folder: a downloaded or converted base model, a
full fine-tune's step folder, a LoRA run's merged/ folder, a QAT run's output; `adapter_dir` (a LoRA
or DoRA step folder) is merged into it first, as `ftune run generate` merges it. The file holds what
llama.cpp's own `convert_hf_to_gguf.py` writes (`export_meta`, `export_vocab`,
`export_tensors`), and an Ollama Modelfile is written beside it (`write_modelfile`). An image-text
model (Gemma 3, SmolVLM) gives two files, as llama.cpp's converter does with --mmproj: its text decoder
as the model file and its vision tower and projector as `mmproj-<name>.gguf` beside it
(`export_mmproj`, `ftune.config.gguf_args.mmproj_path`).

Families: every ftune family, as `export_meta.ARCHITECTURES` maps it (llama files for SmolLM2,
Llama 2/3/3.x, Code Llama, Mistral and Mixtral; qwen2, qwen3, qwen3moe, gemma, gemma2, gemma3,
phi3 for Phi-3 and Phi-4). Types: f32, f16, bf16, q8_0, q6_k, q5_k_m, q5_k_s, q4_k_m, q4_k_s, q4_0
(`export_types.FILE_TYPES`, which also says which tensor gets which type).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from safetensors import safe_open

from ftune.checkpointing.adapter import ADAPTER_WEIGHTS_FILE, has_adapter
from ftune.checkpointing.atomic import atomic_path
from ftune.checkpointing.families import converter
from ftune.checkpointing.gguf.export_meta import architecture, write_hparams
from ftune.checkpointing.gguf.export_mmproj import mmproj_tensors, projector_type, write_mmproj
from ftune.checkpointing.gguf.export_tensors import gguf_tensors, to_numpy
from ftune.checkpointing.gguf.export_types import (
    FileType,
    GGMLType,
    encode,
    lookup_file_type,
    tensor_type,
    wide_attn_v,
)
from ftune.checkpointing.gguf.export_vocab import TokenizerInfo, write_tokenizer
from ftune.checkpointing.gguf.imatrix import imatrix_weights, read_imatrix_for
from ftune.checkpointing.gguf.ollama import modelfile_text
from ftune.checkpointing.hf import HFCheckpointer
from ftune.checkpointing.inference import merge_adapter_folder
from ftune.checkpointing.model_build import HF_CONFIG_FILE
from ftune.checkpointing.readers import read_json
from ftune.config.gguf_args import check_model_folder, mmproj_path, modelfile_path
from ftune.models import (
    builder_kwargs,
    family_from_hf_config,
    image_text_text_config,
    is_image_text_model_config,
    text_model_config,
)

logger = logging.getLogger(__name__)

StateDict = dict[str, torch.Tensor]
# Module-name parts of an adapter saved from an image-text model read whole (PEFT names; Gemma 3 and
# LLaVA name the decoder `language_model`, Idefics3 `text_model`).
_WHOLE_MODEL_PARTS = (".language_model.", ".text_model.", ".vision_tower.", ".vision_model.")


@dataclass(frozen=True)
class Exported:
    """What `export_gguf` wrote.

    Attributes:
        path: the .gguf file.
        modelfile: the Ollama Modelfile beside it.
        family: the ftune family of the model (of the text decoder for an image-text model).
        architecture: `general.architecture` of the file.
        types: GGML type name -> number of tensors stored in it.
        mmproj: the projector file of an image-text model (`export_mmproj`), else None.
    """

    path: Path
    modelfile: Path
    family: str
    architecture: str
    types: dict[str, int]
    mmproj: Path | None = None


def load_hf_state(
    model_dir: str | os.PathLike, adapter_dir: str | os.PathLike | None
) -> tuple[StateDict, str]:
    """The folder's weights in HF names (adapter merged when given) and the model family.

    Raises:
        ValueError: `model_dir` is an adapter-only step folder (says to pass it as the adapter).
    """
    folder = Path(model_dir).expanduser()
    if has_adapter(folder) and not (folder / HF_CONFIG_FILE).is_file():
        check_model_folder(folder)  # says to pass it as the adapter (as `ftune export` does first)
    loaded = HFCheckpointer(folder).load()  # read-only: no output_dir
    state = loaded.model
    if adapter_dir is not None:
        state = merge_adapter_folder(state, adapter_dir, family=loaded.family)
    return converter(loaded.family).ftune_to_hf(state), loaded.family


def load_image_text_state(
    model_dir: Path, adapter_dir: str | os.PathLike | None, config: dict[str, Any]
) -> tuple[StateDict, str, StateDict]:
    """An image-text folder read whole (adapter merged when given): (its text decoder in the text
    family's HF names, the text family, the whole model in ftune names).

    Raises:
        ValueError: a model llama.cpp has no projector for (`export_mmproj.projector_type`), said
            before the weights are read.
    """
    projector_type(config, source=model_dir)
    loaded = HFCheckpointer(model_dir, image_text=True).load()  # read-only: no output_dir
    state = loaded.model
    text_family = family_from_hf_config(image_text_text_config(config))
    whole_adapter = adapter_dir is not None and _adapts_whole_model(Path(adapter_dir).expanduser())
    if whole_adapter:
        state = merge_adapter_folder(state, adapter_dir, family=loaded.family)
    decoder = {k.removeprefix("decoder."): v for k, v in state.items() if k.startswith("decoder.")}
    if adapter_dir is not None and not whole_adapter:
        # A run that read the folder's text decoder only (checkpointer.image_text=false) saved an
        # adapter of the text-only model: it merges into the decoder, the tower stays as it is.
        decoder = merge_adapter_folder(decoder, adapter_dir, family=text_family)
        state = {**state, **{f"decoder.{k}": v for k, v in decoder.items()}}
    return converter(text_family).ftune_to_hf(decoder), text_family, state


def _adapts_whole_model(adapter_dir: Path) -> bool:
    """Whether a PEFT adapter was saved from an image-text model read whole (its module names hold the
    language model's or the vision tower's prefix) rather than from its text decoder alone."""
    path = adapter_dir / ADAPTER_WEIGHTS_FILE
    if not path.is_file():
        return True  # merge_adapter_folder says what the folder lacks
    with safe_open(str(path), framework="pt") as f:
        return any(part in key for key in f.keys() for part in _WHOLE_MODEL_PARTS)


def export_gguf(
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    *,
    file_type: str,
    adapter_dir: str | os.PathLike | None = None,
    name: str | None = None,
    imatrix: str | os.PathLike | None = None,
) -> Exported:
    """Write the model of `model_dir` (with `adapter_dir` merged) as a GGUF file llama.cpp runs.

    Args:
        model_dir: an HF-layout folder ftune reads (config.json, safetensors, tokenizer.json).
        output: the .gguf file to write (replaced if it exists: callers check first, see
            `ftune.cli.export`); its Modelfile goes to `modelfile_path(output)`.
        file_type: one of `export_types.FILE_TYPES` (f32, f16, bf16, q8_0, q6_k, q5_k_m, q5_k_s,
            q4_k_m, q4_k_s, q4_0).
        adapter_dir: a LoRA/DoRA step folder to merge first, or None.
        name: `general.name`; default: the model folder's name.
        imatrix: an importance matrix file (GGUF, `ftune export imatrix` or llama-imatrix) to quantize
            with, as `llama-quantize --imatrix` does (types q6_k, q5_k_*, q4_k_*, q4_0).

    Returns:
        What was written (`Exported`).

    Raises:
        FileNotFoundError / ValueError / KeyError: a missing file, a family or option llama.cpp
            cannot run, an unknown tensor; each names the folder and what to do.
    """
    start = time.perf_counter()
    ftype = lookup_file_type(file_type)
    importance = None if imatrix is None else read_imatrix_for(imatrix, ftype)
    folder = Path(model_dir).expanduser()
    raw = read_json(folder / HF_CONFIG_FILE) if (folder / HF_CONFIG_FILE).is_file() else {}
    vision = None  # (whole state in ftune names, config.json) of an image-text model
    if is_image_text_model_config(raw):
        hf_state, family, whole = load_image_text_state(folder, adapter_dir, raw)
        config, vision = image_text_text_config(raw), (whole, raw)
        mmproj_tensors(whole)  # an unknown tower or projector tensor is refused before any file is written
    else:
        hf_state, family = load_hf_state(folder, adapter_dir)
        config = text_model_config(read_json(folder / HF_CONFIG_FILE))
    arch = architecture(family)
    tied = bool(config.get("tie_word_embeddings", False))
    if tied:
        hf_state.pop("lm_head.weight", None)
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    layers = int(config["num_hidden_layers"])
    tensors = gguf_tensors(hf_state, arch=arch, num_heads=heads, num_kv_heads=kv_heads, num_layers=layers)
    vocab_size = int(tensors["token_embd.weight"].shape[0])

    writer = gguf.GGUFWriter(None, arch)
    writer.add_type("model")
    writer.add_name(name or folder.resolve().name)
    writer.add_file_type(ftype.file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    extra = write_hparams(writer, family, config, source=folder)
    info = write_tokenizer(writer, folder, vocab_size=vocab_size, source=folder)
    tensors.update(extra)
    mix = {
        "tied": tied,
        "num_layers": layers,
        "num_experts": int(builder_kwargs(config, family).get("num_experts", 0)),
    }
    mix["wide_attn_v"] = wide_attn_v(arch, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads)
    mix["imatrix"] = importance is not None
    weights = {} if importance is None else imatrix_weights(importance, tensors, imatrix, writer)
    types = _add_tensor_infos(writer, tensors, ftype, mix)
    out = Path(output)
    with atomic_path(out) as tmp:
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for gguf_name, value in tensors.items():  # one tensor in memory at a time
            writer.write_tensor_data(encode(to_numpy(value), types[gguf_name], weights.get(gguf_name)))
        writer.close()
    modelfile = write_modelfile(out, info)
    mmproj = None
    if vision is not None:
        whole, raw = vision
        mmproj = write_mmproj(
            whole, raw, mmproj_path(out), file_type=ftype.name, source=folder,
            name=f"{name or folder.resolve().name} (vision)",
        )  # fmt: skip
    counts: dict[str, int] = {}
    for qtype in types.values():
        counts[qtype.name] = counts.get(qtype.name, 0) + 1
    logger.info(
        "Exported %s (%s, %s) -> %s, %.1f MB, %.1f s",
        folder, family, ftype.name, out, out.stat().st_size / 2**20, time.perf_counter() - start,
    )  # fmt: skip
    return Exported(out, modelfile, family, arch, counts, mmproj)


def _add_tensor_infos(
    writer: gguf.GGUFWriter, tensors: dict[str, torch.Tensor], ftype: FileType, mix: dict[str, Any]
) -> dict[str, GGMLType]:
    """Declare every tensor (name, shape, type, byte size) before the data is written; return the types.

    `mix` holds `tensor_type`'s model facts (tied, num_layers, wide_attn_v).
    """
    types = {}
    for gguf_name, value in tensors.items():
        shape = tuple(int(d) for d in value.shape)
        qtype = tensor_type(gguf_name, shape, ftype, **mix)
        types[gguf_name] = qtype
        if qtype in (GGMLType.F32, GGMLType.F16):
            dtype = np.dtype(np.float32 if qtype == GGMLType.F32 else np.float16)
            writer.add_tensor_info(gguf_name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype)
            writer.add_tensor_info(
                gguf_name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype
            )
    return types


def write_modelfile(gguf_path: Path, info: TokenizerInfo) -> Path:
    """Write the Ollama Modelfile beside `gguf_path` (`ollama.modelfile_text`).

    FROM the file, a stop parameter per stop token, and for a ChatML chat template the TEMPLATE in
    Ollama's syntax and its default SYSTEM prompt; other templates are left to Ollama, which reads
    the file's `tokenizer.chat_template`.
    """
    text = modelfile_text(gguf_path.name, chat_template=info.chat_template, stops=info.stops)
    path = modelfile_path(gguf_path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
