"""GGUF export, tensors: llama.cpp's names and its q/k row order.

    gguf_tensors(hf_state, arch="llama", num_heads=.., num_kv_heads=..)   # HF names -> GGUF names
    to_numpy(tensor)                                                      # float32 numpy, any dtype in

Which GGML type each tensor gets, and its bytes, is `export_types`.
"""

from __future__ import annotations

from collections.abc import Mapping

import gguf
import numpy as np
import torch

from ftune.models._meta_keys import to_meta_qk

# llama.cpp architecture name -> the gguf package's enum (for its HF -> GGUF tensor-name map).
_ARCHES = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}


def gguf_tensors(
    hf_state: Mapping[str, torch.Tensor], *, arch: str, num_heads: int, num_kv_heads: int, num_layers: int
) -> dict[str, torch.Tensor]:
    """An HF-named state dict under llama.cpp's tensor names, in llama.cpp's layout.

    `llama` files keep Meta's interleaved q/k rows (llama.cpp's converter permutes HF's q/k weights,
    and `ftune convert gguf` undoes it with `from_meta_qk`); `to_meta_qk` is that inverse. A tied
    `lm_head.weight` is left out (llama.cpp reuses token_embd). Gemma 3 norms hold `1 + weight`.

    Args:
        hf_state: HF keys -> tensors (`lm_head.weight` only when untied).
        arch: llama.cpp architecture ("llama", "qwen2", "qwen3", "gemma3").
        num_heads: query heads (q rows are permuted per head).
        num_kv_heads: key/value heads.
        num_layers: decoder layers (sizes the name map).

    Raises:
        KeyError: an HF key llama.cpp has no tensor for, named with the architecture.
    """
    names = gguf.get_tensor_name_map(_ARCHES[arch], num_layers)
    out = {}
    for key, value in hf_state.items():
        stem, dot, suffix = key.rpartition(".")
        name = names.get_name(stem)
        if name is None or suffix not in ("weight", "bias"):
            raise KeyError(
                f"tensor {key!r} has no llama.cpp counterpart in a {arch!r} GGUF file; ftune exports the "
                "decoder weights of llama, mistral, qwen2, qwen3 and gemma3 models only."
            )
        kind = name.rpartition(".")[2]
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            value = to_meta_qk(value, num_heads if kind == "attn_q" else num_kv_heads)
        if arch == "gemma3" and key.endswith("norm.weight"):
            value = value.float() + 1.0  # llama.cpp's RMSNorm multiplies by the stored weight
        out[f"{name}.{suffix}"] = value
    return out


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy of a tensor of any float dtype (bf16 included)."""
    return value.detach().to(torch.float32).cpu().contiguous().numpy()
