"""The feature check of images (part of tests/recipes/features.py's CHECKS; same contract: it asserts
the effect, tests/recipes/mutants_images.py holds the mutants that must fail it).

The recipe's text config is pointed at a tiny random SmolVLM folder (tests/recipes/tiny_vlm_folders.py)
and chats with drawn images; two runs differ only in the pixels (the second's images inverted), and
their first-step losses (before any update) must differ: the images reach the loss."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf
from PIL import Image, ImageOps
from run_logs import losses
from tiny_vlm_folders import SMOLVLM_TRANSFORM, TARGETS, chats, smolvlm

from ftune import training
from ftune.modules.vision import ImageTextModel
from ftune.runtime.rank import get_rank


def _inverted(data: Path, folder: Path) -> Path:
    """The chats of `data` with every image's pixels inverted, in `folder` (the same text)."""
    folder.mkdir(parents=True, exist_ok=True)
    for png in data.parent.glob("*.png"):
        ImageOps.invert(Image.open(png).convert("RGB")).save(folder / png.name)
    (folder / data.name).write_text(data.read_text())
    return folder / data.name


def _per_part_targets(real):
    """apply_peft with the LoRA recipe's text targets (a list) given per part of the image-text model."""

    def apply_peft(node, model, *args, **kwargs):
        if isinstance(model, ImageTextModel) and isinstance(node, DictConfig):
            targets = OmegaConf.to_container(OmegaConf.create(TARGETS["smolvlm"]))
            node = OmegaConf.create({**OmegaConf.to_container(node), "targets": targets})
        return real(node, model, *args, **kwargs)

    return apply_peft


def images(run, tmp_path):
    """Images reach the loss: the first step's loss changes when only the pixels change."""
    # One copy of the model and the chats, written by rank 0 (transformers' save_pretrained writes on
    # rank 0 only under torch.distributed); the run starts with a barrier.
    where = tmp_path / "model"
    folder, data, inverted = where / "smolvlm", where / "chats.jsonl", where / "inverted" / "chats.jsonl"
    if get_rank() == 0:
        where.mkdir(parents=True, exist_ok=True)
        smolvlm(where)
        chats(where)
        _inverted(data, inverted.parent)
    common = [
        "~model",  # config.json sizes the image-text model
        f"checkpointer.checkpoint_dir={folder}",
        "checkpointer.image_text=true",
        "~tokenizer",
        "tokenizer._component_=ftune.tokenizers.HFTokenizer",
        f"tokenizer.path={folder}",
        "tokenizer.max_seq_len=256",
        "~dataset",
        "dataset._component_=ftune.datasets.multimodal_chat_dataset",
        *(o for o in SMOLVLM_TRANSFORM if not o.startswith("~")),  # no transform to delete here
        "dataset_val=null",
        "collate_fn=null",
        "max_steps=1",
        "batch_size=4",
    ]
    got = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "apply_peft", _per_part_targets(training.apply_peft))
        for name, source in (("drawn", data), ("inverted", inverted)):
            logs, _ = run(*common, f"dataset.source={source}", output_dir=tmp_path / name)
            got[name] = losses(logs)
    assert len(got["drawn"]) == len(got["inverted"]) == 1, got
    a, b = got["drawn"][0], got["inverted"][0]
    assert abs(a - b) > 1e-6 * abs(a), (  # a random tiny model: about 4e-5 relative here
        f"the images do not reach the loss: {a} with the drawn images, {b} with them inverted"
    )
