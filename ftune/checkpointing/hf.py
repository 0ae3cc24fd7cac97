"""Hugging Face checkpoints: `model.safetensors` (single or sharded with an index) and `pytorch_model*.bin`.

In: the folder's weights are read (safetensors memory-mapped, `.bin` with `weights_only=True,
mmap=True`) and renamed with `ftune.models.CONVERTERS[family].hf_to_ftune`; the family comes
from `config.json` via `ftune.models` unless `model_type` is given.
Out: the same file names and shard layout as the input (each tensor goes to the shard the input
index put it in), a fresh index (`total_size` recomputed, `weight_map` kept), `config.json`, and
the tokenizer/generation files, so `transformers.AutoModelForCausalLM.from_pretrained(step_dir)`
loads a step folder as it is.

A reward model (a state with `score.weight`, `ftune.modules.score_head`) is written as transformers'
sequence classifier of its family (`LlamaForSequenceClassification`: `score.weight`, no `lm_head`,
one label, the pad id its scores were read with), and such a folder reads back as a reward model.

Image-text checkpoints (Gemma 3 4B/12B/27B, SmolVLM, LLaVA): with `image_text=True` ftune reads
them whole into an `ftune.modules.vision.ImageTextModel` (names from `ftune.models.converter_of` of
`image_text_family`) and writes them back in the layout transformers' save_pretrained writes, with
the input's config.json. Without it, of a Gemma 3 one (`ftune.models.IMAGE_TEXT`) ftune reads the
text decoder, skips the vision tower and projector (one log line says how many tensors and
parameters), and writes step folders of the text-only causal LM (Gemma3ForCausalLM: config.json
from `text_config`), in the input's shard files minus those that held only vision tensors.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import ftune.checkpointing.atomic as atomic
from ftune.checkpointing._checkpointer import Checkpointer
from ftune.checkpointing.families import converter, family_from_hf_config
from ftune.checkpointing.hf_config_check import check_against_weights
from ftune.checkpointing.loaded import StateDict
from ftune.checkpointing.model_build import build_model
from ftune.checkpointing.readers import read_json, read_weights, require_file
from ftune.models import (
    image_text_family,
    image_text_kind,
    image_text_text_config,
    is_image_text_model_config,
    text_model_config,
)
from ftune.modules.score_head import SCORE_KEY
from ftune.modules.transformer import TransformerDecoder
from ftune.modules.vision import ImageTextModel

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
# (index file, single file) per serialisation, in order of preference.
_LAYOUTS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


@dataclass
class HFLayout:
    """Where an HF folder keeps its weights.

    Attributes:
        index: the index file name (sharded), or None (one file).
        files: weight file names, in order.
        weight_map: HF tensor name -> file name, from the index (empty for a single file).
    """

    index: str | None
    files: list[str]
    weight_map: dict[str, str]

    @property
    def safetensors(self) -> bool:
        return self.files[0].endswith(".safetensors")

    def renamed(self, rename: Any) -> HFLayout:
        """The layout with each tensor name passed through `rename` (None drops the tensor), and
        the files left without tensors dropped."""
        weight_map = {new: f for k, f in self.weight_map.items() if (new := rename(k)) is not None}
        if self.index is None:
            return HFLayout(None, self.files, {})
        return HFLayout(self.index, [f for f in self.files if f in weight_map.values()], weight_map)


def read_layout(folder: Path) -> HFLayout:
    """Find the weight files of an HF folder: sharded safetensors, single safetensors, then `.bin`.

    Raises:
        FileNotFoundError: the folder holds no HF weights (lists what it holds).
        ValueError: the index is not valid JSON or has no weight_map.
    """
    for index_name, single in _LAYOUTS:
        if (folder / index_name).is_file():
            index = read_json(folder / index_name)
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(
                    f"{str(folder / index_name)!r} has no 'weight_map' (tensor name -> file): "
                    "the index is damaged. Download or convert the checkpoint again."
                )
            return HFLayout(index_name, list(dict.fromkeys(weight_map.values())), dict(weight_map))
        if (folder / single).is_file():
            return HFLayout(None, [single], {})
    found = sorted(p.name for p in folder.iterdir())
    raise FileNotFoundError(
        f"no Hugging Face weights in {str(folder)!r}: expected model.safetensors, "
        "model.safetensors.index.json + shards, or pytorch_model.bin(.index.json); the folder holds "
        f"{found[:12]}. For a Meta consolidated.00.pth checkpoint use MetaCheckpointer, for an ftune "
        "native folder NativeCheckpointer."
    )


def read_hf_weights(folder: Path) -> StateDict:
    """All tensors of an HF folder under their HF names, checked against the index.

    Raises:
        FileNotFoundError: a shard named in the index is missing (named, with the index).
        ValueError: a file is corrupt, or lacks a tensor its index assigns to it.
    """
    layout = read_layout(folder)
    state: StateDict = {}
    for name in layout.files:
        path = require_file(folder / name, listed_in=folder / layout.index if layout.index else None)
        tensors = read_weights(path)
        expected = [k for k, f in layout.weight_map.items() if f == name]
        if absent := [k for k in expected if k not in tensors]:
            raise ValueError(
                f"checkpoint file {str(path)!r} lacks {len(absent)} tensor(s) that {layout.index} assigns to it "
                f"(e.g. {absent[0]!r}): the file is truncated or from another checkpoint. Download or "
                "convert the checkpoint again."
            )
        state.update(tensors)
    return state


def _is_plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter)


def _dtype_name(state: StateDict) -> str | None:
    for t in state.values():
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return None


class HFCheckpointer(Checkpointer):
    """Checkpointer for Hugging Face folders (safetensors or `.bin`, single file or sharded).

    See `Checkpointer` for the arguments, `load()` and `save()`.
    """

    _announced_text_only = False  # the one line saying what an image-text input's step folders hold
    _reads_image_text = True

    def _input_image_text(self) -> Any:
        """`image_text_kind` of checkpoint_dir's config.json (None without one, or when the
        checkpoint is read whole: `image_text=True`)."""
        path = self.checkpoint_dir / CONFIG_FILE
        return image_text_kind(read_json(path)) if path.is_file() and not self.image_text else None

    def _announce_output(self) -> None:
        if self._announced_text_only or (kind := self._input_image_text()) is None:
            return
        logger.warning(
            "%s is a %s: step folders hold %s; its vision tower and projector are not saved",
            self.checkpoint_dir,
            kind.DESCRIPTION,
            kind.SAVED_AS,
        )
        self._announced_text_only = True

    def _detect_family(self, folder: Path) -> str:
        path = folder / CONFIG_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{str(path)!r} is missing, so the model family is unknown. Copy the model's config.json "
                "into the folder, or pass model_type=<family> to HFCheckpointer."
            )
        config = read_json(path)
        whole = is_image_text_model_config(config)
        if self.image_text and not whole:
            raise ValueError(
                f"checkpointer.image_text=true, but {str(path)!r} describes a text model "
                f"(model_type {config.get('model_type')!r}), not an image-text one (gemma3, idefics3, smolvlm, "
                "llava, mllama). Set checkpointer.image_text=false, or point checkpoint_dir at an image-text checkpoint."
            )
        if self.image_text:
            return image_text_family(config)
        if whole and image_text_kind(config) is None:
            raise ValueError(
                f"{str(path)!r} describes an image-text model (model_type {config.get('model_type')!r}), which "
                "ftune reads whole only: set checkpointer.image_text=true and name its image-text builder in "
                "the model section (or leave the model section out to size it from config.json)."
            )
        return family_from_hf_config(config, config_path=path)

    def _read_model(self, folder: Path, family: str) -> StateDict:
        # Files on disk never alias, so the converter cannot see that a stored lm_head.weight is a
        # tied model's copy of the embeddings: config.json says so.
        config = folder / CONFIG_FILE
        raw = read_json(config) if config.is_file() else None
        weights = read_hf_weights(folder)
        if self.image_text:  # the whole model; its text_config sizes the decoder (checked when built)
            tied = image_text_text_config(raw).get("tie_word_embeddings") if raw is not None else None
            return converter(family).hf_to_ftune(weights, tie_word_embeddings=tied)
        score = weights.pop(SCORE_KEY, None)  # a sequence classifier's head: the same name in ftune
        kind = image_text_kind(raw) if raw is not None else None
        if kind is not None:
            weights = self._text_decoder(kind, raw, weights, folder)
        hf_config = text_model_config(raw) if raw is not None else None
        tied = hf_config.get("tie_word_embeddings") if hf_config is not None else None
        if hf_config is not None:
            check_against_weights(hf_config, config, weights)
        state = converter(family).hf_to_ftune(weights, tie_word_embeddings=tied)
        return state if score is None else {**state, SCORE_KEY: score}

    @staticmethod
    def _text_decoder(kind: Any, raw: dict[str, Any], weights: StateDict, folder: Path) -> StateDict:
        """An image-text checkpoint's text decoder, in the text-only model's HF names; says what it skips."""
        text, skipped = kind.split_text_decoder(weights)
        # A warning so that it shows without any logging set up (ftune configures none): weights are left out.
        logger.warning(
            "%s is a %s: loading its text decoder; skipped %s (%d tensors, %s parameters)",
            folder,
            kind.DESCRIPTION,
            kind.SKIPPED_PARTS,
            len(skipped),
            f"{sum(t.numel() for t in skipped.values()):,}",
        )
        if omitted := kind.omitted_text_keys(raw):
            logger.info(
                "%s: text_config omits %s; taking transformers' defaults for them, as transformers does",
                folder / CONFIG_FILE,
                ", ".join(f"{k}={v!r}" for k, v in omitted.items()),
            )
        return text

    def _write_model(self, folder: Path, state: StateDict, family: str) -> None:
        if bad := [k for k, t in state.items() if not _is_plain(t)]:
            raise TypeError(
                f"{bad[0]!r} is a {type(state[bad[0]]).__name__} (a quantized tensor): Hugging Face "
                "safetensors cannot hold it. Save quantized models with NativeCheckpointer, or dequantize first."
            )
        score = state.get(SCORE_KEY)
        hf_state = converter(family).ftune_to_hf({k: v for k, v in state.items() if k != SCORE_KEY})
        if score is not None:
            hf_state[SCORE_KEY] = score
        layout = read_layout(self.checkpoint_dir)
        if (kind := self._input_image_text()) is not None:
            layout = layout.renamed(kind.text_decoder_key)
        shards = self._assign_shards(hf_state, layout)
        for name, tensors in shards.items():
            if layout.safetensors:
                atomic.save_safetensors(tensors, folder / name)
            else:
                atomic.torch_save(
                    {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, folder / name
                )
        if layout.index is not None:
            weight_map = {k: name for name, tensors in shards.items() for k in tensors}
            # Keep the input's key order, new keys (if any) after it.
            ordered = {k: weight_map[k] for k in layout.weight_map if k in weight_map}
            ordered.update({k: v for k, v in weight_map.items() if k not in ordered})
            total = sum(t.numel() * t.element_size() for tensors in shards.values() for t in tensors.values())
            atomic.write_json(
                {"metadata": {"total_size": total}, "weight_map": ordered}, folder / layout.index
            )
        self._write_config(folder, hf_state, sequence_classifier=score is not None)

    def _assign_shards(self, hf_state: StateDict, layout: HFLayout) -> dict[str, StateDict]:
        """Group tensors by the file the input layout puts them in (file order kept)."""
        shards: dict[str, StateDict] = {name: {} for name in layout.files}
        if layout.index is None:
            shards[layout.files[0]] = dict(hf_state)
            return shards
        extra = [k for k in hf_state if k not in layout.weight_map]
        if extra:
            logger.warning(
                "%d tensor(s) are not in the input index (e.g. %s); writing them to %s",
                len(extra),
                extra[0],
                layout.files[-1],
            )
        for key, tensor in hf_state.items():
            shards[layout.weight_map.get(key, layout.files[-1])][key] = tensor
        return {name: tensors for name, tensors in shards.items() if tensors}

    def _write_config(self, folder: Path, hf_state: StateDict, *, sequence_classifier: bool = False) -> None:
        src = self.checkpoint_dir / CONFIG_FILE
        if not src.is_file():
            logger.warning(
                "%s has no config.json: transformers will not load %s", self.checkpoint_dir, folder
            )
            return
        config = read_json(src) if self.image_text else text_model_config(read_json(src))
        # The config's dtype tells transformers (dtype="auto") what the weights are: keep it true.
        dtype = _dtype_name(hf_state)
        for key in ("dtype", "torch_dtype"):
            if key in config and dtype is not None:
                config[key] = dtype
        if sequence_classifier:
            config = sequence_classifier_config(config, self.score_pad_id)
        atomic.write_json(config, folder / CONFIG_FILE)


def sequence_classifier_config(config: dict[str, Any], pad_token_id: int | None) -> dict[str, Any]:
    """A causal LM's config.json as its family's one-label sequence classifier's (a reward model):
    ``architectures`` ``<Family>ForSequenceClassification``, ``id2label``/``label2id`` of one label
    (what transformers writes for ``num_labels=1``) and ``pad_token_id`` (kept when None is given).

    Raises:
        ValueError: a config whose architecture is not a ``...ForCausalLM`` or ``...ForSequenceClassification``.
    """
    names = config.get("architectures") or []
    stems = [n.removesuffix("ForCausalLM").removesuffix("ForSequenceClassification") for n in names]
    if len(names) != 1 or stems[0] == names[0]:
        raise ValueError(
            f"config.json architectures {names!r}: a reward model is saved as transformers' "
            "<Family>ForSequenceClassification, made from one <Family>ForCausalLM architecture. Give the "
            "checkpoint a config.json of a causal LM (as transformers saves one)."
        )
    out = {**config, "architectures": [f"{stems[0]}ForSequenceClassification"]}
    out["id2label"], out["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    if pad_token_id is not None:
        out["pad_token_id"] = pad_token_id
    return out


def load_hf(
    checkpoint_dir: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    *,
    image_text: bool = False,
) -> TransformerDecoder | ImageTextModel:
    """One call from an HF checkpoint folder to a model: `HFCheckpointer(folder).load()` + `build_model`.

    The model is built on the meta device from config.json and the (memory-mapped) weights are
    assigned into it, so weights already in `dtype` exist once, in the page cache; other dtypes
    are cast tensor by tensor. It loads exactly as the recipes, generate, eval and quantize do.

    Args:
        checkpoint_dir: folder with config.json and model.safetensors (or an index and shards, or
            pytorch_model*.bin).
        dtype: parameter dtype.
        device: where the parameters live.
        image_text: load an image-text checkpoint whole, as an `ImageTextModel` (see `Checkpointer`).

    Returns:
        The loaded model, in train mode.

    Raises:
        FileNotFoundError: config.json or the weights are missing.
        ValueError: an unsupported architecture, or weights that do not fit config.json.
        KeyError: an unknown tensor name in the checkpoint.
    """
    loaded = HFCheckpointer(checkpoint_dir, image_text=image_text).load()  # read-only: no output_dir
    return build_model(None, loaded.model, device=device, dtype=dtype, checkpoint_dir=checkpoint_dir)
