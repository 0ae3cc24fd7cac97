"""Adapters of modules that Hugging Face fuses (Phi-3's `qkv_proj`, `gate_up_proj`) in PEFT's layout.

ftune keeps q/k/v and gate/up as separate linears, each with its own LoRA (A ``[r, in]``, B
``[out_p, r]``, scale alpha / r). PEFT sees one fused linear, so the parts' adapters are written as one
LoRA of rank ``n_parts * r`` on it, which computes the same update exactly:

    A = [A_0; A_1; ...]                 (n_parts * r, in)   rows of A_p, zeros for a part without adapter
    B = block-diag(B_0, B_1, ...)       (sum out_p, n_parts * r)

and, so that PEFT's scale alpha' / r' stays alpha / r, the fused module's rank and alpha go in the
config's `rank_pattern` / `alpha_pattern` (`peft_adapter_config` reads them off the tensors). Every
part has its block, adapted or not, so reading back needs no list of targets: a part is adapted when
its block of A is not all zeros (LoRA initialises A at random, and a part without adapter stays at
zero). The rows of a part without adapter come from the base weights' shapes (`base_shapes`). DoRA's
magnitudes are concatenated too; a DoRA adapter on only some parts of a fused module is refused
(PEFT's magnitude of the other rows would need the base weights' norms).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ftune.models._key_rename import key_pattern

_A, _B, _M = "lora_a.weight", "lora_b.weight", "magnitude"
_PEFT = {_A: "lora_A.weight", _B: "lora_B.weight", _M: "lora_magnitude_vector"}


def _part_of(fused_modules: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, int]]:
    return {part: (hf, i) for hf, parts in fused_modules.items() for i, part in enumerate(parts)}


def _rows(
    part: str, adapter: Mapping[str, torch.Tensor], base_shapes: Mapping[str, torch.Size] | None
) -> int:
    if f"{part}.{_B}" in adapter:
        return adapter[f"{part}.{_B}"].shape[0]
    if base_shapes is None or f"{part}.weight" not in base_shapes:
        raise KeyError(
            f"the PEFT layout of a fused module needs the rows of {part}.weight, which has no adapter: pass "
            "base_shapes (the base model's weight shapes, ftune names) to to_peft / from_peft."
        )
    return base_shapes[f"{part}.weight"][0]


def fuse_adapters(
    adapter: Mapping[str, torch.Tensor],
    fused_modules: Mapping[str, tuple[str, ...]],
    base_shapes: Mapping[str, torch.Size] | None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Split off the adapters of fused modules' parts and fuse them.

    Args:
        adapter: ftune adapter tensors (`layers.0.attn.q_proj.lora_a.weight`, ...).
        fused_modules: HF fused module pattern -> ftune part module patterns (`Converter.fused_modules`).
        base_shapes: ftune weight key -> shape of the base model.

    Returns:
        (the other adapter tensors, the fused ones under HF module names with PEFT suffixes, no prefix).

    Raises:
        KeyError: a part without adapter whose rows `base_shapes` does not give.
        ValueError: parts of one module with different ranks, or DoRA on only some parts.
    """
    part_of = _part_of(fused_modules)
    rest: dict[str, torch.Tensor] = {}
    groups: dict[tuple[str, str], set[str]] = {}
    for key, value in adapter.items():
        suffix = next((s for s in (_A, _B, _M) if key.endswith("." + s)), None)
        module = key[: -len(suffix) - 1] if suffix else key
        pattern, index = key_pattern(module)
        if suffix is not None and pattern in part_of:
            groups.setdefault((part_of[pattern][0], index), set()).add(module)
        else:
            rest[key] = value
    fused: dict[str, torch.Tensor] = {}
    for (hf, index), present in groups.items():
        parts = [p.replace("{}", index) for p in fused_modules[hf]]
        ranks = {adapter[f"{p}.{_A}"].shape[0] for p in parts if p in present}
        if len(ranks) != 1:
            raise ValueError(
                f"the adapters of {sorted(present)} have different ranks {sorted(ranks)}; PEFT fuses them."
            )
        (r,) = ranks
        first = adapter[f"{next(p for p in parts if p in present)}.{_A}"]
        rows = [_rows(p, adapter, base_shapes) for p in parts]
        a = first.new_zeros(len(parts) * r, first.shape[1])
        b = first.new_zeros(sum(rows), len(parts) * r)
        for i, p in enumerate(parts):
            if p in present:
                start = sum(rows[:i])
                a[i * r : (i + 1) * r] = adapter[f"{p}.{_A}"]
                b[start : start + rows[i], i * r : (i + 1) * r] = adapter[f"{p}.{_B}"]
        name = hf.replace("{}", index)
        fused[f"{name}.{_PEFT[_A]}"], fused[f"{name}.{_PEFT[_B]}"] = a, b
        magnitudes = [adapter.get(f"{p}.{_M}") for p in parts]
        if any(m is not None for m in magnitudes):
            if any(m is None for m in magnitudes):
                raise ValueError(
                    f"DoRA on part of the fused {name} ({sorted(present)}): PEFT's layout needs all of {parts} "
                    "adapted (target them all, or use LoRA)."
                )
            fused[f"{name}.{_PEFT[_M]}"] = torch.cat(magnitudes)
    return rest, fused


def split_adapters(
    peft_modules: Mapping[str, dict[str, torch.Tensor]],
    fused_modules: Mapping[str, tuple[str, ...]],
    base_shapes: Mapping[str, torch.Size] | None,
) -> dict[str, torch.Tensor]:
    """The inverse of `fuse_adapters`: PEFT tensors of fused HF modules -> ftune adapter tensors.

    Args:
        peft_modules: HF fused module name -> {PEFT suffix: tensor} (`lora_A.weight`, ...).
        fused_modules: HF fused module pattern -> ftune part module patterns.
        base_shapes: ftune weight key -> shape of the base model (the parts' rows).

    Raises:
        KeyError: a part whose rows `base_shapes` does not give.
        ValueError: a rank that is not a multiple of the number of parts, or rows that do not add up.
    """
    out: dict[str, torch.Tensor] = {}
    for name, tensors in peft_modules.items():
        pattern, index = key_pattern(name)
        parts = [p.replace("{}", index) for p in fused_modules[pattern]]
        a, b = tensors[_PEFT[_A]], tensors[_PEFT[_B]]
        r, odd = divmod(a.shape[0], len(parts))
        rows = [_rows(p, {}, base_shapes) for p in parts]
        if odd or sum(rows) != b.shape[0]:
            raise ValueError(
                f"{name}: a LoRA of rank {a.shape[0]} on {b.shape[0]} rows is not ftune's layout of {parts} "
                f"(rank a multiple of {len(parts)}, rows {rows})."
            )
        magnitude = tensors.get(_PEFT[_M])
        for i, p in enumerate(parts):
            a_p = a[i * r : (i + 1) * r]
            if not a_p.any():
                continue  # a part without adapter
            start = sum(rows[:i])
            out[f"{p}.{_A}"] = a_p
            out[f"{p}.{_B}"] = b[start : start + rows[i], i * r : (i + 1) * r]
            if magnitude is not None:
                out[f"{p}.{_M}"] = magnitude[start : start + rows[i]]
    return out


def fused_module_of(module: str, fused_modules: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether an HF module name (`model.layers.0.self_attn.qkv_proj`) is one of the fused modules."""
    return key_pattern(module)[0] in fused_modules
