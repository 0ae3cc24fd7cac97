"""Swap a model's linear layers for LoRA / DoRA / QLoRA layers, and freeze everything else."""

import logging
from collections.abc import Collection, Mapping

from torch import nn

from ftune.modules.moe_experts import GroupedExperts
from ftune.peft.dora import DoRALinear
from ftune.peft.lora import LoRALinear
from ftune.peft.moe_lora import EXPERT_WEIGHTS, apply_expert_lora, expert_adapter_params
from ftune.peft.nf4 import check_nf4_shape
from ftune.peft.parts import PARTS, is_image_text, missing_parts_message, per_part

log = logging.getLogger(__name__)

# The linear names of ftune's decoders (equal to Hugging Face's), i.e. what `targets` may name.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "output")


def apply_lora(
    model: nn.Module,
    *,
    targets: Collection[str] | Mapping[str, Collection[str]],
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    use_dora: bool = False,
    quantize_base: bool = False,
) -> list[str]:
    """Swap every nn.Linear whose attribute name is in `targets` for an adapter layer, in place.

    Afterwards only adapter parameters (`lora_a`, `lora_b`, and DoRA's `magnitude`) require grad.
    Base parameter names do not change, so a base checkpoint loads into the adapted model as is.
    Works as a config component that receives the model positionally:

        peft: {_component_: ftune.peft.apply_lora, targets: [q_proj, v_proj], rank: 8, alpha: 16}

    Args:
        model: the model to adapt (modified in place).
        targets: attribute names of the linears to adapt, e.g. ["q_proj", "v_proj"]; ftune decoders
            name them q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, output. An
            image-text model takes them per part (`ftune.peft.parts`), e.g. {"decoder": ["q_proj",
            "v_proj"], "vision_encoder": ["q_proj"]}; the parts left out stay frozen.
        rank: LoRA rank r.
        alpha: LoRA alpha; updates are scaled by alpha / rank.
        dropout: dropout on the adapter input, in [0, 1).
        use_dora: use DoRALinear (weight-decomposed) instead of LoRALinear.
        quantize_base: store the adapted layers' frozen base weights as NF4 (QLoRA). Layers that are
            not targeted stay in their dtype.

    Returns:
        The module paths of the swapped layers, e.g. ["layers.0.attn.q_proj", ...].

    Raises:
        ValueError: if `targets` is empty or a string, or if a target matches no nn.Linear; for an
            image-text model, plain-list targets or unknown parts; per-part targets on a text model.
    """
    options = dict(rank=rank, alpha=alpha, dropout=dropout, use_dora=use_dora, quantize_base=quantize_base)
    if isinstance(targets, Mapping):
        by_part = per_part(model, targets)
        if problem := target_problem(model, by_part):  # every part checked before any is changed
            raise ValueError(problem)
        for part in PARTS:
            getattr(model, part).requires_grad_(False)
        return [
            f"{p}.{fqn}"
            for p, names in by_part.items()
            for fqn in apply_lora(getattr(model, p), targets=names, **options)
        ]
    if is_image_text(model):
        raise ValueError(missing_parts_message(model, targets))
    if isinstance(targets, str) or not targets:
        raise ValueError(
            f"apply_lora: targets must be a non-empty list of linear names, got {targets!r}. "
            f"Use e.g. targets=[q_proj,v_proj]; ftune decoders have {', '.join(LORA_TARGETS)}."
        )
    wanted = set(targets)
    # "experts": every expert of the MoE layers, through stacked adapters (ftune/peft/moe_lora.py).
    experts = wanted & {"experts"}
    wanted -= experts
    layer_type = DoRALinear if use_dora else LoRALinear
    # Find every match before changing anything, so that a bad target leaves the model untouched.
    # type() rather than isinstance(): never wrap an adapter layer (or another Linear subclass) again;
    # the one subclass taken is torchao's fake-quantized Linear (QAT + LoRA: adapters over it).
    matches = [
        (f"{parent_fqn}.{name}" if parent_fqn else name, parent, name, child)
        for parent_fqn, parent in model.named_modules()
        for name, child in parent.named_children()
        if name in wanted and (type(child) is nn.Linear or _fake_quantized(child))
    ]
    if problem := target_problem(model, targets):
        raise ValueError(problem)
    if use_dora and (fq := [fqn for fqn, _, _, child in matches if _fake_quantized(child)]):
        raise ValueError(
            f"apply_lora: use_dora=true over fake-quantized layers ({fq[0]}, ...): DoRA is not supported "
            "with QAT. Set peft.use_dora=false (QAT + LoRA trains plain LoRA adapters)."
        )
    if quantize_base:
        for fqn, _, _, child in matches:
            check_nf4_shape(child.weight, name=f"{fqn}.weight")
        for fqn, module in model.named_modules() if experts else ():
            for name in EXPERT_WEIGHTS if type(module) is GroupedExperts else ():
                stacked = getattr(module, name)  # NF4 over its (experts * out, in) view
                check_nf4_shape(stacked.reshape(-1, stacked.shape[-1]), name=f"{fqn}.{name}")
    if experts and use_dora:
        raise ValueError(
            "apply_lora: target 'experts' takes LoRA or QLoRA, not DoRA; set peft.use_dora=false, or adapt the "
            "experts' neighbours only (drop 'experts' from peft.targets)."
        )
    expert_fqns = (
        apply_expert_lora(model, rank=rank, alpha=alpha, dropout=dropout, quantize_base=quantize_base)
        if experts
        else []
    )
    for _, parent, name, child in matches:
        layer = layer_type(child, rank=rank, alpha=alpha, dropout=dropout, quantize_base=quantize_base)
        setattr(parent, name, layer.train(child.training))  # an eval-mode model stays in eval mode
    swapped = [fqn for fqn, _, _, _ in matches] + expert_fqns
    adapter_params = {id(p) for m in model.modules() if isinstance(m, LoRALinear) for p in _adapter_params(m)}
    adapter_params |= {id(p) for p in expert_adapter_params(model)}
    for p in model.parameters():
        p.requires_grad_(id(p) in adapter_params)
    log.info(
        "%s applied to %d linear layers (targets %s, rank %d, alpha %g%s).",
        layer_type.__name__,
        len(swapped),
        sorted(wanted),
        rank,
        alpha,
        ", NF4 base" if quantize_base else "",
    )
    return swapped


