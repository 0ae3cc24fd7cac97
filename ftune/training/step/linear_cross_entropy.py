"""Output projection and cross-entropy in one autograd node whose gradients are made in the forward pass.

``ChunkedCrossEntropyLoss`` used to leave, for each block of tokens, the fp32 log-probs
``[tokens, vocab]`` saved for backward: together the size of the full fp32 logits (SmolLM2-135M,
2048 tokens: 384 MiB), then a log-softmax backward, a zero-filled one-hot gradient and two more
passes over each block in backward. Here each block's logits live only inside the forward loop:
the block's loss is taken, its logits are turned in place into the gradient of the loss with
respect to them (``softmax - one_hot``), and the two products of backward (``grad @ weight`` for the
hidden states, ``grad.T @ hidden`` for the weight) are done right away. Backward then only scales
the saved gradients by the incoming one. What stays saved is one ``[tokens, dim]`` gradient and,
when the weight is trained, one ``[vocab, dim]`` fp32 gradient (SmolLM2-135M: 113 MiB).

The cost: the gradients are computed even if backward never runs, so the loss uses this node only
when autograd will need it (grad enabled and an input requiring grad); otherwise it takes the
plain block loop. Backward can run once (``retain_graph`` is refused with a clear message).
"""

from __future__ import annotations

from typing import Any

import torch


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # noqa: PLR0913 - autograd.Function takes its inputs positionally
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        num_chunks: int,
        ignore_index: int,
        softcap: float | None,
    ) -> torch.Tensor:
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = None  # the first block's product, then accumulated: no zero-filled [vocab, dim]
        chunks = list(zip(hidden.chunk(num_chunks), labels.chunk(num_chunks)))
        # One fp32 [block, vocab] buffer for every block: logits, then softmax in place, then gradient.
        block = torch.empty(chunks[0][0].shape[0], weight.shape[0], dtype=torch.float32, device=hidden.device)
        start = 0
        for h, y in chunks:
            rows = slice(start, start + h.shape[0])
            start += h.shape[0]
            logits = block[: h.shape[0]]  # (tokens, vocab)
            if weight.dtype == torch.float32:
                torch.mm(h, weight.T, out=logits)
            else:
                logits.copy_(h @ weight.T)
            if softcap is not None:  # Gemma 2: c = cap * tanh(z / cap), in place
                logits.div_(softcap).tanh_().mul_(softcap)
            valid = y != ignore_index
            target = y.masked_fill(~valid, 0)
            # torch.softmax is one vectorised pass; an exp over (logits - max) is several times
            # slower on this CPU once values underflow. loss = -log p(label), exactly
            # logsumexp - logit(label) as long as p(label) is a normal float; rows past that (a
            # loss above ~87 nats) get their logsumexp computed from their logits made again.
            # Uncapped, the softmax overwrites the logits (the kernel reads each row before it
            # writes it); capped, the cap's derivative needs them, so it gets its own buffer.
            if softcap is None:
                grad = torch.ops.aten._softmax.out(logits, -1, False, out=logits)
            else:
                grad = torch.softmax(logits, dim=-1)
            p_label = grad.gather(1, target[:, None]).squeeze(1)
            token_loss = -torch.log(p_label)
            tiny = p_label < torch.finfo(torch.float32).tiny
            if bool(tiny.any()):
                again = (h[tiny] @ weight.T).float()
                if softcap is not None:
                    again.div_(softcap).tanh_().mul_(softcap)
                picked = again.gather(1, target[tiny][:, None]).squeeze(1)
                token_loss[tiny] = torch.logsumexp(again, dim=-1) - picked
            loss_sum += (token_loss * valid).sum()
            # d(loss)/d(logits) = softmax(logits) - one_hot(label), zero on ignored rows; in place.
            grad[torch.arange(grad.shape[0], device=grad.device), target] -= 1.0
            if not bool(valid.all()):
                grad.mul_(valid[:, None])
            if softcap is not None:
                # Through the cap: dc/dz = 1 - tanh(z / cap)^2 = 1 - (c / cap)^2; grad -= grad * t^2, in place.
                grad.addcmul_(grad, logits.div_(softcap).square_(), value=-1.0)
            grad = grad.to(weight.dtype)
            if need_hidden:
                torch.mm(grad, weight, out=grad_hidden[rows])
            if need_weight and grad_weight is None:
                grad_weight = (grad.T @ h).float()
            elif need_weight and h.dtype == torch.float32:
                grad_weight.addmm_(grad.T, h)  # accumulates in place, no [vocab, dim] temporary
            elif need_weight:
                grad_weight += (grad.T @ h).float()
            del grad
        del block, logits
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        ctx.used = False
        return loss_sum

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if ctx.used:
            raise RuntimeError(
                "ChunkedCrossEntropyLoss: backward ran twice through the same loss; its gradients are made in "
                "the forward pass and scaled in place once. Compute the loss again instead of retain_graph=True."
            )
        ctx.used = True
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden.mul_(grad_loss.to(grad_hidden.dtype))
        if grad_weight is not None:
            grad_weight = grad_weight.mul_(grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_chunks: int,
    ignore_index: int,
    softcap: float | None = None,
) -> torch.Tensor:
    """Summed fp32 cross-entropy of ``hidden @ weight.T`` against ``labels``, in ``num_chunks`` row blocks.

    Same value and gradients as projecting each block, upcasting to fp32 (soft-capping there when
    ``softcap`` is given: ``softcap * tanh(logits / softcap)``, Gemma 2) and taking
    ``F.cross_entropy(..., reduction="sum")``, without saving any logits for backward.

    Args:
        hidden: ``[tokens, dim]``, contiguous.
        weight: the output projection, ``[vocab, dim]``, same dtype as ``hidden``.
        labels: ``[tokens]`` long; ``ignore_index`` rows add nothing.
        num_chunks: how many contiguous row blocks the tokens are projected in.
        ignore_index: the label value of ignored rows.
        softcap: the model's final-logit soft-cap (``model.head.softcap``), or None.

    Returns:
        fp32 scalar: the summed loss, differentiable with respect to ``hidden`` and ``weight``
        (backward once).
    """
    return _LinearCrossEntropy.apply(hidden.contiguous(), weight, labels, num_chunks, ignore_index, softcap)
