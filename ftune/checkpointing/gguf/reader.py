"""GGUF import: a llama-architecture llama.cpp file in, a Hugging Face-layout checkpoint folder out.

    convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "checkpoints/smollm2")

The folder holds what `transformers` and `ftune.checkpointing.load_hf` read: config.json,
generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
special_tokens_map.json. Quantized tensors are dequantized (the folder is for fine-tuning, not
for llama.cpp), and the q/k row order that llama.cpp's converter imposes is undone.

The file is read with the `gguf` package (llama.cpp's own reader); its `gguf.quants.dequantize`
does the block arithmetic, which is also what `transformers` uses when it loads a GGUF.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import gguf
import torch

from ftune.checkpointing.atomic import atomic_path, save_safetensors, write_json
from ftune.checkpointing.gguf import gemma3 as gguf_gemma3
from ftune.checkpointing.gguf.tensors import (
    _FLOAT_TYPES,
    check_tensor_types,
    dequantize,
    dequantized_state_dict,
    gguf_float,
)
from ftune.checkpointing.gguf.tokenizer import (
    build_tokenizer,
    generation_config,
    require,
    special_token_ids,
    tokenizer_configs,
)
from ftune.models._meta_keys import from_meta_qk
from ftune.modules.rope import Llama3RopeScaling

logger = logging.getLogger(__name__)

ARCHITECTURE = "llama"
ARCHITECTURES = (ARCHITECTURE, "gemma3")  # gemma3: ftune.checkpointing.gguf.gemma3
GGMLType = gguf.GGMLQuantizationType

# GGUF tensor name -> HF LlamaForCausalLM key; layer tensors are blk.<N>.<name>.weight.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def convert_gguf(
    gguf_path: str | os.PathLike, output_dir: str | os.PathLike, *, dtype: torch.dtype | None = None
) -> Path:
    """Convert a llama-architecture GGUF file into an HF-layout checkpoint folder.

    Args:
        gguf_path: the `.gguf` file (Llama 2/3, Mistral, SmolLM2, ... as written by llama.cpp's
            `convert_hf_to_gguf.py`, optionally re-quantized with `llama-quantize`).
        output_dir: folder to write; created if missing, files in it with the same names are replaced.
        dtype: dtype of the written weights. Default: the file's float type when every matrix is
            stored as F16 or BF16 (or F32), float32 as soon as one is quantized.

    Returns:
        `output_dir` as a Path.

    Raises:
        FileNotFoundError: `gguf_path` does not exist.
        ValueError: the file is not GGUF, its architecture is not llama, a tensor has a type that
            cannot be dequantized, a tensor name is unknown, or required metadata is missing;
            the message names the file and the key or tensor.
    """
    start = time.perf_counter()
    path = Path(gguf_path)
    reader = open_gguf(path)
    meta = read_metadata(reader, path)
    arch = check_architecture(meta, source=path)
    check_tensor_types(reader.tensors, source=path)
    tensors = {t.name: t for t in reader.tensors}
    if arch == "gemma3":
        family = gguf_gemma3
    else:
        family = None
    # Llama 3.1+ RoPE scaling, baked into a tensor by llama.cpp: it goes into config.json.
    rope_freqs = tensors.pop("rope_freqs.weight", None)
    shapes = {name: tuple(int(d) for d in t.shape) for name, t in tensors.items()}
    config = (
        family.hf_config(meta, shapes, source=path)
        if family is not None
        else hf_config(
            meta,
            shapes,
            source=path,
            rope_freqs=None if rope_freqs is None else dequantize(rope_freqs.data, rope_freqs.tensor_type),
        )
    )
    tokenizer = build_tokenizer(meta, source=path)  # before the slow part: its errors come first
    tokenizer_config, special_tokens_map = tokenizer_configs(meta, source=path)
    if family is not None and "chat_template" not in tokenizer_config:
        tokenizer_config["chat_template"] = family.GEMMA3_CHAT_TEMPLATE
    if dtype is None:
        dtype = _default_dtype(tensors.values())
    state_dict = (family.read_state_dict if family is not None else read_state_dict)(
        tensors, config, dtype=dtype, source=path
    )

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_safetensors(state_dict, out / "model.safetensors")
    with atomic_path(out / "tokenizer.json") as tmp:
        tokenizer.save(str(tmp))
    write_json(tokenizer_config, out / "tokenizer_config.json")
    write_json(special_tokens_map, out / "special_tokens_map.json")
    gen_config = family.generation_config(meta) if family is not None else generation_config(meta)
    write_json(gen_config, out / "generation_config.json")
    if family is not None:  # the notice the Gemma Terms of Use require with every copy
        (out / "NOTICE").write_text(family.NOTICE)
    # config.json last: a folder with a config.json is a complete checkpoint.
    write_json({**config, "torch_dtype": str(dtype).removeprefix("torch.")}, out / "config.json")
    logger.info("Converted %s -> %s (%s, %.1f s)", path, out, dtype, time.perf_counter() - start)
    return out


def open_gguf(path: Path) -> gguf.GGUFReader:
    """Open `path` with gguf's reader (memory-mapped), turning its low-level errors into one ValueError."""
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist.")
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors... on bad files
        raise ValueError(
            f"{path}: cannot read this file as GGUF ({type(e).__name__}: {e}). "
            "Give a .gguf file written by llama.cpp (its first four bytes are b'GGUF')."
        ) from e


