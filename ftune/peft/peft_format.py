"""Adapters in Hugging Face PEFT's format: key conversion and adapter_config.json.

PEFT saves a LoRA adapter (`adapter_model.safetensors`) under the HF module paths of the base
model, prefixed by `base_model.model.`, with the adapter name removed:

    ftune                                    PEFT
    layers.0.attn.q_proj.lora_a.weight       base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
    layers.0.attn.q_proj.lora_b.weight       base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight
    layers.0.attn.q_proj.magnitude           base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector
    output.lora_a.weight                     base_model.model.lm_head.lora_A.weight

The base module path is mapped by the family's HF converter (`ftune.models.CONVERTERS[family]`),
applied to the layer's `weight` key, so no family is special-cased here. The adapters of stacked
mixture-of-experts weights go the way PEFT saves `target_parameters` (`ftune.peft.moe_lora`):

    layers.0.mlp.experts.lora.gate_up_proj.lora_a.weight   base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight
    layers.0.mlp.experts.lora.down_proj.lora_a.weight      base_model.model.model.layers.0.mlp.experts.lora_A.weight
"""

import re
from collections.abc import Collection, Mapping

import torch

from ftune.models import CONVERTERS, IMAGE_TEXT_CONVERTERS, converter_of
from ftune.peft.fused_adapters import fuse_adapters, fused_module_of, split_adapters
from ftune.peft.moe_lora import (
    EXPERT_WEIGHTS,
    from_peft_experts,
    is_expert_adapter_key,
    is_peft_expert_key,
    num_experts_of,
    to_peft_experts,
)

PEFT_PREFIX = "base_model.model."

# ftune key suffix -> PEFT key suffix, after the module path.
_SUFFIXES = {
    "lora_a.weight": "lora_A.weight",
    "lora_b.weight": "lora_B.weight",
    "magnitude": "lora_magnitude_vector",
}
_FROM_PEFT_SUFFIXES = {v: k for k, v in _SUFFIXES.items()}


def _converter(family: str):
    conv = converter_of(family)
    if conv is None:
        raise KeyError(
            f"No HF converter for model family {family!r}; known families: {sorted(CONVERTERS)}, image-text "
            f"{sorted(IMAGE_TEXT_CONVERTERS)} and llava_<text family>. Pass the family of the base "
            "checkpoint (Loaded.family)."
        )
    return conv


def _split(key: str, suffixes: dict[str, str], fmt: str) -> tuple[str, str]:
    for suffix in suffixes:
        if key.endswith("." + suffix):
            return key[: -len(suffix) - 1], suffix
    accepted = ", ".join(f"<module>.{s}" for s in suffixes)
    raise KeyError(f"{key!r} is not a {fmt} LoRA/DoRA adapter key; accepted patterns: {accepted}.")


def _rename_module(module: str, rename, tensor: torch.Tensor, key: str) -> str:
    # Converters map full weight keys; map the layer's `weight` key and drop the suffix again.
    renamed = list(rename({f"{module}.weight": tensor}))
    if len(renamed) != 1 or not renamed[0].endswith(".weight"):
        raise KeyError(f"Cannot map the module of adapter key {key!r}: its converter gave {renamed}.")
    return renamed[0][: -len(".weight")]


