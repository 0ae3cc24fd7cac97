"""Projectors: patch features of the vision encoder -> embeddings of the text decoder, one a family.

Each takes (n_images, patches, vision_dim) and returns (n_images, tokens_per_image, text_dim): the
rows that replace an image's placeholder tokens in the text. Parameter names are Hugging Face's.
"""

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.gemma_rms_norm import GemmaRMSNorm


def _check_features(name: str, features: torch.Tensor, patches: int, dim: int) -> None:
    if features.dim() != 3 or tuple(features.shape[1:]) != (patches, dim):
        raise ValueError(
            f"{name}: patch features must have shape (n_images, {patches}, {dim}), got {tuple(features.shape)}; "
            "the vision encoder's image_size, patch_size and width must match the projector's."
        )


class Gemma3Projector(nn.Module):
    """Gemma 3's multi-modal projector: average-pool the patch grid to `tokens_per_image` tokens, a
    (1 + weight) RMSNorm, then a bias-free projection (HF `Gemma3MultiModalProjector`).

    Args:
        vision_dim: width of the patch features [vision_config.hidden_size].
        text_dim: width of the text embeddings [text_config.hidden_size].
        patches_per_side: side of the encoder's patch grid (image_size // patch_size).
        tokens_per_image: image tokens after pooling, a square [mm_tokens_per_image].
        norm_eps: epsilon of the norm [vision_config.layer_norm_eps].
    """

    def __init__(
        self, *, vision_dim: int, text_dim: int, patches_per_side: int, tokens_per_image: int, norm_eps: float
    ) -> None:
        super().__init__()
        side = round(tokens_per_image**0.5)
        if side * side != tokens_per_image or patches_per_side % side:
            raise ValueError(
                f"Gemma3Projector: tokens_per_image ({tokens_per_image}) must be a square whose side divides "
                f"the patch grid's side ({patches_per_side}); e.g. 256 for Gemma 3's 64 x 64 patches."
            )
        self.patches_per_side, self.kernel = patches_per_side, patches_per_side // side
        self.tokens_per_image = tokens_per_image
        # Stored (vision_dim, text_dim), as HF multiplies by it: no transpose on conversion.
        self.mm_input_projection_weight = nn.Parameter(torch.zeros(vision_dim, text_dim))
        self.mm_soft_emb_norm = GemmaRMSNorm(vision_dim, norm_eps)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(n, patches, vision_dim) -> (n, tokens_per_image, text_dim)."""
        n, _, dim = features.shape
        _check_features(
            "Gemma3Projector", features, self.patches_per_side**2, self.mm_soft_emb_norm.weight.shape[0]
        )
        grid = features.transpose(1, 2).reshape(
            n, dim, self.patches_per_side, self.patches_per_side
        )  # (n, d, H, W)
        pooled = F.avg_pool2d(grid, self.kernel).flatten(2).transpose(1, 2)  # (n, tokens, d)
        return (self.mm_soft_emb_norm(pooled) @ self.mm_input_projection_weight).type_as(features)


class PixelShuffleProjector(nn.Module):
    """Idefics3's connector (SmolVLM): pixel shuffle, then a bias-free linear layer.

    Pixel shuffle folds each `scale_factor` x `scale_factor` block of neighbouring patches into one
    token of scale_factor² times the width, in the order of HF's `Idefics3Connector.pixel_shuffle`,
    so an image gives patches / scale_factor² tokens.

    Args:
        vision_dim: width of the patch features [vision_config.hidden_size].
        text_dim: width of the text embeddings [text_config.hidden_size].
        patches_per_side: side of the encoder's patch grid.
        scale_factor: side of the folded block [scale_factor]; must divide `patches_per_side`.
    """

    def __init__(self, *, vision_dim: int, text_dim: int, patches_per_side: int, scale_factor: int) -> None:
        super().__init__()
        if patches_per_side % scale_factor:
            raise ValueError(
                f"PixelShuffleProjector: scale_factor ({scale_factor}) must divide the patch grid's side "
                f"({patches_per_side})."
            )
        self.vision_dim, self.patches_per_side, self.scale_factor = vision_dim, patches_per_side, scale_factor
        self.tokens_per_image = (patches_per_side // scale_factor) ** 2
        self.proj = nn.Linear(vision_dim * scale_factor**2, text_dim, bias=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(n, patches, vision_dim) -> (n, patches / scale_factor², text_dim)."""
        _check_features("PixelShuffleProjector", features, self.patches_per_side**2, self.vision_dim)
        n, d, side, r = features.shape[0], self.vision_dim, self.patches_per_side, self.scale_factor
        x = features.reshape(n, side, side // r, d * r)  # (n, rows, cols / r, r * d): r columns folded
        x = x.transpose(1, 2).reshape(n, side // r, side // r, d * r * r)  # (n, cols / r, rows / r, r² d)
        x = x.transpose(1, 2).reshape(n, self.tokens_per_image, d * r * r)  # (n, tokens, r² d)
        return self.proj(x)


class MLPProjector(nn.Module):
    """LLaVA's projector: linear_2(gelu(linear_1(features))), one token a patch (HF
    `LlavaMultiModalProjector`, `projector_hidden_act: gelu`).

    Args:
        vision_dim: width of the patch features [vision_config.hidden_size].
        text_dim: width of the text embeddings [text_config.hidden_size].
        num_patches: patches an image gives (= tokens per image).
        bias: biases on both layers [multimodal_projector_bias].
    """

    def __init__(self, *, vision_dim: int, text_dim: int, num_patches: int, bias: bool = True) -> None:
        super().__init__()
        self.vision_dim, self.tokens_per_image = vision_dim, num_patches
        self.linear_1 = nn.Linear(vision_dim, text_dim, bias=bias)
        self.linear_2 = nn.Linear(text_dim, text_dim, bias=bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(n, patches, vision_dim) -> (n, patches, text_dim)."""
        _check_features("MLPProjector", features, self.tokens_per_image, self.vision_dim)
        return self.linear_2(F.gelu(self.linear_1(features)))


class LinearProjector(nn.Module):
    """Llama 3.2 Vision's projector: one linear layer with bias (HF `multi_modal_projector`), under the
    name `proj` so that LoRA targets it as {"projector": ["proj"]}.

    Args:
        vision_dim: width of the encoder's output [vision_config.vision_output_dim].
        text_dim: width of the text embeddings [text_config.hidden_size].
    """

    def __init__(self, *, vision_dim: int, text_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(vision_dim, text_dim)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(..., vision_dim) -> (..., text_dim)."""
        return self.proj(features)
