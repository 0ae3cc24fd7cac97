"""A distillation micro-batch's loss: what every KD recipe's ``loss_on`` returns.

The teacher runs first, without gradients (:func:`teacher_hidden`); :func:`distill_loss` scores the
student's hidden states against it through both models' output heads (``model.head``: weight and
soft-cap), over the labelled positions only, and adds a mixture-of-experts student's balancing
loss of its own forward. The teacher is a model of its own: its forward never touches the
student's router state.
"""

from __future__ import annotations

import torch
from torch import nn

from ftune.training.methods.kd_loss import KDLoss
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.metric import Loss
from ftune.training.step.micro_batch import MicroBatch, labelled_positions, per_token


@torch.no_grad()
def teacher_hidden(teacher: nn.Module, batch: MicroBatch) -> torch.Tensor:
    """The frozen teacher's final hidden states of a micro-batch ``[b, s, dim_t]``, without gradients.

    An image-text teacher (one with ``image_features``) sees the batch's images, as the student does
    (``batch.model_inputs``); a text teacher reads the tokens alone, whatever the batch holds.
    """
    if batch.pixel_values is not None and callable(getattr(teacher, "image_features", None)):
        return teacher.hidden(batch.tokens, **batch.model_inputs)
    return teacher.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)


def distill_loss(
    loss_fn: KDLoss,
    model: nn.Module,
    hidden: torch.Tensor,
    batch: MicroBatch,
    teacher: nn.Module,
    teacher_hidden: torch.Tensor,
) -> Loss:
    """:class:`KDLoss` over the labelled positions of student and teacher (cut with one index, so the two
    line up row for row), as a :class:`ftune.training.Loss` whose count is the labelled tokens.

    Args:
        loss_fn: the :class:`KDLoss`.
        model: the student whose ``hidden`` these are (its output head, and its router logits).
        hidden: the student's final hidden states ``[b, s, dim]``.
        batch: the micro-batch (its shifted labels).
        teacher: the frozen teacher (its output head).
        teacher_hidden: the teacher's final hidden states ``[b, s, dim_t]`` (:func:`teacher_hidden`).
    """
    labels, hidden, teacher_hidden = labelled_positions(
        batch.labels, hidden, teacher_hidden, ignore_index=loss_fn.ignore_index
    )
    loss_sum, _ = loss_fn(model.head, hidden, labels, teacher.head, teacher_hidden)
    return with_aux_loss(model, batch, Loss(loss_sum, int(per_token(batch)), {}))
