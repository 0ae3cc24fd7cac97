"""The embeddings that tell Llama 3.2 Vision's encoder where a tile sits in its image.

An image is cut into up to `max_num_tiles` tiles in one of a fixed list of arrangements (its aspect
ratio id, 1-based; 0 = no image). Each arrangement has learned embeddings, looked up by that id and
added under tanh gates initialised at zero, so a fresh encoder starts as a plain ViT (HF
`MllamaPrecomputedAspectRatioEmbedding` and `MllamaPrecomputedPositionEmbedding`).
"""

import torch
from torch import nn


class TileEmbedding(nn.Module):
    """One learned vector per (arrangement, tile), added to every patch of the tile, gated by tanh(gate).

    Args:
        num_aspect_ratios: arrangements (ids 1..n; id 0 is the padding row) [len(supported_aspect_ratios)].
        max_num_tiles: tiles an image has at most [max_num_tiles].
        embed_dim: width [hidden_size].
    """

    def __init__(self, *, num_aspect_ratios: int, max_num_tiles: int, embed_dim: int) -> None:
        super().__init__()
        self.max_num_tiles, self.embed_dim = max_num_tiles, embed_dim
        self.embedding = nn.Embedding(num_aspect_ratios + 1, max_num_tiles * embed_dim)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, aspect_ratio_ids: torch.Tensor) -> torch.Tensor:
        """x (n, tiles, patches, d) + the tiles' embeddings; `aspect_ratio_ids` (n,) long."""
        per_tile = self.embedding(aspect_ratio_ids).view(-1, self.max_num_tiles, 1, self.embed_dim)
        return x + per_tile * self.gate.tanh()


class TilePositionalEmbedding(nn.Module):
    """Patch positions: (1 - tanh(gate)) * one table shared by every tile, plus tanh(gate) * a table per
    (arrangement, tile, patch).

    Args:
        num_aspect_ratios: arrangements [len(supported_aspect_ratios)].
        max_num_tiles: tiles an image has at most [max_num_tiles].
        num_patches: tokens of a tile, the class token included [(image_size / patch_size)² + 1].
        embed_dim: width [hidden_size].
    """

    def __init__(
        self, *, num_aspect_ratios: int, max_num_tiles: int, num_patches: int, embed_dim: int
    ) -> None:
        super().__init__()
        self.max_num_tiles, self.num_patches, self.embed_dim = max_num_tiles, num_patches, embed_dim
        self.gate = nn.Parameter(torch.zeros(1))
        self.embedding = nn.Parameter(torch.randn(num_patches, embed_dim) * embed_dim**-0.5)
        self.tile_embedding = nn.Embedding(num_aspect_ratios + 1, max_num_tiles * num_patches * embed_dim)

    def forward(self, x: torch.Tensor, aspect_ratio_ids: torch.Tensor) -> torch.Tensor:
        """x (n, tiles, patches, d) + positions; `aspect_ratio_ids` (n,) long."""
        gate = self.gate.tanh()
        x = x + (1 - gate) * self.embedding.view(1, 1, self.num_patches, self.embed_dim)
        tiles = self.tile_embedding(aspect_ratio_ids)
        return x + gate * tiles.view(-1, self.max_num_tiles, self.num_patches, self.embed_dim)