def to_peft(
    adapter_sd: dict[str, torch.Tensor], family: str, base_shapes: Mapping[str, torch.Size] | None = None
) -> dict[str, torch.Tensor]:
    """Rename an ftune adapter state dict to PEFT's saved keys (tensors are shared, not copied).

    Args:
        adapter_sd: output of `ftune.peft.adapter_state_dict` (only lora_a / lora_b / magnitude keys).
        family: model family, a key of `ftune.models.CONVERTERS` (e.g. "llama3").
        base_shapes: the base model's weight shapes (ftune names); needed only for a family whose HF
            modules fuse several of ftune's (Phi-3), when some parts of a fused module have no adapter.

    Returns:
        The same tensors under `base_model.model.<hf module>.lora_A.weight` etc. (the adapters of a
        fused module's parts: one fused LoRA, see `ftune.peft.fused_adapters`; expert adapters in
        PEFT's `target_parameters` layout, see `ftune.peft.moe_lora.to_peft_experts`).

    Raises:
        KeyError: for a key that is not an adapter key, or an unknown family.
    """
    conv = _converter(family)
    experts = {k: v for k, v in adapter_sd.items() if is_expert_adapter_key(k)}
    adapter_sd = {k: v for k, v in adapter_sd.items() if k not in experts}
    adapter_sd, fused = fuse_adapters(adapter_sd, conv.fused_modules, base_shapes)
    out = {PEFT_PREFIX + k: v for k, v in fused.items()}
    out.update(to_peft_experts(experts))
    for key, tensor in adapter_sd.items():
        module, suffix = _split(key, _SUFFIXES, "ftune")
        hf_module = _rename_module(module, conv.ftune_to_peft or conv.ftune_to_hf, tensor, key)
        out[f"{PEFT_PREFIX}{hf_module}.{_SUFFIXES[suffix]}"] = tensor
    return out


def from_peft(
    peft_sd: dict[str, torch.Tensor], family: str, base_shapes: Mapping[str, torch.Size] | None = None
) -> dict[str, torch.Tensor]:
    """Rename a PEFT adapter state dict (as read from adapter_model.safetensors) to ftune keys.

    Args:
        peft_sd: {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": ..., ...}.
        family: model family, a key of `ftune.models.CONVERTERS`.
        base_shapes: the base model's weight shapes (ftune names); needed for the fused modules of a
            family like Phi-3 (the rows of each part), and for expert adapters (the expert count).

    Returns:
        {"layers.0.attn.q_proj.lora_a.weight": ..., ...}, loadable into a model adapted with apply_lora.

    Raises:
        KeyError: for keys without the `base_model.model.` prefix, with other adapter kinds (embedding
            LoRA, trained biases, modules_to_save, adapter names left in the key), full base-layer
            weights (`...lm_head.base_layer.weight`), or an unknown family.
    """
    conv = _converter(family)
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[str, torch.Tensor]] = {}
    experts = {k: v for k, v in peft_sd.items() if is_peft_expert_key(k)}
    if experts:
        out.update(from_peft_experts(experts, num_experts=num_experts_of(base_shapes)))
    for key, tensor in peft_sd.items():
        if key in experts:
            continue
        if not key.startswith(PEFT_PREFIX):
            raise KeyError(
                f"{key!r} is not a PEFT adapter key: expected the prefix {PEFT_PREFIX!r} that "
                "PeftModel.save_pretrained writes."
            )
        if ".base_layer." in key:
            raise KeyError(
                f"{key!r} is a full base-model weight, which PEFT adds to adapters that target embedding "
                "or lm_head layers (save_embedding_layers). ftune adapters hold only lora_A / lora_B / "
                "lora_magnitude_vector: re-save with save_pretrained(..., save_embedding_layers=False), or "
                "drop the key if the vocabulary was not resized."
            )
        module, suffix = _split(key[len(PEFT_PREFIX) :], _FROM_PEFT_SUFFIXES, "PEFT")
        if fused_module_of(module, conv.fused_modules):
            fused.setdefault(module, {})[suffix] = tensor
            continue
        ftune_module = _rename_module(module, conv.hf_to_ftune, tensor, key)
        out[f"{ftune_module}.{_FROM_PEFT_SUFFIXES[suffix]}"] = tensor
    out.update(split_adapters(fused, conv.fused_modules, base_shapes))
    return out


