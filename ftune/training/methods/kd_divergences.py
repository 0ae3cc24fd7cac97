"""The per-block divergences of ``ftune.training.KDLoss``: forward, reverse and symmetric KL, with the labels' CE.

With ``p`` the teacher's and ``q`` the student's next-token distributions at one position:

- forward ``KL(p || q) = sum_v p(v) (log p(v) - log q(v))``: mass-covering, the student spreads over
  everything the teacher finds likely (the classic distillation loss);
- reverse ``KL(q || p) = sum_v q(v) (log q(v) - log p(v))``: mode-seeking, the student is penalised
  for mass where the teacher has little (MiniLLM, Gu et al. 2024);
- symmetric ``λ KL(p || q) + (1 - λ) KL(q || p)`` with ``λ = sym_kd_ratio`` (torchtune's name: 1 is
  forward, 0 reverse).

Each block's loss is an autograd function whose backward keeps one fp32 tensor, the gradient with
respect to the student's logits, as chunked cross-entropy does: autograd's own graph would keep the
log-probabilities, the probabilities and the teacher's distribution of every block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KL_KINDS = ("forward", "reverse", "symmetric")


class TargetCrossEntropy(torch.autograd.Function):
    """``-sum(target * log_softmax(logits))`` for a fixed ``target``; backward keeps one tensor.

    The gradient with respect to the logits is ``softmax(logits) * sum(target) - target``.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_q = F.log_softmax(logits, dim=-1)  # (tokens, vocab)
        loss = -(target * log_q).sum()
        grad = log_q.exp_().mul_(target.sum(-1, keepdim=True)).sub_(target)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None


class MixedDivergence(torch.autograd.Function):
    """``sum over kept rows of ce·CE(label) + fwd·KL(p || q) + rev·KL(q || p)``; backward keeps one tensor.

    With ``a = log q - log p`` and ``R = sum_v q(v) a(v)`` (the row's reverse KL), the gradient with
    respect to the student's logits ``z`` is, per kept row::

        ce·(q - onehot(label)) + fwd·(q - p) + rev·q·(a - R)

    (the last from ``d/dz_j sum_v q_v a_v = q_j (a_j - R)``: the ``sum_v q_v d log q_v`` part is 0).
    """

    @staticmethod
    def forward(
        ctx,
        logits: torch.Tensor,
        log_p: torch.Tensor,
        labels: torch.Tensor,
        keep: torch.Tensor,
        weights: tuple[float, float, float],
    ) -> torch.Tensor:
        ce, fwd, rev = weights
        keep_f = keep.to(logits.dtype)[:, None]  # (tokens, 1)
        log_q = F.log_softmax(logits, dim=-1)  # (tokens, vocab)
        q = log_q.exp()
        picked = log_q.gather(1, labels.clamp(min=0)[:, None])  # (tokens, 1)
        a = log_q.sub_(log_p)  # log q - log p, in log_q's memory
        p = log_p.exp()
        forward_kl = -(p * a).sum(-1, keepdim=True)  # (tokens, 1)
        reverse_kl = (q * a).sum(-1, keepdim=True)  # (tokens, 1)
        loss = ((-ce * picked + fwd * forward_kl + rev * reverse_kl) * keep_f).sum()
        grad = a.sub_(reverse_kl).mul_(rev).add_(ce + fwd).mul_(q)  # q (rev (a - R) + ce + fwd)
        grad.sub_(p.mul_(fwd))
        grad.scatter_add_(1, labels.clamp(min=0)[:, None], torch.full_like(picked, -ce))
        grad.mul_(keep_f)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None, None, None, None