def read_metadata(reader: gguf.GGUFReader, path: Path) -> dict[str, Any]:
    """All key/value metadata of the file as Python values (strings, numbers, bools, lists)."""
    meta = {}
    for key, field in reader.fields.items():
        try:
            meta[key] = field.contents()
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}: metadata key {key!r} holds a string that is not valid UTF-8 ({e})."
            ) from e
    return meta


def check_architecture(meta: Mapping[str, Any], *, source: str | os.PathLike) -> str:
    """`general.architecture` if it is llama or gemma3, else a ValueError naming the file."""
    arch = require(meta, "general.architecture", source)
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"{source}: general.architecture is {arch!r}; convert_gguf reads only {ARCHITECTURE!r} files "
            "(Llama 2/3, Mistral, SmolLM2, TinyLlama, ...) and 'gemma3' (Gemma 3 text). For other models, "
            "download the original Hugging Face checkpoint instead."
        )
    return arch


def hf_config(
    meta: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    *,
    source: str | os.PathLike,
    rope_freqs: torch.Tensor | None = None,
) -> dict[str, Any]:
    """The HF `config.json` of a llama GGUF, from its metadata and its tensor names/shapes.

    Args:
        meta: the file's metadata (`read_metadata`).
        shapes: tensor name -> GGUF shape (ggml order: innermost dimension first).
        source: file name for error messages.
        rope_freqs: the values of the file's `rope_freqs.weight` tensor, if it has one.
    """
    arch = check_architecture(meta, source=source)

    def get(key: str, default: Any = None) -> Any:
        value = (
            require(meta, f"{arch}.{key}", source) if default is None else meta.get(f"{arch}.{key}", default)
        )
        if isinstance(value, list):
            raise ValueError(
                f"{source}: GGUF metadata key '{arch}.{key}' is a per-layer list ({value[:4]}...); "
                "convert_gguf supports only models whose layers all have the same sizes."
            )
        return value

    hidden, num_heads = int(get("embedding_length")), int(get("attention.head_count"))
    num_kv_heads = int(get("attention.head_count_kv", num_heads))
    head_dim = int(get("attention.key_length", hidden // num_heads))
    rotary_dim = int(get("rope.dimension_count", head_dim))
    if rotary_dim != head_dim or num_heads % num_kv_heads or head_dim % 2:
        raise ValueError(
            f"{source}: unsupported attention shape: {num_heads} heads, {num_kv_heads} kv heads, head dim "
            f"{head_dim}, rope.dimension_count {rotary_dim}. A llama model rotates the whole (even) head "
            "dimension and has a number of heads divisible by the kv heads."
        )
    if "token_embd.weight" not in shapes:
        raise ValueError(f"{source}: the file has no tensor 'token_embd.weight' (the token embedding).")
    vocab_size = shapes["token_embd.weight"][-1]
    special = special_token_ids(meta)
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": int(get("context_length")),
        "rms_norm_eps": gguf_float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": gguf_float(get("rope.freq_base", 10_000.0)),
        "rope_scaling": _rope_scaling(meta, arch, source),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in shapes,
        "bos_token_id": special.get("bos"),
        "eos_token_id": special.get("eos"),
    }
    if "pad" in special:
        config["pad_token_id"] = special["pad"]
    if rope_freqs is not None:
        if config["rope_scaling"] is not None:
            raise ValueError(f"{source}: has both rope.scaling.type and a rope_freqs.weight tensor.")
        config["rope_scaling"] = _llama3_rope_scaling(rope_freqs, config["rope_theta"], head_dim, source)
    return config


# Llama 3.1 and 3.2 use these; only the factor differs (8 and 32).
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def llama3_rope_factors(theta: float, head_dim: int, factor: float, **constants: float) -> torch.Tensor:
    """Per-frequency divisors of Llama-3 RoPE scaling, as llama.cpp stores them in `rope_freqs.weight`:
    each unscaled inverse frequency over the one `ftune.modules.Llama3RopeScaling` gives.

    Args:
        theta: RoPE base.
        head_dim: rotated dimension of a head.
        factor: the scaling factor (divisor of the slowest frequencies).
        constants: `LLAMA3_ROPE`'s keys (low/high_freq_factor, original_max_position_embeddings).

    Returns:
        float32 [head_dim // 2].
    """
    low, high, context = (float(constants[k]) for k in LLAMA3_ROPE)
    scaling = Llama3RopeScaling(
        factor, low_freq_factor=low, high_freq_factor=high, original_max_seq_len=context
    )
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return (inv_freq / scaling.apply(inv_freq)).float()


def _llama3_rope_scaling(
    rope_freqs: torch.Tensor, theta: float, head_dim: int, source: str | os.PathLike
) -> dict:
    # The file keeps only the divisors. Take the factor from the slowest frequency, assume Llama 3's
    # other constants, and accept them only if they reproduce every stored divisor.
    params = {"factor": gguf_float(rope_freqs.max().item()), **LLAMA3_ROPE}
    expected = llama3_rope_factors(theta, head_dim, **params)
    if rope_freqs.shape != expected.shape or not torch.allclose(rope_freqs.flatten(), expected, rtol=1e-4):
        raise ValueError(
            f"{source}: tensor 'rope_freqs.weight' holds RoPE divisors that are not Llama-3 scaling with "
            f"{params}; convert_gguf cannot rebuild rope_scaling for it. Download the original "
            "Hugging Face checkpoint of this model instead."
        )
    return {"rope_type": "llama3", **params}


def _rope_scaling(meta: Mapping[str, Any], arch: str, source: str | os.PathLike) -> dict[str, Any] | None:
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return None
    if kind == "linear":
        return {
            "rope_type": "linear",
            "factor": gguf_float(require(meta, f"{arch}.rope.scaling.factor", source)),
        }
    raise ValueError(
        f"{source}: GGUF metadata '{arch}.rope.scaling.type' is {kind!r}; convert_gguf supports 'none' and "
        "'linear'. Download the original Hugging Face checkpoint of this model instead."
    )


def hf_key(name: str, *, source: str | os.PathLike) -> str:
    """HF key of a GGUF tensor name, e.g. 'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight'."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    match = _LAYER_TENSOR.fullmatch(name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise ValueError(
            f"{source}: tensor {name!r} is not part of a llama model convert_gguf knows. Expected "
            f"{sorted(_GLOBAL_NAMES)} and blk.<N>.<{'|'.join(_LAYER_NAMES)}>.weight."
        )
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"


def read_state_dict(
    tensors: Mapping[str, Any], config: Mapping[str, Any], *, dtype: torch.dtype, source: str | os.PathLike
) -> dict[str, torch.Tensor]:
    """Dequantize every tensor (GGUF name -> `GGUFReader` tensor) into an HF-keyed `dtype` state dict.

    `config` (the file's `hf_config`) gives the head counts for the q/k rows and the layer count.
    """
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}

    def adjust(name: str, value: torch.Tensor) -> torch.Tensor:
        kind = name.split(".")[2] if name.startswith("blk.") else None
        # llama.cpp keeps Meta's interleaved q/k rows
        return from_meta_qk(value, heads[kind]) if kind in heads else value

    return dequantized_state_dict(
        tensors,
        config,
        key_of=lambda name: hf_key(name, source=source),
        adjust=adjust,
        layer_names=_LAYER_NAMES.values(),
        global_names=_GLOBAL_NAMES,
        family="llama",
        dtype=dtype,
        source=source,
    )


def _default_dtype(tensors: Iterable[Any]) -> torch.dtype:
    # Norm vectors are F32 in every GGUF; the matrices say what precision the weights really have.
    kinds = {t.tensor_type for t in tensors if len(t.shape) > 1}
    if len(kinds) == 1 and (kind := kinds.pop()) in _FLOAT_TYPES:
        return _FLOAT_TYPES[kind]
    return torch.float32