def peft_adapter_config(
    peft_sd: dict[str, torch.Tensor],
    *,
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    use_dora: bool = False,
    base_model_name_or_path: str | None = None,
    base_modules: Collection[str] = (),
) -> dict:
    """The adapter_config.json content that lets `peft.PeftModel.from_pretrained` load an adapter.

    Args:
        peft_sd: the adapter in PEFT's format (output of `to_peft`); `target_modules` is read from its
            keys, so it holds HF names (ftune's `output` is HF's `lm_head`).
        rank: LoRA rank r.
        alpha: LoRA alpha (scale alpha / r).
        dropout: LoRA dropout.
        use_dora: whether the adapter is DoRA (it then has lora_magnitude_vector tensors).
        base_model_name_or_path: hub id or folder of the base model, informative for PEFT.
        base_modules: the base model's module names in HF names (`peft_module_names`). When a module
            without an adapter shares a name with an adapted one (an image-text model's encoder has
            q_proj too), `target_modules` is a regular expression matching exactly the adapted modules,
            so PEFT wraps nothing else; otherwise it is the list of the adapted modules' last names.

    Returns:
        A JSON-serialisable dict in the layout of PEFT's LoraConfig.

    Raises:
        ValueError: if use_dora disagrees with the presence of magnitude tensors in `peft_sd`.
    """
    # Expert adapters are PEFT `target_parameters` (one ParamWrapper a stacked weight), not modules.
    experts = {k for k in peft_sd if is_peft_expert_key(k)}
    peft_sd = {k: v for k, v in peft_sd.items() if k not in experts}
    modules = {_split(k[len(PEFT_PREFIX) :], _FROM_PEFT_SUFFIXES, "PEFT")[0] for k in peft_sd}
    has_magnitude = any(k.endswith(".lora_magnitude_vector") for k in peft_sd)
    if has_magnitude != use_dora:
        raise ValueError(
            f"peft_adapter_config: use_dora={use_dora} but the adapter "
            f"{'has' if has_magnitude else 'has no'} lora_magnitude_vector tensors. "
            "Pass use_dora=True exactly for DoRA adapters."
        )
    # A fused module (ftune.peft.fused_adapters) has a larger rank; its alpha keeps PEFT's scale alpha / rank.
    rank_pattern = {
        k[len(PEFT_PREFIX) :].rsplit(".", 3)[-3]: v.shape[0]
        for k, v in peft_sd.items()
        if k.endswith(".lora_A.weight") and v.shape[0] != rank
    }
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": dropout,
        "target_modules": target_modules(modules, base_modules),
        "use_dora": use_dora,
        "use_rslora": False,
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": rank_pattern,
        "alpha_pattern": {m: alpha * r / rank for m, r in rank_pattern.items()},
        "revision": None,
        # PEFT wraps them in this order, the first innermost (`ftune.peft.moe_lora.to_peft_experts`).
        **({"target_parameters": [f"mlp.experts.{w}" for w in EXPERT_WEIGHTS]} if experts else {}),
    }


def target_modules(adapted: Collection[str], base_modules: Collection[str]) -> list[str] | str:
    """PEFT's `target_modules` for adapters on the modules `adapted` of a base with modules `base_modules`.

    The last names (``["q_proj", "v_proj"]``) when PEFT, which wraps every module ending in one of them,
    would wrap exactly `adapted`; otherwise a regular expression (PEFT full-matches a string against each
    module name): the adapted names with their layer numbers written ``\\d+`` when that still matches
    exactly `adapted` among `base_modules`, else every adapted name spelled out.
    """
    names = sorted({m.rsplit(".", 1)[-1] for m in adapted})
    wrapped = {m for m in base_modules if m.rsplit(".", 1)[-1] in names}
    if wrapped <= set(adapted):
        return names
    general = "|".join(sorted({re.sub(r"\\\.\d+\\\.", r"\\.\\d+\\.", re.escape(m)) for m in adapted}))
    if {m for m in base_modules if re.fullmatch(general, m)} == set(adapted):
        return general
    return "|".join(re.escape(m) for m in sorted(adapted))


def peft_module_names(base_shapes: Mapping[str, torch.Size], family: str) -> set[str]:
    """The HF module names (PEFT's) of a base model's weights, from their ftune names and shapes."""
    conv = _converter(family)
    rename = conv.ftune_to_peft or conv.ftune_to_hf
    meta = {k: torch.empty(shape, device="meta") for k, shape in base_shapes.items() if k.endswith(".weight")}
    return {k[: -len(".weight")] for k in rename(meta) if k.endswith(".weight")}
