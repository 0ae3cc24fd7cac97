"""A training config without a `model` section: the checkpoint's config.json says the family and sizes.

As transformers' ``AutoModel.from_pretrained(folder)`` and Axolotl's ``base_model:`` do, a config may
leave the model section out (or set it to null, ``~model`` on the command line): the recipe then
builds the family and sizes that ``<checkpointer.checkpoint_dir>/config.json`` gives. A settings class
opts in with ``FROM_CHECKPOINT = {"model": "checkpointer"}`` (section -> the checkpointer section whose
folder holds config.json); reading ``cfg.model`` then gives the component below, so every reader of
the section (the recipe's ``training.build_model``, the dtype measurement) builds the same model
through one library function, ``ftune.checkpointing.model_from_checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ftune.config.errors import ConfigError

CHECKPOINT_MODEL = "ftune.checkpointing.model_from_checkpoint"
HF_CONFIG_FILE = "config.json"


def checkpoint_dir_of(node: DictConfig, checkpointer: str) -> str | None:
    """The `checkpoint_dir` of the section `checkpointer`, or None when it sets none."""
    value = OmegaConf.select(node, f"{checkpointer}.checkpoint_dir", default=None)
    return None if value is None else str(value)


def sized_by_checkpoint(node: DictConfig, cls: type) -> dict[str, str]:
    """Section -> checkpointer section, for each section of `cls.FROM_CHECKPOINT` the config leaves out or nulls."""
    wanted: dict[str, str] = getattr(cls, "FROM_CHECKPOINT", {})
    return {section: ckpt for section, ckpt in wanted.items() if node.get(section) is None}


def checkpoint_model_nodes(node: DictConfig, cls: type) -> dict[str, DictConfig]:
    """The component each absent `FROM_CHECKPOINT` section reads as: the model config.json describes
    (the whole image-text model when the checkpointer section sets ``image_text: true``)."""
    return {
        section: OmegaConf.create(
            {
                "_component_": CHECKPOINT_MODEL,
                "checkpoint_dir": checkpoint_dir_of(node, ckpt),
                **(
                    {"image_text": True}
                    if OmegaConf.select(node, f"{ckpt}.image_text", default=False)
                    else {}
                ),
            }
        )
        for section, ckpt in sized_by_checkpoint(node, cls).items()
    }


def is_checkpoint_model(model: Any) -> bool:
    """Whether a `model` section is the one `checkpoint_model_nodes` gives (sized by config.json)."""
    return model is not None and hasattr(model, "get") and model.get("_component_") == CHECKPOINT_MODEL


def check_model_source(cfg: Any, cls: type) -> None:
    """Refuse, before torch is imported, a config without a model section whose checkpoint folder
    exists but holds no config.json (a folder that does not exist is the checkpointer's to report).

    Raises:
        ConfigError: names the section, the folder, and the two fixes.
    """
    for section, ckpt in sized_by_checkpoint(cfg.node, cls).items():
        folder = checkpoint_dir_of(cfg.node, ckpt)
        if folder is None:
            problem = f"{ckpt}.checkpoint_dir is not set"
        elif Path(folder).is_dir() and not (Path(folder) / HF_CONFIG_FILE).is_file():
            problem = f"{str(Path(folder) / HF_CONFIG_FILE)!r} does not exist"
        else:
            continue
        raise ConfigError(
            [
                f"{section}: no {section} section ({cfg.where(section)}), so the checkpoint's {HF_CONFIG_FILE} "
                f"must size the model, but {problem}. Add a {section} section (e.g. "
                f"{section}._component_=ftune.models.smollm2.smollm2_135m), or point {ckpt}.checkpoint_dir at "
                f"a Hugging Face folder (one with {HF_CONFIG_FILE})."
            ],
            cfg.source,
        )


def missing_folder_message(
    folder: Path, hf_repo_id: str | None = None, *, what: str = "checkpoint folder"
) -> str:
    """What to say about a checkpoint folder that does not exist (the checkpointer and `ftune run`'s fast check)."""
    if hf_repo_id:
        return (
            f"{what} {str(folder)!r} does not exist. Get the weights with "
            f"`ftune download {hf_repo_id} --output-dir {folder}` (gated repos need "
            "--hf-token after accepting the licence on huggingface.co), or set checkpointer.checkpoint_dir."
        )
    return (
        f"{what} {str(folder)!r} does not exist or is not a folder. Download a model with `ftune download "
        f"<repo> --output-dir {folder}`, or convert a GGUF file with `ftune convert gguf <file.gguf> "
        f"--output-dir {folder}`, or fix the path."
    )


def missing_checkpoint_dirs(cfg: Any, resume_folder: Callable[[dict], Path | None]) -> list[str]:
    """A `checkpoint_dir` of an ftune checkpointer section that does not exist, when the run would read it.

    Found with a stat, before torch is imported; a run that resumes a full fine-tune's step folder
    reads its weights from there, not from `checkpoint_dir`, and is left alone (as is a
    `resume_from_checkpoint` path the checkpointer itself reports).

    Args:
        cfg: the loaded config.
        resume_folder: the step folder a checkpointer section resumes from (None: a fresh start).
    """
    problems = []
    for section, node in cfg.to_dict().items():
        component = node.get("_component_") if isinstance(node, dict) else None
        folder = node.get("checkpoint_dir") if isinstance(component, str) else None
        if not (isinstance(folder, str) and folder and component.startswith("ftune.checkpointing.")):
            continue
        path = Path(folder).expanduser()
        if path.exists():
            continue
        choice, step = node.get("resume_from_checkpoint"), resume_folder(node)
        if (choice not in (None, "auto") and step is None) or (step is not None and not _is_lora(step)):
            continue
        key = f"{section}.checkpoint_dir"
        problems.append(f"{key}: {missing_folder_message(path, node.get('hf_repo_id'))} ({cfg.where(key)})")
    return problems


def _is_lora(step: Path) -> bool:
    return (step / "adapter_model.safetensors").is_file()  # ftune.checkpointing.adapter.ADAPTER_WEIGHTS_FILE
