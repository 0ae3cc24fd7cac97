"""A mixture-of-experts model's load-balancing loss, counted once, on the policy's own forward.

Every loss helper ends with :func:`with_aux_loss`: the router logits it reads are those the policy's
forward of this micro-batch left in its MoE blocks. A reference or teacher pass that runs the
policy's own blocks (a LoRA reference: the policy with its adapters off) keeps them as they were
(:func:`keep_router_state`), so the aux loss never counts another forward's routing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from ftune.modules.moe import MoETransformerDecoder
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, real_tokens


def with_aux_loss(model: nn.Module, batch: MicroBatch, loss: Loss) -> Loss:
    """``loss`` plus the load-balancing loss of a mixture-of-experts model's last forward (else ``loss``).

    The router logits are those of the forward that made ``batch``'s hidden states; the balancing
    loss counts the batch's real tokens only (:func:`real_tokens`, as transformers does with an
    attention mask). It enters weighted by the micro-batch's count ``n``: ``loss.sum + coef * n * aux``.
    ``StepLoss`` divides the step's sum by the step's count ``N`` (over every micro-batch and rank),
    so the step's loss is ``mean loss + coef * sum_i(n_i * aux_i) / N``: each forward's balancing
    loss (over its own tokens, as transformers computes it per forward), averaged with the weight
    of its count. One micro-batch on one device gives transformers' ``loss + coef * aux`` exactly
    (TRL's DPO adds ``router_aux_loss_coef * aux_loss`` of the policy's forward to the mean pair loss
    the same way); micro-batches and ranks enter like the tokens (pairs, sequences) they hold.

    ``coef`` is ``model.aux_loss_coef`` (HF ``router_aux_loss_coef``; 0 leaves the loss as it is).
    The unscaled ``aux`` is logged either way, as the metric ``aux_loss`` (the same weighted mean).
    """
    if not isinstance(model, MoETransformerDecoder):
        return loss
    aux = model.aux_loss(real_tokens(batch))  # fp32 scalar
    weighted = aux * loss.count  # n * aux
    total = loss.sum + model.aux_loss_coef * weighted if model.aux_loss_coef else loss.sum
    return Loss(total, loss.count, {**loss.metrics, "aux_loss": Metric.ratio(weighted, loss.count)})


@contextmanager
def keep_router_state(model: nn.Module) -> Iterator[None]:
    """Run a pass of ``model`` that must not touch its router state (a LoRA reference: the policy's
    own MoE blocks with the adapters off): each block's router logits are put back afterwards, so
    the aux loss reads the policy's own forward whatever ran in between. A dense model: nothing to keep.
    """
    if not isinstance(model, MoETransformerDecoder):
        yield
        return
    blocks = model.moe_blocks()
    kept = [block.router_logits for block in blocks]
    try:
        yield
    finally:
        for block, logits in zip(blocks, kept):
            block.router_logits = logits
