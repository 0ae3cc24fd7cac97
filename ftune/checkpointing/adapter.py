"""LoRA/DoRA adapter folders in PEFT's format (`adapter_model.safetensors` + `adapter_config.json`),
and the merged full model computed from a state dict.

Names are translated by `ftune.peft.peft_format` (`to_peft` / `from_peft`), so that
`peft.PeftModel.from_pretrained(base, step_dir)` loads what ftune saved, and ftune resumes from
it. This module does the file side, and the merge that a checkpointer needs when it holds a
state dict rather than the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ftune.checkpointing.atomic import save_safetensors, write_json
from ftune.checkpointing.readers import read_safetensors
from ftune.modules.score_head import SCORE_KEY
from ftune.peft.adapter_state import is_adapter_key
from ftune.peft.dora import rescale_rows
from ftune.peft.lora import merge_lora
from ftune.peft.moe_lora import expert_base_key, merge_expert_lora
from ftune.peft.peft_format import PEFT_PREFIX, from_peft, peft_adapter_config, peft_module_names, to_peft

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"

# `adapter_config` may be the LoRA settings as given to ftune.peft.apply_lora (e.g. the recipe's
# `peft` config node): these keys feed peft_adapter_config, the others are implied by the tensors.
_SETTINGS = {"rank", "alpha", "dropout", "use_dora"}
_IMPLIED = {"_component_", "targets", "quantize_base"}


def has_adapter(folder: str | os.PathLike) -> bool:
    """True when `folder` holds an adapter (a LoRA/DoRA run's step folder)."""
    return (Path(folder) / ADAPTER_WEIGHTS_FILE).is_file()


def peft_config(
    adapter_config: dict[str, Any],
    peft_sd: dict[str, torch.Tensor],
    base_model_name_or_path: str,
    base_modules: set[str] = frozenset(),
) -> dict[str, Any]:
    """The adapter_config.json contents for `adapter_config`, with `base_model_name_or_path` set.

    Args:
        adapter_config: either a PEFT LoraConfig dict (has "peft_type"), kept as is, or the
            `apply_lora` settings {"rank", "alpha", "dropout", "use_dora"} (plus the ignored
            "_component_", "targets", "quantize_base", which the adapter tensors already imply).
        peft_sd: the adapter in PEFT names (target modules are read from it).
        base_model_name_or_path: the base checkpoint folder.
        base_modules: the base model's HF module names (see `peft_adapter_config`).

    Raises:
        ValueError: unknown keys in a settings dict.
    """
    if "peft_type" in adapter_config:
        return {**adapter_config, "base_model_name_or_path": base_model_name_or_path}

    unknown = sorted(set(adapter_config) - _SETTINGS - _IMPLIED)
    if unknown:
        raise ValueError(
            f"adapter_config has unknown keys {unknown}: pass a PEFT LoraConfig dict (with peft_type) "
            f"or the apply_lora settings {sorted(_SETTINGS)}."
        )
    settings = {k: v for k, v in adapter_config.items() if k in _SETTINGS}
    return peft_adapter_config(
        peft_sd, base_model_name_or_path=base_model_name_or_path, base_modules=base_modules, **settings
    )


def save_adapter(
    folder: str | os.PathLike,
    adapter: dict[str, torch.Tensor],
    *,
    family: str,
    adapter_config: dict[str, Any],
    base_model_name_or_path: str,
    base_shapes: dict[str, torch.Size] | None = None,
    score: torch.Tensor | None = None,
) -> None:
    """Write the adapter in PEFT names and its config, each file atomically.

    Args:
        folder: the step folder.
        adapter: adapter tensors in ftune names (`layers.0.attn.q_proj.lora_a.weight`, ...).
        family: model family, selects the name mapping.
        adapter_config: see `peft_config`.
        base_model_name_or_path: recorded in the config, so `peft` finds the base model.
        base_shapes: the base weights' shapes (ftune names), for families whose HF modules fuse
            ftune's (Phi-3; see `ftune.peft.fused_adapters`).
        score: a reward model's score head: saved as PEFT saves a SEQ_CLS adapter's ``modules_to_save``
            (``base_model.model.score.weight``), so ``PeftModel.from_pretrained`` over transformers'
            sequence classifier of the base model loads the head with the adapters.
    """

    folder = Path(folder)
    peft_sd = to_peft(adapter, family, base_shapes)
    base = {k: v for k, v in (base_shapes or {}).items() if k != SCORE_KEY}
    config = peft_config(adapter_config, peft_sd, base_model_name_or_path, peft_module_names(base, family))
    if score is not None:
        peft_sd = {**peft_sd, f"{PEFT_PREFIX}{SCORE_KEY}": score}
        config = {**config, "task_type": "SEQ_CLS", "modules_to_save": ["score"]}
    save_safetensors(peft_sd, folder / ADAPTER_WEIGHTS_FILE)
    write_json(config, folder / ADAPTER_CONFIG_FILE)


def load_adapter(
    folder: str | os.PathLike, *, family: str, base_shapes: dict[str, torch.Size] | None = None
) -> dict[str, torch.Tensor]:
    """Read `adapter_model.safetensors` from `folder` and return it in ftune names (`base_shapes`: see
    `save_adapter`).

    Raises:
        FileNotFoundError / ValueError: missing or corrupt file (naming it).
    """

    peft_sd = read_safetensors(Path(folder) / ADAPTER_WEIGHTS_FILE)
    score = peft_sd.pop(f"{PEFT_PREFIX}{SCORE_KEY}", None)  # a reward model's head (modules_to_save)
    adapter = from_peft(peft_sd, family, base_shapes)
    return adapter if score is None else {**adapter, SCORE_KEY: score}


def merged_state_dict(
    state: dict[str, torch.Tensor], adapter_config: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Fold the adapters of a LoRA/DoRA state dict into the base weights; `state` is not modified.

    The formulas of `LoRALinear.merged_weight` / `DoRALinear.merged_weight` (ftune.peft's
    `merge_lora` and `rescale_rows`), applied to a state dict, since a checkpointer has no model:
    LoRA `W + s·B·A`, DoRA `m · (W + s·B·A) / ‖W + s·B·A‖` (row norms), with s = alpha / rank.

    Args:
        state: full model state in ftune names, adapter tensors included (base weights dense).
        adapter_config: apply_lora settings ("alpha") or a PEFT config ("lora_alpha"); the rank is
            read from each `lora_a` tensor.

    Returns:
        The base keys only, adapted layers' `weight` replaced by new merged tensors.
    """

    alpha = float(adapter_config["lora_alpha"] if "peft_type" in adapter_config else adapter_config["alpha"])
    merged = {k: v for k, v in state.items() if not is_adapter_key(k)}
    for key in state:
        if not key.endswith(".lora_a.weight"):
            continue
        module = key[: -len(".lora_a.weight")]
        a, b = state[key], state[f"{module}.lora_b.weight"]
        expert_key = expert_base_key(module)  # stacked expert weights: one update per expert
        weight = state[expert_key or f"{module}.weight"]
        with torch.no_grad():
            combined = (merge_expert_lora if expert_key else merge_lora)(weight, a, b, alpha / a.shape[-2])
            magnitude = state.get(f"{module}.magnitude")
            if magnitude is not None:
                combined = rescale_rows(combined, magnitude)
        merged[expert_key or f"{module}.weight"] = combined
    return merged
