"""The feature check of images (part of tests/recipes/features.py's CHECKS; same contract: it asserts
the effect, tests/recipes/mutants_images.py holds the mutants that must fail it).

The recipe's text config is pointed at a tiny random SmolVLM folder (tests/recipes/tiny_vlm_folders.py;
every linear layer's input a multiple of 32, so that QAT's int4 groups fake-quantize the encoder too)
and data with drawn images, of the recipe's kind: chats (supervised, QAT; KD with a second tiny SmolVLM
as the teacher, which sees the images too), the image task's preference pairs (DPO) or its prompts
(GRPO). Two runs differ only in the pixels (the second's images inverted), and a figure of their first
step, computed by the loss's forward before any update, must differ: the images reach the loss. The
figure is the loss, or its gradient's norm where the first loss does not depend on the pixels: DPO's
is log 2 while the policy equals its reference, GRPO's 0 at ratio 1 (advantages sum to 0 in each
group); their gradients, through the policy's log-probabilities, do. GRPO's rollouts are sampled with
the image features zeroed here, so that both runs sample the same completions (the same rewards) and
only the update's forwards see the pixels (that the sampler sees them too is checked in
tests/recipes/test_vlm_dpo_grpo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image, ImageOps
from run_logs import _column
from tiny_vlm_folders import SMOLVLM_TRANSFORM, TARGETS, chats, smolvlm

from ftune import training
from ftune.datasets.image_task import write_image_task
from ftune.modules.vision import ImageTextModel
from ftune.runtime.rank import get_rank

TASK = {"n_train": 8, "n_heldout": 2, "size": 32}  # the image task's records for DPO and GRPO: 32 px pictures
# Recipe kind -> (the data file, relative to the folder it is written in; the dataset's overrides; the
# logged figure of the first step that must change with the pixels).
_CHATS = (
    "chats.jsonl",
    ("dataset._component_=ftune.datasets.multimodal_chat_dataset", "collate_fn=null"),
    "loss",
)
KINDS = {
    "sft": _CHATS,
    "kd": _CHATS,  # and an image-text teacher of the same vocabulary (`_teacher`)
    "dpo": (
        "task/train.jsonl",
        ("dataset._component_=ftune.datasets.image_task_preference_dataset", "collate_fn=null"),
        "grad_norm",
    ),
    "grpo": (
        "task/train.jsonl",
        ("dataset._component_=ftune.datasets.image_task_prompt_dataset", "padding_free=false"),
        "grad_norm",
    ),
}


def _kind(run, tmp_path: Path) -> str:
    """The recipe's kind, read from one step of its text config on the tiny text model: its logged
    figures, and whether it loads a teacher."""
    teachers, real = [], training.load_teacher

    def load_teacher(*args, **kwargs):
        teachers.append(real(*args, **kwargs))
        return teachers[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "load_teacher", load_teacher)
        logs, _ = run("max_steps=1", output_dir=tmp_path / "text")
    if "completions/mean_length" in logs[0]:
        return "grpo"
    if "logps/accuracy" in logs[0]:
        return "dpo"
    return "kd" if teachers else "sft"


def _teacher(folder: Path) -> list[str]:
    """The overrides that make the tiny image-text model in `folder` the teacher (it sees the images too)."""
    return [
        "~teacher_model",  # config.json sizes it
        f"teacher_checkpointer.checkpoint_dir={folder}",
        "teacher_checkpointer.image_text=true",
        "~teacher_tokenizer",
        "teacher_tokenizer._component_=ftune.tokenizers.HFTokenizer",
        f"teacher_tokenizer.path={folder}",
        "teacher_tokenizer.max_seq_len=256",
    ]


def _write(kind: str, where: Path) -> None:
    """The kind's data with drawn images in `where`: chats with 0 to 2 discs each, or the image task."""
    if kind in ("sft", "kd"):
        chats(where)
    else:
        write_image_task(where / "task", **TASK)


