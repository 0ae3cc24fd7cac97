"""What `ftune export gguf` checks in its arguments before torch and gguf load (torch-free).

The tensor types it writes (`GGUF_TYPES`, the keys of `ftune.checkpointing.gguf.export_types.FILE_TYPES`)
and where the Ollama Modelfile goes beside the .gguf file: `ftune.cli.export` checks every argument
with these and `ftune.config.output_path` in well under a second, then imports the exporter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HF_CONFIG = "config.json"
GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q4_k_m", "q4_k_s", "q4_0")


def check_gguf_type(name: str) -> str:
    """`name` lower-cased when it is one of `GGUF_TYPES`.

    Raises:
        ValueError: naming the type given and the accepted ones.
    """
    key = name.lower()
    if key not in GGUF_TYPES:
        raise ValueError(
            f"--type {name!r} is not a GGUF type ftune writes. Accepted: {', '.join(GGUF_TYPES)} "
            "(q4_k_m is the usual 4-bit pick; for other llama.cpp types, such as the IQ and Q2_K/Q3_K "
            "families, export f16 and run llama.cpp's llama-quantize on it)."
        )
    return key


ADAPTER_GGUF_TYPES = ("f32", "f16", "bf16", "q8_0")  # what llama.cpp's convert_lora_to_gguf.py writes


def check_adapter_gguf_type(name: str) -> str:
    """`name` lower-cased when a LoRA adapter file can hold it (`ADAPTER_GGUF_TYPES`).

    Raises:
        ValueError: naming the type given and the accepted ones.
    """
    key = check_gguf_type(name)
    if key not in ADAPTER_GGUF_TYPES:
        raise ValueError(
            f"--type {name!r} is not a type of a LoRA adapter file (--adapter-only); llama.cpp's adapters hold "
            f"{', '.join(ADAPTER_GGUF_TYPES)}, and its base model file takes the K-quants. Pass --type f16 or f32."
        )
    return key


def modelfile_path(output: str | os.PathLike) -> Path:
    """Where the Ollama Modelfile of `output` goes: `<name>.Modelfile` beside it."""
    out = Path(output)
    return out.with_name(out.stem + ".Modelfile")


def mmproj_path(output: str | os.PathLike) -> Path:
    """Where the projector file of an image-text model's `output` goes: `mmproj-<name>.gguf` beside it
    (the name llama.cpp's converter gives it)."""
    out = Path(output)
    return out.with_name(f"mmproj-{out.name}")


# config.json model_type of an image-text model -> llama.cpp's projector type for it (`clip.projector_type`).
MMPROJ_PROJECTORS = {"gemma3": "gemma3", "idefics3": "idefics3", "smolvlm": "idefics3"}
# image-text model_types llama.cpp has no projector for: (the reason, what to do instead).
NO_MMPROJ = {
    "llava": (
        "llama.cpp's LLaVA projector ('mlp') applies GELU in its tanh approximation between its two layers, "
        "where ftune's MLPProjector (and transformers' LLaVA) applies the exact GELU",
        "To run its text decoder alone in llama.cpp, export a text-only checkpoint of it.",
    ),
    "mllama": (
        "llama.cpp's multimodal library puts image rows into the text sequence, while Llama 3.2 Vision reads "
        "images through cross-attention layers, which llama.cpp has no projector type or text model for",
        "To run an image-text model in llama.cpp, fine-tune Gemma 3 or SmolVLM.",
    ),
}


def image_text_model_type(model_dir: Path) -> str | None:
    """The model_type of the folder's config.json when it is an image-text model (gemma3, idefics3,
    smolvlm; llava, mllama: refused), else None (read without torch)."""
    try:
        config = json.loads((model_dir / HF_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if model_type in (*MMPROJ_PROJECTORS, *NO_MMPROJ) else None


def no_mmproj_error(model_type: str, source: str | os.PathLike) -> ValueError:
    """The error for an image-text model whose projector llama.cpp cannot run as ftune does."""
    return ValueError(
        f"{str(Path(source) / HF_CONFIG)!r} describes a {model_type!r} image-text model, which has no llama.cpp "
        f"projector (mmproj) file that computes what ftune trained: {NO_MMPROJ[model_type][0]}. Image-text "
        f"models ftune exports for llama.cpp: Gemma 3 (model_type gemma3) and SmolVLM (idefics3, smolvlm). "
        f"{NO_MMPROJ[model_type][1]}"
    )


def check_mmproj_exportable(model_dir: Path) -> str | None:
    """llama.cpp's projector type for an image-text folder, None for a text model.

    Raises:
        ValueError: an image-text model llama.cpp has no projector for (`no_mmproj_error`).
    """
    model_type = image_text_model_type(model_dir)
    if model_type in NO_MMPROJ:
        raise no_mmproj_error(model_type, model_dir)
    return MMPROJ_PROJECTORS.get(model_type) if model_type else None


ADAPTER_WEIGHTS = "adapter_model.safetensors"  # ftune.checkpointing.adapter.ADAPTER_WEIGHTS_FILE


def _held(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())[:12]


def require_model_folder(model_dir: Path) -> None:
    """Refuse a model folder that does not exist.

    Raises:
        FileNotFoundError: naming the folder and what to pass.
    """
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"model folder {str(model_dir)!r} does not exist or is not a folder. Pass a folder with "
            "config.json, the weights and tokenizer.json (a base model, a step folder, a merged/ folder)."
        )


def check_model_folder(model_dir: Path) -> None:
    """Refuse a model folder that is not a whole HF-layout model, from its listing.

    Raises:
        FileNotFoundError: it does not exist, or holds no config.json.
        ValueError: it holds only a LoRA/DoRA adapter (says to pass it as --adapter).
    """
    require_model_folder(model_dir)
    if (model_dir / ADAPTER_WEIGHTS).is_file() and not (model_dir / HF_CONFIG).is_file():
        raise ValueError(
            f"{str(model_dir)!r} holds a LoRA/DoRA adapter, not a whole model. Pass the base model folder "
            f"(the run's checkpoint_dir) and this folder as the adapter: ftune export gguf <base> <out.gguf> "
            f"--adapter {model_dir} --type <type>."
        )
    if not (model_dir / HF_CONFIG).is_file():
        raise FileNotFoundError(
            f"model folder {str(model_dir)!r} holds no {HF_CONFIG} (it holds {_held(model_dir)}), so the model "
            "family is unknown. Pass a Hugging Face layout folder (config.json, the weights, tokenizer.json): a "
            "base model, a full fine-tune's step folder or a LoRA run's merged/ folder."
        )


def check_adapter_folder(adapter_dir: Path) -> None:
    """Refuse an `--adapter` folder without adapter weights, from its listing.

    Raises:
        FileNotFoundError: naming the folder, what it holds, and what to pass instead.
    """
    if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        held = _held(adapter_dir) if adapter_dir.is_dir() else "nothing: it does not exist"
        raise FileNotFoundError(
            f"--adapter {str(adapter_dir)!r} holds no {ADAPTER_WEIGHTS} (it holds {held}). Pass a step folder "
            "of a LoRA run (output_dir/step_<N>); a full fine-tune's step folder or a LoRA run's merged/ folder "
            "is a whole model: pass it as the model folder, without --adapter."
        )
