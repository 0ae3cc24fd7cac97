"""The training recipes' step as one function, so the unit tests can drive the helpers it is made of.

The lines are those of recipes/full_finetune_single_device.py (forward, backward, clipping,
optimizer and scheduler around ftune.training.StepLoss); test_recipe_step_matches_the_recipe
checks that they stay the same.
"""

import torch

from ftune import training


def train_step(
    model, loss_fn, micro_batches, optimizer, *, step, device, scheduler=None, clip_grad_norm=None
) -> training.StepStats:
    params = training.trainable_params(model)
    micro_batches = [training.on_device(b, device) for b in micro_batches]

    def loss_on(batch: training.MicroBatch) -> training.Loss:
        hidden = model.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)  # (b, s, dim)
        return training.token_loss(loss_fn, model.output_weight, hidden, batch.labels)

    step_loss = training.StepLoss(  # [sft]
        micro_batches, optimizer, step=step, device=device, per=training.per_token
    )
    for batch in micro_batches:
        step_loss.scaled(loss_on(batch)).backward()
    grad_norm = None
    if clip_grad_norm is not None:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_grad_norm)
    stats = step_loss.finish(grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    return stats