def _inverted(data: Path, folder: Path) -> None:
    """The data file `data` and every image in its folder (and below) with the pixels inverted, in `folder`."""
    for png in [p for p in data.parent.rglob("*.png") if folder not in p.parents]:
        target = folder / png.relative_to(data.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        ImageOps.invert(Image.open(png).convert("RGB")).save(target)
    (folder / data.name).write_text(data.read_text())


def _dataset(kind: str, data: Path) -> list[str]:
    """The overrides that read `data` as the kind's dataset (a task is named by its folder)."""
    _, overrides, _ = KINDS[kind]
    if kind in ("sft", "kd"):
        return [*overrides, f"dataset.source={data}"]
    return [*overrides, f"dataset.data_dir={data.parent}", *(f"dataset.{k}={v}" for k, v in TASK.items())]


def _per_part_targets(real):
    """apply_peft with the LoRA recipe's text targets (a list) given per part of the image-text model."""

    def apply_peft(node, model, *args, **kwargs):
        if isinstance(model, ImageTextModel) and isinstance(node, DictConfig):
            targets = OmegaConf.to_container(OmegaConf.create(TARGETS["smolvlm"]))
            node = OmegaConf.create({**OmegaConf.to_container(node), "targets": targets})
        return real(node, model, *args, **kwargs)

    return apply_peft


def _sampled_without_images(real):
    """training.sample_rollout with the image features zeroed while it samples (the rollout keeps the
    prompts' pixels for the update)."""

    def sample_rollout(*args, **kwargs):
        features = ImageTextModel.image_features  # the mutant's, under a mutant of image_features

        def zeroed(self, *a, **k):
            return torch.zeros_like(features(self, *a, **k))

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ImageTextModel, "image_features", zeroed)
            return real(*args, **kwargs)

    return sample_rollout


def images(run, tmp_path):
    """Images reach the loss: a figure of the first step's forward changes when only the pixels change."""
    kind = _kind(run, tmp_path)
    name, _, figure = KINDS[kind]
    # One copy of the model and the data, written by rank 0 (transformers' save_pretrained writes on
    # rank 0 only under torch.distributed); the run starts with a barrier.
    where = tmp_path / "model"
    folder, data = where / "smolvlm", where / name
    inverted = where / "inverted" / Path(name).name
    if get_rank() == 0:
        where.mkdir(parents=True, exist_ok=True)
        # GRPO decodes what it samples; QAT's int4 groups of 32 divide every linear layer, the encoder's too.
        smolvlm(where, fit_vocab=kind == "grpo", wide=True)
        if kind == "kd":  # other weights: the KL to it is not 0 at the first step
            smolvlm(where / "teacher", wide=True, seed=1)
        _write(kind, where)
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
        *(o for o in SMOLVLM_TRANSFORM if not o.startswith("~")),  # no transform to delete here
        "dataset_val=null",
        "max_steps=1",
        "batch_size=4",
        *(_teacher(where / "teacher" / "smolvlm") if kind == "kd" else ()),
    ]
    got, rewards = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "apply_peft", _per_part_targets(training.apply_peft))
        if kind == "grpo":
            mp.setattr(training, "sample_rollout", _sampled_without_images(training.sample_rollout))
        for run_name, source in (("drawn", data), ("inverted", inverted)):
            logs, _ = run(*common, *_dataset(kind, source), output_dir=tmp_path / run_name)
            got[run_name] = _column(logs, figure)
            rewards[run_name] = _column(logs, "reward") if kind == "grpo" else []
    assert rewards["drawn"] == rewards["inverted"], f"GRPO sampled other completions: rewards {rewards}"
    assert len(got["drawn"]) == len(got["inverted"]) == 1, got
    a, b = got["drawn"][0], got["inverted"][0]
    assert abs(a - b) > 1e-6 * abs(a), (  # a random tiny model: about 4e-5 relative for the SFT loss
        f"the images do not reach the loss ({kind}): first-step {figure} {a} with the drawn images, "
        f"{b} with them inverted"
    )
