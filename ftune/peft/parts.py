"""The parts of an image-text model that train: the text decoder, the projector, the vision encoder.

Which parts train is the config's choice, never a default: an image-text model's LoRA targets are
given per part (`apply_lora(targets={"decoder": [...], "projector": [...]})`), and a full fine-tune
names the parts it trains (`train_parts(model, ["decoder", "projector"])`). Every other parameter is
frozen.
"""

from collections.abc import Collection, Mapping

from torch import nn

from ftune.modules.vision import ImageTextModel

# The parts of `ImageTextModel`, in the order its state dict holds them.
PARTS = ("vision_encoder", "projector", "decoder")


def is_image_text(model: nn.Module) -> bool:
    """True for an `ImageTextModel` (the models with parts)."""
    return isinstance(model, ImageTextModel)


def check_parts(model: nn.Module, parts: Collection[str], *, key: str) -> None:
    """Refuse part names that `model` does not have, or parts given for a text model.

    Args:
        model: the model.
        parts: the part names the config gives.
        key: the config key that gave them, for the message (e.g. "peft.targets").

    Raises:
        ValueError: a text model, an empty collection, or an unknown part (naming the accepted ones).
    """
    if not is_image_text(model):
        raise ValueError(
            f"{key}: {type(model).__name__} is a text model, which has no parts ({', '.join(sorted(parts))} "
            f"given); only image-text models have {', '.join(PARTS)}. Give {key} as a plain list."
        )
    if isinstance(parts, str) or not parts:
        raise ValueError(f"{key}: name at least one part of the image-text model ({', '.join(PARTS)}).")
    if unknown := sorted(set(parts) - set(PARTS)):
        raise ValueError(
            f"{key}: {unknown} are no parts of an image-text model; its parts are {', '.join(PARTS)}."
        )


def per_part(model: nn.Module, targets: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    """`targets` as {part: linear names} after `check_parts`, in `PARTS` order."""
    check_parts(model, list(targets), key="peft.targets")
    return {part: list(targets[part]) for part in PARTS if part in targets}


def missing_parts_message(model: nn.Module, targets: Collection[str]) -> str:
    """What apply_lora says when an image-text model's targets are a plain list."""
    return (
        f"apply_lora: {type(model).__name__} is an image-text model, so say which of its parts get adapters: "
        f"give peft.targets per part, e.g. targets: {{decoder: {list(targets)}}} (parts: {', '.join(PARTS)}; "
        "vision_encoder names q_proj, k_proj, v_proj, out_proj, fc1, fc2). Parts left out stay frozen."
    )


def train_parts(model: nn.Module, parts: Collection[str]) -> list[str]:
    """Train the named parts of an image-text model in full, freeze the others (a full fine-tune's
    choice; LoRA names its parts in `apply_lora`'s targets).

    Args:
        model: an `ImageTextModel`.
        parts: the parts that train, a subset of `PARTS`, e.g. ["decoder", "projector"].

    Returns:
        The frozen parts.

    Raises:
        ValueError: see `check_parts` (key "train_parts").
    """
    check_parts(model, parts, key="train_parts")
    for part in PARTS:
        getattr(model, part).requires_grad_(part in parts)
    return [part for part in PARTS if part not in parts]
