"""Llama 3.2 Vision's tiled image encoder (HF `MllamaVisionModel`): tiles of an image in, one feature
vector a patch (and a class token a tile) out.

Each tile is cut into patches by a bias-free convolution; tile embeddings of the image's arrangement
are added (pre-tile), a class token is prepended to each tile, positional embeddings are added and a
LayerNorm applied; each tile's tokens are padded to a multiple of 8; a local transformer runs over
all tiles of an image together, then a LayerNorm, the post-tile embeddings and a gated global
transformer. The output is the global transformer's features with the local transformer's outputs
at `intermediate_layers` concatenated on the feature axis (padding removed), so the width is
embed_dim * (1 + len(intermediate_layers)) [vision_output_dim].

A token of a padding tile (past the image's tiles) or a padding patch is never attended to by another
such token; real tokens attend to everything (as transformers masks only pairs of padding tokens).
Sub-module names are transformers' so that converting a checkpoint is a rename of prefixes.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.vision.tile_embeddings import TileEmbedding, TilePositionalEmbedding

PAD_MULTIPLE = 8  # each tile's tokens are padded to a multiple of this


class TiledSelfAttention(nn.Module):
    """Multi-head self-attention, bias-free projections (HF `MllamaVisionAttention`)."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(
                f"TiledSelfAttention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})."
            )
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.o_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (n, L, d), mask bool (n, L, L) True = may attend -> (n, L, d)."""
        n, length, d = x.shape
        q, k, v = (
            proj(x).view(n, length, self.num_heads, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )  # (n, h, L, hd)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(n, length, d))


class TiledMLP(nn.Module):
    """fc2(gelu(fc1(x))), exact GELU, with biases (HF `MllamaVisionMLP`)."""

    def __init__(self, embed_dim: int, intermediate_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, intermediate_dim)
        self.fc2 = nn.Linear(intermediate_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TiledEncoderLayer(nn.Module):
    """Pre-LayerNorm encoder layer; a gated one (the global transformer's) scales the attention and MLP
    terms by tanh(gate_attn) and tanh(gate_ffn), initialised at pi / 4.

    Args:
        embed_dim, num_heads, intermediate_dim: the sizes [hidden_size, attention_heads, intermediate_size].
        norm_eps: LayerNorm epsilon [norm_eps].
        gated: the global transformer's layer.
    """

    def __init__(
        self, *, embed_dim: int, num_heads: int, intermediate_dim: int, norm_eps: float, gated: bool
    ) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.self_attn = TiledSelfAttention(embed_dim, num_heads)
        self.post_attention_layernorm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.mlp = TiledMLP(embed_dim, intermediate_dim)
        self.gated = gated
        if gated:
            self.gate_attn = nn.Parameter(torch.full((1,), math.pi / 4))
            self.gate_ffn = nn.Parameter(torch.full((1,), math.pi / 4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (n, L, d), mask bool (n, L, L) -> (n, L, d)."""
        attn = self.self_attn(self.input_layernorm(x), mask)
        h = x + (self.gate_attn.tanh() * attn if self.gated else attn)
        mlp = self.mlp(self.post_attention_layernorm(h))
        return h + (self.gate_ffn.tanh() * mlp if self.gated else mlp)


class TiledEncoderStack(nn.Module):
    """A stack of `TiledEncoderLayer`s under `layers` (HF `MllamaVisionEncoder`)."""

    def __init__(self, layers: list[TiledEncoderLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(the last layer's output, every layer's output in order)."""
        outputs = []
        for layer in self.layers:
            x = layer(x, mask)
            outputs.append(x)
        return x, outputs


class TiledVisionEncoder(nn.Module):
    """Tiles of images in, (n, max_num_tiles, patches + 1, output_dim) features out. Argument <- HF
    vision_config key in brackets.

    Args:
        image_size: a tile's side in pixels [image_size].
        patch_size: a patch's side [patch_size].
        embed_dim: width [hidden_size].
        num_layers: local transformer layers [num_hidden_layers].
        num_global_layers: gated global transformer layers [num_global_layers].
        num_heads: attention heads [attention_heads].
        intermediate_dim: MLP width [intermediate_size].
        max_num_tiles: tiles an image has at most [max_num_tiles].
        num_aspect_ratios: tile arrangements [len(supported_aspect_ratios)].
        intermediate_layers: the local layers (0-based) whose outputs join the output
            [intermediate_layers_indices].
        norm_eps: the layers' LayerNorm epsilon [norm_eps] (the pre/post norms use 1e-5).
        in_channels: image channels [num_channels].

    Raises:
        ValueError: sizes that do not fit, or an intermediate layer out of range.
    """

    def __init__(
        self,
        *,
        image_size: int,
        patch_size: int,
        embed_dim: int,
        num_layers: int,
        num_global_layers: int,
        num_heads: int,
        intermediate_dim: int,
        max_num_tiles: int,
        num_aspect_ratios: int,
        intermediate_layers: list[int],
        norm_eps: float = 1e-5,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(
                f"TiledVisionEncoder: image_size ({image_size}) must be a multiple of patch_size ({patch_size})."
            )
        bad = [i for i in intermediate_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(
                f"TiledVisionEncoder: intermediate_layers {bad} are out of range for {num_layers} local layers; "
                f"give indices in [0, {num_layers - 1}] (Llama 3.2 Vision: [3, 7, 15, 23, 30])."
            )
        self.image_size, self.patch_size, self.max_num_tiles = image_size, patch_size, max_num_tiles
        self.intermediate_layers = list(intermediate_layers)
        self.num_patches = (image_size // patch_size) ** 2 + 1  # a tile's tokens, the class token included
        self.output_dim = embed_dim * (1 + len(intermediate_layers))
        self.patch_embedding = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(embed_dim) * embed_dim**-0.5)
        tiles = {
            "num_aspect_ratios": num_aspect_ratios,
            "max_num_tiles": max_num_tiles,
            "embed_dim": embed_dim,
        }
        self.gated_positional_embedding = TilePositionalEmbedding(num_patches=self.num_patches, **tiles)
        self.pre_tile_positional_embedding = TileEmbedding(**tiles)
        self.post_tile_positional_embedding = TileEmbedding(**tiles)
        self.layernorm_pre = nn.LayerNorm(embed_dim)
        self.layernorm_post = nn.LayerNorm(embed_dim)
        sizes = {
            "embed_dim": embed_dim,
            "num_heads": num_heads,
            "intermediate_dim": intermediate_dim,
            "norm_eps": norm_eps,
        }
        self.transformer = TiledEncoderStack(
            [TiledEncoderLayer(**sizes, gated=False) for _ in range(num_layers)]
        )
        self.global_transformer = TiledEncoderStack(
            [TiledEncoderLayer(**sizes, gated=True) for _ in range(num_global_layers)]
        )

    @property
    def layers(self) -> list[nn.Module]:
        """Every encoder layer, local then global: the units activation checkpointing and FSDP2 wrap."""
        return [*self.transformer.layers, *self.global_transformer.layers]

    def forward(
        self, pixel_values: torch.Tensor, aspect_ratio_ids: torch.Tensor, aspect_ratio_mask: torch.Tensor
    ) -> torch.Tensor:
        """Encode images.

        Args:
            pixel_values: (n, max_num_tiles, channels, image_size, image_size), unused tiles zero.
            aspect_ratio_ids: (n,) long, each image's arrangement (1-based; 0 = a padding image).
            aspect_ratio_mask: (n, max_num_tiles), 1 for the image's tiles.

        Returns:
            (n, max_num_tiles, num_patches, output_dim).
        """
        n, tiles, channels, height, width = pixel_values.shape
        weight = self.patch_embedding.weight
        x = self.patch_embedding(pixel_values.reshape(n * tiles, channels, height, width).to(weight.dtype))
        x = x.flatten(2).transpose(1, 2)  # (n * tiles, patches, d)
        d = x.shape[-1]
        x = self.pre_tile_positional_embedding(x.view(n, tiles, -1, d), aspect_ratio_ids)
        cls = self.class_embedding.to(x.dtype).expand(n, tiles, 1, d)
        x = torch.cat([cls, x], dim=2)  # (n, tiles, P, d), P = num_patches
        x = self.layernorm_pre(self.gated_positional_embedding(x, aspect_ratio_ids))
        pad = (PAD_MULTIPLE - self.num_patches % PAD_MULTIPLE) % PAD_MULTIPLE
        x = F.pad(x, (0, 0, 0, pad))  # (n, tiles, L, d), L = P + pad
        length = self.num_patches + pad
        is_pad = (aspect_ratio_mask == 0)[:, :, None].expand(n, tiles, length).clone()  # (n, tiles, L)
        is_pad[:, :, self.num_patches :] = True
        is_pad = is_pad.view(n, tiles * length)
        mask = ~(is_pad[:, :, None] & is_pad[:, None, :])  # (n, T L, T L): only pad-pad pairs masked
        x, outputs = self.transformer(x.view(n, tiles * length, d), mask)
        x = self.post_tile_positional_embedding(
            self.layernorm_post(x).view(n, tiles, length, d), aspect_ratio_ids
        )
        x, _ = self.global_transformer(x.view(n, tiles * length, d), mask)
        picked = torch.stack([outputs[i] for i in self.intermediate_layers], dim=-1)  # (n, T L, d, k)
        picked = picked.reshape(n, tiles, length, -1)[:, :, : self.num_patches]  # (n, T, P, d k), d-major
        return torch.cat([x.view(n, tiles, length, d)[:, :, : self.num_patches], picked], dim=-1)
