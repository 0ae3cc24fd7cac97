"""`ftune.models.load_hf(folder)`: one call from an HF checkpoint folder to a model.

It delegates to `ftune.checkpointing`, which owns "checkpoint folder -> model" for every caller
(recipes, generate, eval, quantize), so this shortcut cannot load differently from them.
"""

from __future__ import annotations

import os

import torch

from ftune.modules.transformer import TransformerDecoder


def load_hf(
    checkpoint_dir: str | os.PathLike, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> TransformerDecoder:
    """Build the model of an HF checkpoint folder and load its weights.

    The model is built on the meta device from config.json and the (memory-mapped) weights are
    assigned into it, so weights already in `dtype` exist once, in the page cache; other dtypes
    are cast tensor by tensor.

    Args:
        checkpoint_dir: folder with config.json and model.safetensors (or an index and shards, or
            pytorch_model*.bin).
        dtype: parameter dtype.
        device: where the parameters live.

    Returns:
        The loaded model, in train mode.

    Raises:
        FileNotFoundError: config.json or the weights are missing.
        ValueError: an unsupported architecture, or weights that do not fit config.json.
        KeyError: an unknown tensor name in the checkpoint.
    """
    # Imported here: ftune.checkpointing looks families up in ftune.models when it runs.
    from ftune.checkpointing import HFCheckpointer, build_model

    loaded = HFCheckpointer(checkpoint_dir).load()  # read-only: no output_dir
    return build_model(None, loaded.model, device=device, dtype=dtype, checkpoint_dir=checkpoint_dir)
