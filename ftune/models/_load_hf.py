"""Load an HF checkpoint folder (config.json + safetensors) into an ftune model without a second copy."""

import json
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file

from ftune.models._converter import Converter
from ftune.models._hf_config import model_from_hf_config
from ftune.modules.transformer import TransformerDecoder

logger = logging.getLogger(__name__)

SAFETENSORS_INDEX = "model.safetensors.index.json"


def safetensors_files(checkpoint_dir: Path) -> list[Path]:
    """The weight files of an HF folder: the index's shards, else model.safetensors, else every *.safetensors.

    Raises:
        FileNotFoundError: if there is none, or the index names a missing shard.
    """
    index = checkpoint_dir / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [checkpoint_dir / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{index} lists shards that do not exist: {missing}. Re-download the checkpoint."
            )
        return files
    single = checkpoint_dir / "model.safetensors"
    if single.is_file():
        return [single]
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        present = sorted(p.name for p in checkpoint_dir.iterdir()) if checkpoint_dir.is_dir() else []
        raise FileNotFoundError(
            f"No safetensors weights in {checkpoint_dir} (found {present}); load_hf reads model.safetensors or "
            f"{SAFETENSORS_INDEX} + shards. Convert .bin/.pth checkpoints with `ftune convert` first."
        )
    return files


def load_hf(
    checkpoint_dir: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    *,
    converters: dict[str, Converter] | None = None,
) -> TransformerDecoder:
    """Build the model of an HF checkpoint folder and load its weights.

    The model is built on the meta device and the (memory-mapped) safetensors tensors are
    assigned into it, so weights already in `dtype` exist once, in the page cache; other dtypes
    are cast tensor by tensor.

    Args:
        checkpoint_dir: folder with config.json and model.safetensors (or an index and shards).
        dtype: parameter dtype.
        device: where the parameters live.
        converters: the family -> Converter table; defaults to `ftune.models.CONVERTERS`.

    Returns:
        The loaded model.

    Raises:
        FileNotFoundError: if config.json or the weights are missing.
        ValueError: for an unsupported architecture, or weights that do not fit the config.
        KeyError: for an unknown tensor name in the checkpoint.
    """
    if converters is None:
        from ftune.models import CONVERTERS as converters
    checkpoint_dir = Path(checkpoint_dir)
    config_path = checkpoint_dir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"No config.json in {checkpoint_dir}: load_hf needs an HF model folder.")
    family, model = model_from_hf_config(json.loads(config_path.read_text()), dtype=dtype, device="meta")

    hf_sd: dict[str, torch.Tensor] = {}
    for path in safetensors_files(checkpoint_dir):
        hf_sd.update(load_file(path, device=str(device)))  # mmap-backed on CPU: no copy yet
    tied = model.output is None
    sd = converters[family].hf_to_ftune(hf_sd, tie_word_embeddings=tied)

    expected = model.state_dict()
    missing, unexpected = sorted(expected.keys() - sd.keys()), sorted(sd.keys() - expected.keys())
    if missing or unexpected:
        raise ValueError(
            f"{checkpoint_dir}: the weights do not match its config.json ({family}): missing {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}."
        )
    for key, ref in expected.items():
        if sd[key].shape != ref.shape:
            raise ValueError(
                f"{checkpoint_dir}: tensor {key} has shape {tuple(sd[key].shape)}, config.json implies "
                f"{tuple(ref.shape)}."
            )
    # .to() returns the tensor itself when the dtype already matches, keeping the mmap.
    sd = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
    model.load_state_dict(sd, strict=True, assign=True)
    logger.info("Loaded %s (%d tensors) from %s", family, len(sd), checkpoint_dir)
    return model
