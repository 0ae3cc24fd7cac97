"""GGUF export of a LoRA adapter, unmerged: the file llama.cpp loads with `--lora` over its base model.

    export_lora_gguf("checkpoints/SmolLM2-135M", "out/step_200", "ft.lora.gguf", file_type="f16")

One base GGUF then serves many adapters (llama.cpp `--lora`, llama-cpp-python `lora_path`, Ollama's
`ADAPTER`). The file is what llama.cpp's `convert_lora_to_gguf.py` writes: `general.type` "adapter",
`adapter.type` "lora", `adapter.lora.alpha`, the base model's `general.architecture`, no vocabulary
and no hyper-parameters; for each adapted matrix `<gguf name>.lora_a` (A, rank x in) and
`<gguf name>.lora_b` (B, out x rank), the base tensor's name plus a suffix. llama.cpp adds
`alpha / rank * B @ A` to the base weight's product, as PEFT and ftune do. B's rows follow the base
weight's rows, so a llama file's q/k rows are permuted in B as in the base (`gguf_tensors`); A keeps
its rows.

Refused, with the reason: DoRA (the format has no magnitude vector; export it merged), rsLoRA and
per-module ranks or alphas (the file has one alpha for all), an adapter of the tied output projection
(llama.cpp applies none there), and K-quant or q4_0 tensor types (`convert_lora_to_gguf.py` writes
f32, f16, bf16 or q8_0). An image-text model's adapter (Gemma 3, SmolVLM) is written for its model
file, the text decoder; one that changes the vision tower or projector is refused (llama.cpp applies
LoRA files to the model file only): export it merged.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from ftune.checkpointing.adapter import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE
from ftune.checkpointing.atomic import atomic_path
from ftune.checkpointing.families import family_from_hf_config
from ftune.checkpointing.gguf.export_meta import architecture
from ftune.checkpointing.gguf.export_tensors import gguf_tensors, to_numpy
from ftune.checkpointing.gguf.export_types import encode, lookup_file_type, tensor_type
from ftune.checkpointing.model_build import HF_CONFIG_FILE
from ftune.checkpointing.readers import read_json, read_safetensors
from ftune.config.gguf_args import check_adapter_folder, check_adapter_gguf_type, check_model_folder
from ftune.models import image_text_text_config, is_image_text_model_config, text_model_config

logger = logging.getLogger(__name__)

_PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class ExportedAdapter:
    """What `export_lora_gguf` wrote.

    Attributes:
        path: the .gguf file.
        architecture: `general.architecture` (the base model's).
        alpha: `adapter.lora.alpha`.
        modules: how many matrices the adapter changes.
    """

    path: Path
    architecture: str
    alpha: float
    modules: int


def export_lora_gguf(
    model_dir: str | os.PathLike,
    adapter_dir: str | os.PathLike,
    output: str | os.PathLike,
    *,
    file_type: str = "f32",
    name: str | None = None,
) -> ExportedAdapter:
    """Write the LoRA adapter of `adapter_dir` (trained on `model_dir`) as a llama.cpp LoRA GGUF file.

    Args:
        model_dir: the base model's HF-layout folder (its config.json names the architecture and
            sizes; its weights are not read).
        adapter_dir: a LoRA step folder (adapter_model.safetensors + adapter_config.json, PEFT's format).
        output: the .gguf file to write (replaced if it exists: callers check first).
        file_type: f32, f16, bf16 or q8_0 (matrices whose rows are not whole Q8_0 blocks go F16).
        name: `general.name`; default: the adapter folder's name.

    Raises:
        FileNotFoundError / ValueError / KeyError: a missing file, an adapter the format cannot hold
            (DoRA, rsLoRA, per-module ranks), a module llama.cpp has no tensor for; each says what to do.
    """
    folder, adapter = Path(model_dir).expanduser(), Path(adapter_dir).expanduser()
    check_model_folder(folder)
    check_adapter_folder(adapter)
    ftype = lookup_file_type(check_adapter_gguf_type(file_type))
    raw = read_json(folder / HF_CONFIG_FILE)
    image_text = is_image_text_model_config(raw)  # the adapter applies to its model file (text decoder)
    config = image_text_text_config(raw) if image_text else text_model_config(raw)
    arch = architecture(
        family_from_hf_config(config if image_text else raw, config_path=folder / HF_CONFIG_FILE)
    )
    peft = read_json(adapter / ADAPTER_CONFIG_FILE)
    alpha = _check_peft_config(peft, adapter / ADAPTER_CONFIG_FILE)
    pairs = _lora_pairs(read_safetensors(adapter / ADAPTER_WEIGHTS_FILE), adapter / ADAPTER_WEIGHTS_FILE)
    if image_text:
        pairs = {_text_decoder_module(m, adapter): ab for m, ab in pairs.items()}
    tied = bool(config.get("tie_word_embeddings", False))
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    sizes = dict(arch=arch, num_heads=heads, num_kv_heads=int(config.get("num_key_value_heads") or heads))
    tensors = {}
    for module, (a, b) in pairs.items():
        if module.endswith("lm_head") and tied:
            raise ValueError(
                f"{adapter}: the adapter changes lm_head, which this model ties to its embedding; llama.cpp "
                "applies no adapter there. Export the model merged instead (ftune export gguf without "
                "--adapter-only), or train without lm_head in the LoRA targets."
            )
        if module.endswith(".experts"):
            raise ValueError(
                f"{adapter}: the adapter changes {module} (every expert of a mixture-of-experts layer); "
                "ftune writes llama.cpp adapters of 2-D weights only, not of stacked expert tensors. Export "
                "the model merged instead (ftune export gguf without --adapter-only), or train without "
                "'experts' in the LoRA targets."
            )
        ((gguf_name, b_rows),) = gguf_tensors({f"{module}.weight": b}, **sizes, num_layers=layers).items()
        if a.shape[0] != b.shape[1]:
            raise ValueError(
                f"{adapter}: {module}'s lora_A has {a.shape[0]} rows but lora_B {b.shape[1]} columns."
            )
        tensors[f"{gguf_name}.lora_a"] = a  # (rank, in)
        tensors[f"{gguf_name}.lora_b"] = b_rows  # (out, rank), rows in the base tensor's order

    writer = gguf.GGUFWriter(None, arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    writer.add_name(name or adapter.resolve().name)
    writer.add_file_type(ftype.file_type)
    types = {}
    for key, value in tensors.items():
        shape = tuple(int(d) for d in value.shape)
        qtype = types[key] = tensor_type(key, shape, ftype, tied=tied)
        if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            dtype = np.dtype(np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16)
            writer.add_tensor_info(key, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype)
            writer.add_tensor_info(
                key, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype
            )
    out = Path(output)
    with atomic_path(out) as tmp:
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for key, value in tensors.items():
            writer.write_tensor_data(encode(to_numpy(value), types[key]))
        writer.close()
    logger.info("Exported the LoRA adapter %s (%d matrices, alpha %g) -> %s", adapter, len(pairs), alpha, out)
    return ExportedAdapter(out, arch, alpha, len(pairs))


def _check_peft_config(peft: dict, path: Path) -> float:
    """The adapter's alpha, or a ValueError for what one llama.cpp alpha cannot express."""
    problems = []
    if peft.get("use_dora"):
        problems.append("use_dora=true (a DoRA magnitude vector has no place in llama.cpp's LoRA format)")
    if peft.get("use_rslora"):
        problems.append("use_rslora=true (llama.cpp scales by alpha / rank)")
    for key in ("rank_pattern", "alpha_pattern"):
        if peft.get(key):
            problems.append(f"{key}={peft[key]!r} (the file has one alpha for every module)")
    if problems:
        raise ValueError(
            f"{str(path)!r} sets {'; '.join(problems)}. Export this adapter merged instead: "
            "ftune export gguf <base> <out.gguf> --adapter <step folder> --type <type> (without --adapter-only)."
        )
    if "lora_alpha" not in peft:
        raise ValueError(f"{str(path)!r} has no lora_alpha; a PEFT LoRA config (ftune writes one) names it.")
    return float(peft["lora_alpha"])


# PEFT module-name prefixes of an image-text model read whole: its text decoder (-> the text-only
# model's names) and the parts a llama.cpp LoRA file cannot reach (they live in the projector file).
_DECODER_PREFIXES = {"model.language_model.": "model.", "model.text_model.": "model."}
_VISION_PREFIXES = (
    "model.vision_tower.",
    "model.vision_model.",
    "model.multi_modal_projector.",
    "model.connector.",
)


def _text_decoder_module(module: str, adapter: Path) -> str:
    """An image-text adapter's module in the text-only model's names (an adapter of the text decoder
    alone is in them already).

    Raises:
        ValueError: a module of the vision tower or projector, which llama.cpp's LoRA files cannot adapt.
    """
    if module.startswith(_VISION_PREFIXES):
        raise ValueError(
            f"{adapter}: the adapter changes {module}, a part of the vision tower or projector; llama.cpp applies "
            "a LoRA file to the model file (the text decoder) only, not to the projector (mmproj) file. Export "
            "the model merged instead (ftune export gguf --adapter without --adapter-only: both files get the "
            "merged weights), or train the text decoder's LoRA targets only."
        )
    for prefix, text in _DECODER_PREFIXES.items():
        if module.startswith(prefix):
            return text + module.removeprefix(prefix)
    return module


def _lora_pairs(weights: dict, path: Path) -> dict[str, tuple]:
    """PEFT tensors -> {HF module name: (A, B)}; anything but lora_A/lora_B pairs is refused."""
    pairs: dict[str, dict[str, object]] = {}
    for key, value in weights.items():
        stem = key.removeprefix(_PEFT_PREFIX)
        for part in ("A", "B"):
            if stem.endswith(f".lora_{part}.weight"):
                pairs.setdefault(stem.removesuffix(f".lora_{part}.weight"), {})[part] = value
                break
        else:
            raise KeyError(
                f"{path}: tensor {key!r} is not a lora_A/lora_B weight; llama.cpp's LoRA files hold only those "
                "(trained embeddings or extra modules cannot be applied). Export the model merged instead."
            )
    missing = sorted(m for m, p in pairs.items() if len(p) != 2)
    if missing:
        raise ValueError(f"{path}: {missing[0]} has lora_A or lora_B but not both; the file is incomplete.")
    return {m: (p["A"], p["B"]) for m, p in sorted(pairs.items())}
