"""The frozen teacher of knowledge distillation: loaded like any checkpoint, checked against the student.

The teacher comes from its own checkpointer section (any format ftune reads: HF safetensors, Meta
.pth, native), optionally with a LoRA adapter folder merged into its weights, and is built frozen
and in eval mode. Distillation compares the two models' distributions token by token, so they
must share one tokenizer: :func:`check_same_vocab` refuses a pair that does not.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch import nn

from ftune.checkpointing.inference import load_inference_model
from ftune.config import instantiate

logger = logging.getLogger(__name__)


def load_teacher(
    checkpointer: Any,
    model: Any,
    adapter_dir: str | os.PathLike | None,
    device: torch.device,
    dtype: torch.dtype,
) -> nn.Module:
    """Build the frozen teacher (eval mode, no parameter requires grad).

    Args:
        checkpointer: the config's ``teacher_checkpointer`` section (any ftune checkpointer). Its
            ``resume_from_checkpoint`` may name a LoRA step folder: that adapter is merged.
        model: the config's ``teacher_model`` section, or None to size the teacher from its config.json.
        adapter_dir: a PEFT adapter folder (e.g. a LoRA run's step folder) merged into the teacher, or None.
        device: where the teacher runs (the student's device).
        dtype: parameter dtype (the student's).

    Returns:
        The teacher, frozen.
    """
    ckpt = instantiate(checkpointer, _path="teacher_checkpointer")
    teacher = load_inference_model(ckpt, model=model, adapter_dir=adapter_dir, device=device, dtype=dtype)
    logger.info(
        "Teacher: %s (%d parameters, frozen)%s",
        ckpt.checkpoint_dir,
        sum(p.numel() for p in teacher.parameters()),
        f" + adapter {adapter_dir}" if adapter_dir else "",
    )
    return teacher


def _token(tokenizer: Any, i: int) -> str:
    return tokenizer.decode([i], skip_special_tokens=False)


def check_same_vocab(tokenizer: Any, teacher_tokenizer: Any, model: nn.Module, teacher: nn.Module) -> None:
    """Raise unless student and teacher share one vocabulary: same ids, same tokens, same output rows.

    Compared: the tokenizers' sizes, their special ids (bos, eos), the text of every id, and
    the number of rows of both output projections (the vocabulary the KL runs over).

    Args:
        tokenizer: the student's tokenizer (the ``tokenizer`` section).
        teacher_tokenizer: the teacher's (the ``teacher_tokenizer`` section).
        model: the student; ``teacher``: the teacher.

    Raises:
        ValueError: one line naming what differs, the keys involved and how to fix it.
    """
    problems = []
    n, m = tokenizer.vocab_size, teacher_tokenizer.vocab_size
    if n != m:
        problems.append(f"vocab_size {n} (tokenizer) vs {m} (teacher_tokenizer)")
    for name in ("bos_id", "eos_id"):
        a, b = getattr(tokenizer, name), getattr(teacher_tokenizer, name)
        if a != b:
            problems.append(f"{name} {a} vs {b}")
    if not problems:
        differ = [i for i in range(n) if _token(tokenizer, i) != _token(teacher_tokenizer, i)]
        if differ:
            i = differ[0]
            problems.append(
                f"{len(differ)} ids map to different tokens, e.g. id {i}: "
                f"{_token(tokenizer, i)!r} vs {_token(teacher_tokenizer, i)!r}"
            )
    rows, teacher_rows = model.head.weight.shape[0], teacher.head.weight.shape[0]
    if rows != teacher_rows:
        problems.append(f"output rows {rows} (model) vs {teacher_rows} (teacher_model)")
    if problems:
        raise ValueError(
            f"student and teacher do not share a vocabulary: {'; '.join(problems)}. Distillation compares "
            f"their next-token distributions id by id, so tokenizer.path ({tokenizer.source}) "
            f"and teacher_tokenizer.path ({teacher_tokenizer.source}) must be the same "
            "tokenizer and model/teacher_model the same vocab_size: pick a teacher of the student's family "
            "(e.g. SmolLM2-360M for SmolLM2-135M, Qwen2.5-1.5B for Qwen2.5-0.5B)."
        )