def _fake_quantized(module: nn.Module) -> bool:
    """torchao's FakeQuantizedLinear (a Linear with fake quantizers), told apart without importing torchao."""
    return isinstance(module, nn.Linear) and hasattr(module, "weight_fake_quantizer")


def trainable_params(model: nn.Module) -> list[nn.Parameter]:
    """The parameters that require grad (after apply_lora: the adapter parameters), in model order."""
    return [p for p in model.parameters() if p.requires_grad]


def _adapter_params(layer: LoRALinear) -> list[nn.Parameter]:
    params = [layer.lora_a.weight, layer.lora_b.weight]
    if isinstance(layer, DoRALinear):
        params.append(layer.magnitude)
    return params


def target_problem(model: nn.Module, targets: Collection[str] | Mapping[str, Collection[str]]) -> str | None:
    """Which of `targets` name no module `apply_lora` can adapt in `model` (an nn.Linear by attribute
    name, or "experts" for a mixture-of-experts layer), as the error message; None when all do.
    Per-part targets (an image-text model's) are checked in each part.

    Needs only the module tree: `ftune validate` calls it on the model built on the meta device.
    """
    if isinstance(targets, Mapping):
        try:
            by_part = per_part(model, targets)
        except ValueError as e:
            return str(e)
        for part, names in by_part.items():
            if problem := target_problem(getattr(model, part), names):
                return f"{problem.removesuffix(' Fix peft.targets in the config.')} (part {part}) Fix peft.targets.{part}."
        return None
    if is_image_text(model):
        return missing_parts_message(model, targets)
    linears = {
        name
        for _, parent in model.named_modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear or _fake_quantized(child)
    }
    missing = sorted(set(targets) - linears - {"experts"})
    if missing:
        return _unmatched_message(model, missing)
    if "experts" in targets and not _has_experts(model):
        return (
            f"apply_lora: target 'experts' matches no mixture-of-experts layer in {type(model).__name__}; "
            "only MoE models (e.g. qwen3_moe) have one. Remove 'experts' from peft.targets."
        )
    return None


def _has_experts(model: nn.Module) -> bool:
    return any(type(m) is GroupedExperts for m in model.modules())


def _unmatched_message(model: nn.Module, missing: list[str]) -> str:
    linears = sorted({fqn.rsplit(".", 1)[-1] for fqn, m in model.named_modules() if type(m) is nn.Linear})
    adapted = sorted(
        {fqn.rsplit(".", 1)[-1] for fqn, m in model.named_modules() if isinstance(m, LoRALinear)}
    )
    message = (
        f"apply_lora: targets {missing} match no nn.Linear in {type(model).__name__}; "
        f"its nn.Linear names are {linears}"
        + (" and it has mixture-of-experts layers (target 'experts')." if _has_experts(model) else ".")
    )
    if adapted:
        message += f" Already adapted (apply_lora runs once per model): {adapted}."
    if "output" in missing and getattr(model, "output", "absent") is None:
        message += " This model ties its output projection to tok_embeddings, so it has no `output` Linear."
    return message + " Fix peft.targets in the config."
