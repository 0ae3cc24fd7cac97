"""The repeated blocks that the step's features work on, one at a time: FSDP2 units, activation
checkpointing, activation offloading, compilation."""

from torch import nn

from ftune.modules.vision import ImageTextModel


def block_layers(model: nn.Module, *, feature: str) -> list[nn.Module]:
    """A decoder's `layers`; an image-text model's vision encoder layers, then its decoder's.

    Args:
        model: a `TransformerDecoder` (anything with a `layers` nn.ModuleList) or an `ImageTextModel`.
        feature: the calling function's name, for the message.

    Raises:
        ValueError: a model with neither.
    """
    if isinstance(model, ImageTextModel):
        return [*model.vision_encoder.layers, *model.decoder.layers]
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"{feature} needs a model with a `layers` nn.ModuleList (ftune's TransformerDecoder) or an "
            f"image-text model (ftune.modules.vision.ImageTextModel); {type(model).__name__}.layers is "
            f"{type(layers).__name__}."
        )
    return list(layers)
