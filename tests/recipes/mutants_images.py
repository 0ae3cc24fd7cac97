"""The images feature's mutants (tests/recipes/mutants.py's table continues here): the batch's pixels
never reach the model's forward, or the encoder's features are zeroed before they replace the image
tokens' embeddings."""

from __future__ import annotations

import torch

from ftune.modules.vision import ImageTextModel
from ftune.training.step.micro_batch import MicroBatch


def _pixels_ignored(real):
    def model_inputs(self):
        return {k: v for k, v in real.fget(self).items() if k != "pixel_values"}

    return property(model_inputs)


def _features_zeroed(real):
    def image_features(self, *args, **kwargs):
        return torch.zeros_like(real(self, *args, **kwargs))

    return image_features


def images_mutants(mutant, wrap) -> dict:
    """The table's entry for images (built with mutants.py's Mutant and _wrap)."""
    return {
        "images": (
            mutant(
                "pixels_ignored",
                "ftune.training.step.micro_batch.MicroBatch.model_inputs",
                wrap(MicroBatch, "model_inputs", _pixels_ignored),
            ),
            mutant(
                "image_features_zeroed",
                "ftune.modules.vision.ImageTextModel.image_features",
                wrap(ImageTextModel, "image_features", _features_zeroed),
            ),
        ),
    }
