"""The supervised loss of a forward (:func:`token_loss`), through the model's head, as a ``Loss``.

Every method's helper (``token_loss``, ``preference_loss``, ``grpo_loss``, ``distill_loss``) has
one signature, ``(loss_fn, model, hidden, batch, ...)``: it reads the model's output head (weight
and soft-cap: ``model.head``) and adds a mixture-of-experts model's balancing loss of the policy's
own forward (:func:`ftune.training.step.aux_loss.with_aux_loss`). No helper takes a bare weight.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.loss import IGNORE_INDEX
from ftune.training.step.metric import Loss
from ftune.training.step.micro_batch import MicroBatch, labelled_positions, on_device, per_token

LossFn = Callable[..., tuple[torch.Tensor, int]]


def token_loss(loss_fn: LossFn, model: nn.Module, hidden: torch.Tensor, batch: MicroBatch) -> Loss:
    """The supervised loss of a micro-batch's final hidden states, as a :class:`Loss`.

    ``loss_fn(head, hidden, labels)`` with the model's output head (``model.head``: the weight and,
    for a model that soft-caps its logits, Gemma 2, the cap), and for a mixture-of-experts model its
    load-balancing loss on top (:func:`with_aux_loss`): every recipe calls this one line whatever
    the model. A loss whose ``token_wise`` attribute is True (ftune's cross-entropy losses) gets
    only the labelled positions, as ``[1, n, dim]`` and ``[1, n]`` (see :func:`labelled_positions`).

    Args:
        loss_fn: called as ``loss_fn(head, hidden, labels)``, returning ``(loss_sum, num_tokens)``.
        model: the model whose ``hidden`` these are (its output head, and its router logits).
        hidden: the final hidden states ``[b, s, dim]`` of ``batch``.
        batch: the micro-batch (its shifted labels, and which positions are real tokens).

    Raises:
        ValueError: the loss counted other tokens than the step divides by (:func:`per_token`).
    """
    labels = batch.labels
    if getattr(loss_fn, "token_wise", False):
        ignore_index = getattr(loss_fn, "ignore_index", IGNORE_INDEX)
        labels, hidden = labelled_positions(labels, hidden, ignore_index=ignore_index)
    loss_sum, num_tokens = loss_fn(model.head, hidden, labels)
    count = int(per_token(batch))
    if int(num_tokens) != count:
        raise ValueError(
            f"{type(loss_fn).__name__} counted {int(num_tokens)} tokens of a micro-batch whose labelled tokens "
            f"(labels != {IGNORE_INDEX}) are {count}: the step divides by the labelled tokens "
            "(training.per_token), so the loss must sum over exactly those. Give the loss "
            f"ignore_index={IGNORE_INDEX}."
        )
    return with_aux_loss(model, batch, Loss(loss_sum, count, {}))


def batch_loss(
    model: nn.Module, loss_fn: LossFn, batch: dict[str, torch.Tensor] | MicroBatch, *, device: torch.device
) -> tuple[torch.Tensor, int]:
    """The supervised recipes' ``loss_on`` as a function, for benchmarks and unit tests: the batch on
    ``device`` (:func:`on_device`), the model's forward, then :func:`token_loss`.

    Returns:
        ``(loss_sum, num_tokens)``.
    """
    batch = on_device(batch, device)
    hidden = model.hidden(batch.tokens, **batch.model_inputs)  # (b, s, dim); images when it has them
    loss = token_loss(loss_fn, model, hidden, batch)
    return loss.sum, loss.count
