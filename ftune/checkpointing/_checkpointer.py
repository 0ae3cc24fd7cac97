"""What every checkpointer does: resume selection, step folders, adapters, recipe state.

A format (HF, Meta, native) only says how a folder of model weights is read and written, in
two methods (`_read_model`, `_write_model`) plus the family detection of its folder. Everything
else (which folder to resume from, LoRA adapters in PEFT format, `recipe_state.pt`, the
completion marker, pruning) lives here once, so the three formats cannot drift apart. Outputs
never land on inputs (`ftune.checkpointing.output_guard`): an `output_dir` equal to or inside
`checkpoint_dir` is refused when the checkpointer is built, before anything is read or written.
"""

from __future__ import annotations

import abc
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import ftune.checkpointing.adapter as adapter_files
import ftune.checkpointing.atomic as atomic
import ftune.checkpointing.output_guard as output_guard
from ftune.checkpointing.families import check_family
from ftune.checkpointing.loaded import Loaded, StateDict
from ftune.checkpointing.model_fit import split_adapter
from ftune.checkpointing.qat_ranges import RANGES_FILE, load_ranges, save_ranges, split_ranges
from ftune.checkpointing.readers import require_dir
from ftune.checkpointing.recipe_state import check_weights_only_safe, load_recipe_state, save_recipe_state
from ftune.config.model_source import missing_folder_message
from ftune.modules.score_head import SCORE_KEY

logger = logging.getLogger(__name__)

MERGED_SUBDIR = "merged"  # LoRA runs with save_adapter_weights_only=False: step_<N>/merged/

# Tokenizer and generation files copied from checkpoint_dir into every step folder when present,
# so a step folder is self-contained for transformers / peft / ftune generate / ftune export gguf (which
# writes an image-text model's preprocessor_config.json mean and std into its projector file). NOTICE:
# licences such as the Gemma Terms of Use require their notice to travel with every copy, fine-tuned
# ones included.
SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "processor_config.json",
    "NOTICE",
)


