"""GGUF export, tensors: llama.cpp's names and its q/k row order.

    gguf_tensors(hf_state, arch="llama", num_heads=.., num_kv_heads=..)   # HF names -> GGUF names
    to_numpy(tensor)                                                      # float32 numpy, any dtype in

Which GGML type each tensor gets, and its bytes, is `export_types`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping

import gguf
import numpy as np
import torch

from ftune.models._meta_keys import to_meta_qk

# llama.cpp architecture name -> the gguf package's enum (for its HF -> GGUF tensor-name map).
_ARCHES = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
# One expert's projection in HF's per-expert layout: (`...experts`, expert, projection).
_EXPERT = re.compile(r"^(.+\.experts)\.(\d+)\.(\w+)\.weight$")
# Architectures whose RMSNorm multiplies by 1 + weight in HF and by the stored weight in llama.cpp.
_PLUS_ONE_NORMS = ("gemma", "gemma2", "gemma3")


def gguf_tensors(
    hf_state: Mapping[str, torch.Tensor], *, arch: str, num_heads: int, num_kv_heads: int, num_layers: int
) -> dict[str, torch.Tensor]:
    """An HF-named state dict under llama.cpp's tensor names, in llama.cpp's layout.

    `llama` files keep Meta's interleaved q/k rows (llama.cpp's converter permutes HF's q/k weights,
    and `ftune convert gguf` undoes it with `from_meta_qk`); `to_meta_qk` is that inverse. A tied
    `lm_head.weight` is left out (llama.cpp reuses token_embd). Gemma norms hold `1 + weight`. Phi-3's
    fused `qkv_proj` and `gate_up_proj` stay fused (`attn_qkv`, and `ffn_up` holding gate then up rows,
    which llama.cpp splits). A mixture of experts' per-expert weights are stacked, expert-major, one
    tensor a projection and layer (`ffn_gate_exps`, `ffn_up_exps`: (experts, ffn, hidden);
    `ffn_down_exps`: (experts, hidden, ffn)); the router is `ffn_gate_inp`.

    Args:
        hf_state: HF keys -> tensors (`lm_head.weight` only when untied).
        arch: llama.cpp architecture (`export_meta.ARCHITECTURES`' values).
        num_heads: query heads (q rows are permuted per head).
        num_kv_heads: key/value heads.
        num_layers: decoder layers (sizes the name map).

    Raises:
        KeyError: an HF key llama.cpp has no tensor for, named with the architecture.
    """
    names = gguf.get_tensor_name_map(_ARCHES[arch], num_layers)
    out = {}
    for key, value in _stack_experts(hf_state):
        stem, dot, suffix = key.rpartition(".")
        name = names.get_name(stem)
        if name is None or suffix not in ("weight", "bias"):
            raise KeyError(
                f"tensor {key!r} has no llama.cpp counterpart in a {arch!r} GGUF file, which holds only the "
                "decoder weights llama.cpp's own converter writes. Export a checkpoint of the model alone "
                "(no extra modules), or merge adapters into it first (ftune export gguf --adapter)."
            )
        kind = name.rpartition(".")[2]
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            value = to_meta_qk(value, num_heads if kind == "attn_q" else num_kv_heads)
        if arch in _PLUS_ONE_NORMS and key.endswith("norm.weight"):
            value = value.float() + 1.0  # llama.cpp's RMSNorm multiplies by the stored weight
        out[f"{name}.{suffix}"] = value
    return out


def _stack_experts(hf_state: Mapping[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """The state's items, each layer's per-expert projections stacked into one `...experts.<proj>.weight`
    (experts in index order), where the layer's first expert weight was; other keys as they are.

    Raises:
        KeyError: a layer whose expert indices are not 0..n-1 for some projection.
    """
    groups: dict[tuple[str, str], dict[int, torch.Tensor]] = defaultdict(dict)
    for key, value in hf_state.items():
        if match := _EXPERT.match(key):
            groups[(match.group(1), match.group(3))][int(match.group(2))] = value
    emitted = set()
    for key, value in hf_state.items():
        match = _EXPERT.match(key)
        if match is None:
            yield key, value
            continue
        group = (match.group(1), match.group(3))
        if group in emitted:
            continue
        emitted.add(group)
        experts = groups[group]
        if sorted(experts) != list(range(len(experts))):
            raise KeyError(
                f"{group[0]}.<e>.{group[1]}.weight: expert indices {sorted(experts)} are not 0..{len(experts) - 1}; "
                "every expert of a layer must be in the checkpoint."
            )
        yield f"{group[0]}.{group[1]}.weight", _stacked([experts[e] for e in range(len(experts))])


def _stacked(parts: list[torch.Tensor]) -> torch.Tensor:
    """`torch.stack(parts)`, as a view where the parts are equally spaced views of one tensor.

    ftune holds each layer's experts stacked and hands them to the HF converter as per-expert views;
    viewing them stacked again keeps an export of a large mixture of experts at one copy of its weights.
    """
    first = parts[0]
    same = all(
        p.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        and p.shape == first.shape
        and p.stride() == first.stride()
        for p in parts
    )
    step = parts[1].storage_offset() - first.storage_offset() if len(parts) > 1 else 0
    if (
        same
        and step > 0
        and all(p.storage_offset() == first.storage_offset() + e * step for e, p in enumerate(parts))
    ):
        return first.as_strided((len(parts), *first.shape), (step, *first.stride()), first.storage_offset())
    return torch.stack(parts)


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy of a tensor of any float dtype (bf16 included)."""
    return value.detach().to(torch.float32).cpu().contiguous().numpy()


def gguf_arch(arch: str) -> gguf.MODEL_ARCH:
    """The gguf package's enum of llama.cpp architecture `arch` (its tensor-name map's key)."""
    return _ARCHES[arch]
