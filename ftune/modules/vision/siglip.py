"""The SigLIP vision encoder (Zhai et al., 2023): image patches in, one feature vector a patch out.

A ViT without a class token: a convolution with stride = kernel = patch size cuts the image into
patches and embeds each, a learned position embedding is added per patch, pre-LayerNorm encoder
layers (bidirectional multi-head attention with biases, a tanh-GELU MLP) follow, and a final
LayerNorm. Gemma 3, SmolVLM (Idefics3) and many LLaVA-style models use it as their vision tower.

Sub-module names are Hugging Face's (`SiglipVisionModel`, transformers 5): `layer_norm1`,
`self_attn.{q,k,v,out}_proj`, `layer_norm2`, `mlp.fc1/fc2`, `post_layernorm`, so that converting a
checkpoint is a rename of prefixes.
"""

import torch
import torch.nn.functional as F
from torch import nn


class VisionAttention(nn.Module):
    """Bidirectional multi-head self-attention over patches, with biases on every projection.

    Args:
        embed_dim: width of the patch features.
        num_heads: attention heads; must divide `embed_dim`.
    """

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"VisionAttention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})."
            )
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, p, embed_dim) -> (n, p, embed_dim); every patch attends to every patch of its image."""
        n, p, _ = x.shape
        q, k, v = (
            proj(x).view(n, p, self.num_heads, self.head_dim).transpose(1, 2)  # (n, h, p, d)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = F.scaled_dot_product_attention(q, k, v)  # (n, h, p, d)
        return self.out_proj(out.transpose(1, 2).reshape(n, p, self.num_heads * self.head_dim))


class VisionMLP(nn.Module):
    """fc2(gelu_tanh(fc1(x))), both with biases (HF `hidden_act: gelu_pytorch_tanh`)."""

    def __init__(self, embed_dim: int, intermediate_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, intermediate_dim)
        self.fc2 = nn.Linear(intermediate_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., embed_dim) -> (..., embed_dim)."""
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class VisionEncoderLayer(nn.Module):
    """h = x + self_attn(layer_norm1(x)); out = h + mlp(layer_norm2(h))."""

    def __init__(self, *, embed_dim: int, num_heads: int, intermediate_dim: int, norm_eps: float) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.self_attn = VisionAttention(embed_dim, num_heads)
        self.layer_norm2 = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.mlp = VisionMLP(embed_dim, intermediate_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, p, embed_dim) -> (n, p, embed_dim)."""
        h = x + self.self_attn(self.layer_norm1(x))
        return h + self.mlp(self.layer_norm2(h))


class SiglipVisionEncoder(nn.Module):
    """Pixels (n_images, channels, image_size, image_size) -> patch features (n_images, patches, embed_dim).

    Args:
        image_size: side of the square images it takes, in pixels [image_size].
        patch_size: side of a patch, in pixels [patch_size]; must divide `image_size`.
        embed_dim: width of the patch features [hidden_size].
        num_layers: encoder layers [num_hidden_layers].
        num_heads: attention heads [num_attention_heads].
        intermediate_dim: MLP width [intermediate_size].
        norm_eps: epsilon of every LayerNorm [layer_norm_eps].
        num_channels: input channels [num_channels].
    """

    def __init__(
        self,
        *,
        image_size: int,
        patch_size: int,
        embed_dim: int,
        num_layers: int,
        num_heads: int,
        intermediate_dim: int,
        norm_eps: float = 1e-6,
        num_channels: int = 3,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(
                f"SiglipVisionEncoder: image_size ({image_size}) must be a multiple of patch_size ({patch_size})."
            )
        self.image_size, self.patch_size, self.num_channels = image_size, patch_size, num_channels
        self.patches_per_side = image_size // patch_size
        self.num_patches = self.patches_per_side**2
        self.patch_embedding = nn.Conv2d(num_channels, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.position_embedding = nn.Embedding(self.num_patches, embed_dim)
        self.layers = nn.ModuleList(
            VisionEncoderLayer(
                embed_dim=embed_dim, num_heads=num_heads, intermediate_dim=intermediate_dim, norm_eps=norm_eps
            )
            for _ in range(num_layers)
        )
        self.post_layernorm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise a fresh encoder as transformers initialises `SiglipVisionModel`.

        PyTorch's defaults would draw the position embeddings from N(0, 1): at width 192 that is 14
        times SigLIP's 1 / sqrt(width), and the encoder's output then hardly depends on the pixels
        (a composed model with a random encoder learns the answers' prior, not the images). SigLIP's:
        position embeddings N(0, 1 / width); the patch embedding LeCun normal (truncated normal of
        std sqrt(1 / fan_in) / 0.8796), bias 0; attention and MLP weights Xavier uniform, attention
        biases 0, MLP biases N(0, 1e-6²); LayerNorms 1 and 0. A checkpoint's weights replace all of it.
        """
        width = self.position_embedding.weight.shape[1]
        nn.init.normal_(self.position_embedding.weight, std=width**-0.5)
        fan_in = self.patch_embedding.weight[0].numel()
        nn.init.trunc_normal_(self.patch_embedding.weight, std=fan_in**-0.5 / 0.87962566103423978)
        nn.init.zeros_(self.patch_embedding.bias)
        for layer in self.layers:
            attention = layer.self_attn
            for proj in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj):
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)
            for fc in (layer.mlp.fc1, layer.mlp.fc2):
                nn.init.xavier_uniform_(fc.weight)
                nn.init.normal_(fc.bias, std=1e-6)
            for norm in (layer.layer_norm1, layer.layer_norm2):
                norm.reset_parameters()
        self.post_layernorm.reset_parameters()

    def forward(self, pixel_values: torch.Tensor, *, feature_layer: int | None = None) -> torch.Tensor:
        """Patch features, row-major over the patch grid.

        Args:
            pixel_values: (n_images, num_channels, image_size, image_size) float, already normalised
                by the family's image transform.
            feature_layer: None = the last layer's output through `post_layernorm` (Gemma 3, Idefics3);
                an index into HF's `hidden_states` (0 = the embeddings, i = after layer i, negative from
                the end) = that output, without `post_layernorm` (LLaVA's `vision_feature_layer`).

        Returns:
            (n_images, patches, embed_dim).

        Raises:
            ValueError: `pixel_values` of another shape, or a `feature_layer` out of range.
        """
        expected = (self.num_channels, self.image_size, self.image_size)
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != expected:
            raise ValueError(
                f"SiglipVisionEncoder: pixel_values must have shape (n_images, {', '.join(map(str, expected))}), "
                f"got {tuple(pixel_values.shape)}; resize images with the model family's image transform."
            )
        weight = self.patch_embedding.weight
        h = self.patch_embedding(pixel_values.to(weight.dtype))  # (n, d, side, side)
        h = h.flatten(2).transpose(1, 2) + self.position_embedding.weight  # (n, p, d)
        if feature_layer is None:
            for layer in self.layers:
                h = layer(h)
            return self.post_layernorm(h)
        count = len(self.layers) + 1  # HF's hidden_states: the embeddings, then each layer's output
        if not -count <= feature_layer < count:
            raise ValueError(
                f"SiglipVisionEncoder: feature_layer {feature_layer} is out of range for {len(self.layers)} "
                f"layers; give an index in [{-count}, {count - 1}] of (embeddings, layer 1, ..., layer "
                f"{len(self.layers)})."
            )
        for layer in self.layers[: feature_layer % count]:
            h = layer(h)
        return h