class Checkpointer(abc.ABC):
    """Loads a base checkpoint or a step folder, and saves `output_dir/step_<N>/` in the same format.

    Args:
        checkpoint_dir: the base checkpoint folder (read-only for ftune).
        output_dir: where step folders are written; not equal to or inside `checkpoint_dir` (a
            folder that contains it is fine). None: a read-only checkpointer (`save` refuses).
        model_type: model family (key of `ftune.models.CONVERTERS`); default: detected from the folder.
        resume_from_checkpoint: None (fresh run), "auto" (newest complete step folder in
            `output_dir`, fresh run if there is none) or the path of a step folder.
        keep_last_n_checkpoints: keep only this many complete step folders of this run, newest by
            its steps (see `output_guard.prune_run`); None keeps all.
        save_adapter_weights_only: on LoRA runs, save only the adapter (False also saves the
            merged full model, in the input format, in `step_<N>/merged/`).
        hf_repo_id: the hub repo the checkpoint comes from; when `checkpoint_dir` is missing, the
            error gives the exact `ftune download` command.
        image_text: read and write an image-text checkpoint whole (vision encoder, projector and
            text decoder, for a model section naming an image-text builder such as
            `ftune.models.gemma3.gemma3_vision_4b`); False reads a text model, and of a Gemma 3
            image-text checkpoint its text decoder only (saying what it leaves out). HF folders only.
    """

    _reads_image_text = False  # the formats that can hold an image-text model whole (HF)

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike,
        output_dir: str | os.PathLike | None = None,
        *,
        model_type: str | None = None,
        resume_from_checkpoint: Literal["auto"] | str | os.PathLike | None = None,
        keep_last_n_checkpoints: int | None = None,
        save_adapter_weights_only: bool = True,
        hf_repo_id: str | None = None,
        image_text: bool = False,
    ) -> None:
        if image_text and not self._reads_image_text:
            raise ValueError(
                f"image_text=true: {type(self).__name__} reads text models only. Load an image-text "
                "checkpoint with ftune.checkpointing.HFCheckpointer (its Hugging Face folder), or set "
                "checkpointer.image_text=false."
            )
        self.image_text = image_text
        self.checkpoint_dir = Path(checkpoint_dir).expanduser()
        self.output_dir = Path(output_dir).expanduser() if output_dir is not None else None
        if self.output_dir is not None:  # before anything is read or written
            output_guard.check_output_dir(self.output_dir, {"checkpoint_dir": self.checkpoint_dir})
        self.model_type = model_type
        self.resume_from_checkpoint = resume_from_checkpoint
        if keep_last_n_checkpoints is not None and keep_last_n_checkpoints < 1:
            raise ValueError(
                f"keep_last_n_checkpoints must be a positive int or None (keep all), got {keep_last_n_checkpoints}."
            )
        self.keep_last_n_checkpoints = keep_last_n_checkpoints
        self.save_adapter_weights_only = save_adapter_weights_only
        self.hf_repo_id = hf_repo_id
        self._family: str | None = None
        self._start_step = 0  # the step this run resumed at (set by load)
        self._written: list[int] = []  # the steps this run saved, in order
        self.score_pad_id: int | None = None  # a reward model's pad id, for its config (save's pad_token_id)

    # ---- the format: three methods per subclass -------------------------------------------

    @abc.abstractmethod
    def _detect_family(self, folder: Path) -> str:
        """The family of the model stored in `folder` (called only when model_type is None)."""

    @abc.abstractmethod
    def _read_model(self, folder: Path, family: str) -> StateDict:
        """Read the model weights of `folder`, returned in ftune names."""

    @abc.abstractmethod
    def _write_model(self, folder: Path, state: StateDict, family: str) -> None:
        """Write a full model (ftune names) into `folder` in this format, with its config file(s)."""

    def _announce_output(self) -> None:
        """Say once, before the first save, what step folders hold when a format writes something
        other than its input (HF: the text decoder of an image-text checkpoint); default: nothing."""
        return None

    # ---- shared behaviour -------------------------------------------------------------------

    def family_of(self, folder: Path) -> str:
        """The model family: `model_type` when given, else detected once from `folder`."""
        if self._family is None:
            self._family = check_family(self.model_type) if self.model_type else self._detect_family(folder)
        return self._family

    def resume_dir(self) -> Path | None:
        """The step folder to resume from, per `resume_from_checkpoint`, or None for a fresh run.

        Raises:
            FileNotFoundError: an explicit path that does not exist.
            ValueError: an explicit path whose save did not complete.
        """
        choice = self.resume_from_checkpoint
        if choice is None:
            return None
        if self.output_dir is None:
            raise ValueError(
                f"resume_from_checkpoint={choice!r} needs the checkpointer's output_dir (where step folders "
                "are); this checkpointer was built without one. Pass output_dir, or resume_from_checkpoint=None."
            )
        if choice == "auto":
            found = atomic.find_latest_complete(self.output_dir)
            if found is None:
                logger.info("No complete step folder in %s: starting a fresh run", self.output_dir)
            else:
                logger.info("Resuming from %s", found)
            return found
        path = Path(choice).expanduser()
        if not path.is_dir() and (self.output_dir / path).is_dir():
            path = self.output_dir / path  # e.g. resume_from_checkpoint=step_200
        folder = require_dir(
            path,
            what="resume_from_checkpoint folder",
            fix=f"Pass a step_<N> folder of {str(self.output_dir)!r}, resume_from_checkpoint=auto (newest "
            "complete one, or a fresh run) or null (fresh run).",
        )
        if not atomic.is_complete(folder):
            raise ValueError(
                f"resume_from_checkpoint folder {str(folder)!r} is incomplete (no {atomic.COMPLETE_MARKER} "
                "marker): its save was interrupted. Resume from an earlier step folder, or set "
                "resume_from_checkpoint=auto to pick the newest complete one."
            )
        return folder

    def load(self) -> Loaded:
        """Load the base checkpoint, or the state to resume from.

        Returns:
            `Loaded`. Fresh run: the base model from `checkpoint_dir`. Resuming a full run: the
            model from the step folder. Resuming a LoRA run (the step folder has
            `adapter_model.safetensors`): the base model from `checkpoint_dir` and the adapter
            from the step folder. `recipe_state` comes from the step folder's `recipe_state.pt`.

        Raises:
            FileNotFoundError: a missing folder or file (named, with how to get it).
            ValueError: a corrupt file (named), or an incomplete resume folder.
        """
        step = self.resume_dir()
        if step is not None and self.output_dir is not None:  # e.g. output_dir=out/step_50/more
            output_guard.check_output_dir(self.output_dir, {"resume_from_checkpoint": step})
        lora_resume = step is not None and adapter_files.has_adapter(step)
        weights_dir = self.checkpoint_dir if step is None or lora_resume else step
        if weights_dir == self.checkpoint_dir and self.hf_repo_id and not weights_dir.is_dir():
            raise FileNotFoundError(
                missing_folder_message(weights_dir, self.hf_repo_id)
            )  # as `ftune run` says
        require_dir(weights_dir)
        family = self.family_of(weights_dir)
        model = self._read_model(weights_dir, family)
        shapes = {k: v.shape for k, v in model.items()}
        adapter = adapter_files.load_adapter(step, family=family, base_shapes=shapes) if lora_resume else None
        recipe_state = load_recipe_state(step) if step is not None else None
        self._start_run(step, recipe_state)
        ranges = load_ranges(weights_dir)
        if ranges is not None:
            logger.info(
                "%s holds the learned quantization ranges of a QAT run (%d tensors): QAT recipes and "
                "`quantize qat=true` with quantizer.learn_ranges=true use them; other recipes ignore them.",
                weights_dir / RANGES_FILE,
                len(ranges),
            )
        return Loaded(
            model=model,
            adapter=adapter,
            recipe_state=recipe_state,
            family=family,
            step_dir=step,
            qat_ranges=ranges,
        )

    def _start_run(self, step: Path | None, recipe_state: dict[str, Any] | None) -> None:
        """Record the step this run starts at (retention counts folders up to it as the run's own), and
        say when output_dir already holds another run's step folders."""
        saved = (recipe_state or {}).get("step")
        self._start_step = saved if isinstance(saved, int) else (atomic.step_of(step) or 0) if step else 0
        if self.output_dir is not None:
            output_guard.refuse_foreign_step_folders(self.output_dir, self._start_step)
            output_guard.warn_foreign_step_folders(self.output_dir, self._start_step, self.checkpoint_dir)

    def load_base_model(self) -> StateDict:
        """The base checkpoint's model weights (from `checkpoint_dir`), also when resuming.

        What a frozen copy of the starting model needs (the reference model of full DPO): on a
        resumed run `load()` returns the trained weights of the step folder instead.
        """
        require_dir(self.checkpoint_dir)
        return self._read_model(self.checkpoint_dir, self.family_of(self.checkpoint_dir))

    def save(
        self,
        step: int,
        model_state: StateDict,
        *,
        recipe_state: dict[str, Any] | None = None,
        adapter_config: dict[str, Any] | None = None,
        epoch: int | None = None,
        pad_token_id: int | None = None,
    ) -> Path:
        """Write `output_dir/step_<step>/`; the completion marker goes last.

        Args:
            step: the optimizer step (folder name).
            model_state: the full model state in ftune names, adapter tensors included on a
                LoRA run, learned quantization ranges on a QAT run with range learning (written
                to `qat_ranges.safetensors`) (not modified).
            recipe_state: progress to resume from (see `ftune.checkpointing.recipe_state`).
            adapter_config: required exactly when `model_state` holds adapter tensors: the
                `apply_lora` settings ({"rank", "alpha", "dropout", "use_dora"}, e.g. the recipe's
                peft node) or a full PEFT LoraConfig dict. Written as PEFT's adapter_config.json.
            epoch: recorded in the marker file, for humans.
            pad_token_id: a reward model's pad id (a `model_state` with `score.weight`): its scores read
                each row's last token that is not this id, so transformers' sequence classifier needs it.

        Returns:
            The step folder.

        Raises:
            ValueError: adapter tensors without an adapter_config (or the reverse), no output_dir,
                or a step folder that is or holds checkpoint_dir (`OutputOnInputError`).
            TypeError: recipe_state would not load with weights_only=True.
        """
        base, adapter = split_adapter(model_state)
        if adapter and (ranges := split_ranges(base)[1]):
            raise ValueError(
                f"model_state holds both adapter tensors ({next(iter(adapter))}) and learned quantization "
                f"ranges ({next(iter(ranges))}); a LoRA run trains no ranges. Prepare the model for QAT "
                "with quantizer.learn_ranges=false."
            )
        if adapter and adapter_config is None:
            raise ValueError(
                f"model_state holds {len(adapter)} adapter tensors (e.g. {next(iter(adapter))}) but no "
                "adapter_config was given: pass the LoRA settings, e.g. "
                "adapter_config={'rank': 8, 'alpha': 16, 'dropout': 0.0, 'use_dora': False}."
            )
        if adapter_config is not None and not adapter:
            raise ValueError(
                "adapter_config was given but model_state holds no adapter tensors (lora_a / lora_b / "
                "magnitude): pass the LoRA model's full state dict, or adapter_config=None for a full run."
            )
        if recipe_state is not None:
            check_weights_only_safe(recipe_state)  # before writing gigabytes of weights
        if self.output_dir is None:
            raise ValueError(
                "this checkpointer was built without output_dir (read-only): it cannot save. Pass output_dir."
            )
        self.score_pad_id = pad_token_id
        folder = atomic.step_dir(self.output_dir, step)
        output_guard.check_step_folder(folder, step, self.checkpoint_dir)  # before writing
        save_id = atomic.begin_step(folder, step)  # refuses a folder ftune did not write; records it
        family = self.family_of(self.checkpoint_dir)
        self._announce_output()
        try:
            self._write_step(
                folder, step, save_id, model_state, base, adapter, family, recipe_state, adapter_config, epoch
            )
        except OSError as e:
            raise self._save_failed(folder, step, e) from e
        logger.info("Saved %s", folder)
        self._written.append(step)
        if self.keep_last_n_checkpoints is not None:
            output_guard.prune_run(
                self.output_dir,
                self.keep_last_n_checkpoints,
                written=self._written,
                start_step=self._start_step,
                inputs=[self.checkpoint_dir],
            )
        return folder

    def _write_step(
        self,
        folder: Path,
        step: int,
        save_id: str,
        model_state: StateDict,
        base: StateDict,
        adapter: StateDict,
        family: str,
        recipe_state: dict[str, Any] | None,
        adapter_config: dict[str, Any] | None,
        epoch: int | None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        # Overwriting a folder (same step after a resume): it must not look complete meanwhile.
        atomic.mark_incomplete(folder)
        if adapter:
            adapter_files.save_adapter(
                folder,
                adapter,
                family=family,
                adapter_config=adapter_config,
                base_model_name_or_path=str(self.checkpoint_dir.resolve()),
                base_shapes={k: v.shape for k, v in base.items()},
                score=base.get(SCORE_KEY),  # a reward model's head trains beside its adapters
            )
            if not self.save_adapter_weights_only:
                # In a subfolder: transformers, finding adapter_config.json next to full weights,
                # would load those weights and apply the adapter on top of them a second time.
                merged_dir = folder / MERGED_SUBDIR
                merged_dir.mkdir(exist_ok=True)
                self._write_model(
                    merged_dir, adapter_files.merged_state_dict(model_state, adapter_config), family
                )
                self._copy_side_files(merged_dir)
        else:
            base, ranges = split_ranges(base)
            self._write_model(folder, base, family)
            if ranges:
                save_ranges(folder, ranges)
            else:  # a folder overwritten by a run without learned ranges must not keep stale ones
                (folder / RANGES_FILE).unlink(missing_ok=True)
        self._copy_side_files(folder)
        if recipe_state is not None:
            save_recipe_state(recipe_state, folder)
        atomic.finish_step(folder, step, save_id, {"step": step, "epoch": epoch})

    def _save_failed(self, folder: Path, step: int, error: OSError) -> OSError:
        """The error of a save that failed half-way (disk full...): what is safe, what to do."""
        shutil.rmtree(folder, ignore_errors=True)  # no marker, so never resumed from; frees the space
        latest = atomic.find_latest_complete(self.output_dir)
        kept = (
            f"the newest complete step folder, {latest}, is intact and resume picks it"
            if latest is not None
            else "no earlier step folder exists, so a resumed run starts from the base checkpoint"
        )
        where = f" writing {error.filename}" if error.filename else ""
        return OSError(
            error.errno,
            f"saving step {step} failed{where}: {error.strerror or error}. The half-written {folder} was "
            f"removed; {kept}. Free space on that disk (or point output_dir at another one) and resume "
            "with checkpointer.resume_from_checkpoint=auto.",
        )

    def _copy_side_files(self, folder: Path) -> None:
        for name in SIDE_FILES:
            src = self.checkpoint_dir / name
            if src.is_file():
                atomic.copy_file(src, folder / name)
