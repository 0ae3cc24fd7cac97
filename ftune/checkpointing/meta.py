"""Meta's reference format: `consolidated.00.pth` + `params.json` (Llama families).

In: the `.pth` is loaded with `weights_only=True, mmap=True` and converted with
`ftune.models.CONVERTERS[family].meta_to_ftune` (q/k rows permuted to ftune's RoPE layout),
using the head counts of `params.json`. Out: `consolidated.00.pth` via `ftune_to_meta`, with
`params.json` (and `tokenizer.model`) copied along. Model-parallel checkpoints
(`consolidated.01.pth`, ...) are not supported.

`params.json` does not name the model family, so `model_type` is required.
"""

from __future__ import annotations

from pathlib import Path

import torch

import ftune.checkpointing.atomic as atomic
from ftune.checkpointing._checkpointer import Checkpointer
from ftune.checkpointing.families import converter, known_families
from ftune.checkpointing.loaded import StateDict
from ftune.checkpointing.readers import read_json, read_weights, require_file

WEIGHTS_FILE = "consolidated.00.pth"
PARAMS_FILE = "params.json"


def _heads(folder: Path) -> dict[str, int]:
    params = read_json(require_file(folder / PARAMS_FILE))
    if "n_heads" not in params:
        raise ValueError(f"{str(folder / PARAMS_FILE)!r} has no 'n_heads': it is not a Meta params.json.")
    return {"num_heads": params["n_heads"], "num_kv_heads": params.get("n_kv_heads") or params["n_heads"]}


def _meta_converter(family: str):
    conv = converter(family)
    if conv.meta_to_ftune is None:
        raise ValueError(
            f"model family {family!r} has no Meta consolidated.pth format; use HFCheckpointer for its "
            "Hugging Face checkpoint."
        )
    return conv


class MetaCheckpointer(Checkpointer):
    """Checkpointer for Meta `consolidated.00.pth` folders; `model_type` must be given.

    See `Checkpointer` for the arguments, `load()` and `save()`.
    """

    def _detect_family(self, folder: Path) -> str:
        raise ValueError(
            f"MetaCheckpointer needs model_type=<family>: {PARAMS_FILE} in {str(folder)!r} does not name the "
            f"model family. Families: {', '.join(known_families())}."
        )

    def _read_model(self, folder: Path, family: str) -> StateDict:
        shards = sorted(p.name for p in folder.glob("consolidated.*.pth"))
        if len(shards) > 1:
            raise ValueError(
                f"{str(folder)!r} holds a model-parallel Meta checkpoint ({', '.join(shards)}); ftune reads "
                f"only single-file {WEIGHTS_FILE}. Use the model's Hugging Face checkpoint with HFCheckpointer."
            )
        sd = read_weights(require_file(folder / WEIGHTS_FILE))
        return _meta_converter(family).meta_to_ftune(sd, **_heads(folder))

    def _write_model(self, folder: Path, state: StateDict, family: str) -> None:
        if bad := [k for k, t in state.items() if type(t) not in (torch.Tensor, torch.nn.Parameter)]:
            raise TypeError(
                f"{bad[0]!r} is a {type(state[bad[0]]).__name__} (a quantized tensor): save quantized models "
                "with NativeCheckpointer, or dequantize first."
            )
        meta_sd = _meta_converter(family).ftune_to_meta(state, **_heads(self.checkpoint_dir))
        # Tied output and embedding are one tensor: torch.save stores the storage once.
        atomic.torch_save({k: v.detach().cpu() for k, v in meta_sd.items()}, folder / WEIGHTS_FILE)
        atomic.copy_file(self.checkpoint_dir / PARAMS_FILE, folder / PARAMS_FILE)
