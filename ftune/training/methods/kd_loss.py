"""Knowledge distillation: cross-entropy on the labels mixed with a KL divergence to a frozen teacher.

For every labelled position ``t`` (the positions cross-entropy trains on), with ``p`` the teacher's
and ``q`` the student's next-token distributions over the shared vocabulary::

    loss_t = (1 - kd_ratio) * (-log q(label_t)) + kd_ratio * D(p, q)
    D = KL(p || q) = sum_v p(v) * (log p(v) - log q(v))         kl: forward (the default of torchtune's configs)
    D = KL(q || p) = sum_v q(v) * (log q(v) - log p(v))         kl: reverse
    D = λ KL(p || q) + (1 - λ) KL(q || p), λ = sym_kd_ratio    kl: symmetric

torchtune's forward KL leaves out the teacher's entropy ``-sum_v p log p`` (a constant: the same
gradients); ftune's does not, so a teacher equal to the student gives 0 in all three.

The loss returns the *sum* over labelled tokens and their count, exactly like
``ftune.training.ChunkedCrossEntropyLoss``, so ``StepLoss`` normalises it per labelled token of the
whole step (micro-batches and ranks): gradient accumulation and world size behave as in SFT.

Both models' logits are computed in ``num_chunks`` blocks of tokens from their final hidden
states, each through its own output head (``model.head``: weight and soft-cap, so Gemma 2's capped
logits are the ones compared): only one block of fp32 logits of each model exists at a time, never the full fp32 logits
of both (which for a 128k vocabulary would dwarf the models' activations). What backward keeps
of each block is one fp32 tensor, the gradient with respect to the student's logits: over the
blocks, the size of the student's fp32 logits of the labelled tokens, as chunked cross-entropy.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ftune.modules.transformer import OutputHead
from ftune.training.methods.kd_divergences import KL_KINDS, MixedDivergence, TargetCrossEntropy
from ftune.training.step.loss import IGNORE_INDEX


class KDLoss(nn.Module):
    """``(1 - kd_ratio) * CE + kd_ratio * KL``, summed over labelled tokens, in chunks.

    Args:
        kd_ratio: weight of the KL term, in [0, 1]; 0 is plain cross-entropy (SFT), 1 pure distillation.
        num_chunks: number of contiguous blocks the tokens are split into.
        kl: "forward" ``KL(teacher || student)``, "reverse" ``KL(student || teacher)``, or
            "symmetric" (their mix, weighted by ``sym_kd_ratio``).
        sym_kd_ratio: λ in [0, 1], the forward KL's weight in "symmetric" (1 - λ is the reverse's);
            required for "symmetric", refused for the others.
        ignore_index: label value of positions that contribute neither loss nor a token.

    Raises:
        ValueError: ``kd_ratio`` outside [0, 1], an unknown ``kl``, ``sym_kd_ratio`` missing, out of
            [0, 1] or set without "symmetric".
    """

    #: A token's loss depends on its own position only: callers may drop ignored positions first.
    token_wise: bool = True

    def __init__(
        self,
        kd_ratio: float,
        num_chunks: int = 8,
        *,
        kl: Literal["forward", "reverse", "symmetric"] = "forward",
        sym_kd_ratio: float | None = None,
        ignore_index: int = IGNORE_INDEX,
    ) -> None:
        super().__init__()
        if isinstance(kd_ratio, bool) or not isinstance(kd_ratio, (int, float)) or not 0 <= kd_ratio <= 1:
            raise ValueError(
                f"KDLoss: kd_ratio must be a number in [0, 1] (0: cross-entropy only, 1: KL only), "
                f"got {kd_ratio!r}. Set loss.kd_ratio, e.g. loss.kd_ratio=0.5."
            )
        if kl not in KL_KINDS:
            raise ValueError(
                f"KDLoss: kl must be one of {list(KL_KINDS)}, got {kl!r}. Set loss.kl, e.g. loss.kl=reverse."
            )
        if (sym_kd_ratio is None) == (kl == "symmetric"):
            raise ValueError(
                "KDLoss: sym_kd_ratio is the forward KL's share of kl 'symmetric': set it for 'symmetric' "
                f"(e.g. loss.sym_kd_ratio=0.5) and leave it null otherwise; got kl {kl!r}, "
                f"sym_kd_ratio {sym_kd_ratio!r}."
            )
        if kl == "symmetric" and (
            isinstance(sym_kd_ratio, bool)
            or not isinstance(sym_kd_ratio, (int, float))
            or not 0 <= sym_kd_ratio <= 1
        ):
            raise ValueError(
                f"KDLoss: sym_kd_ratio must be a number in [0, 1] (1: forward KL only, 0: reverse KL only), "
                f"got {sym_kd_ratio!r}. Set loss.sym_kd_ratio, e.g. loss.sym_kd_ratio=0.5."
            )
        self.kd_ratio = float(kd_ratio)
        self.kl = kl
        self.sym_kd_ratio = None if sym_kd_ratio is None else float(sym_kd_ratio)
        self.num_chunks = num_chunks
        self.ignore_index = ignore_index

    def chunk_loss(
        self,
        head: OutputHead,
        hidden: torch.Tensor,
        teacher_head: OutputHead,
        teacher_hidden: torch.Tensor,
        labels: torch.Tensor,
    ) -> torch.Tensor:
        """The mixed loss summed over one block of tokens (fp32 scalar); the unit ``compile_loss`` compiles.

        Args:
            head, hidden: the student's output head and hidden states ``[tokens, dim]``.
            teacher_head, teacher_hidden: the teacher's, and its hidden states ``[tokens, dim_t]``.
            labels: ``[tokens]``; ``ignore_index`` rows add nothing.
        """
        logits = head.logits(hidden)  # (tokens, vocab) fp32
        if self.kl != "forward":
            with torch.no_grad():
                log_p = torch.log_softmax(teacher_head.logits(teacher_hidden), dim=-1)
            forward_share = 0.0 if self.kl == "reverse" else self.sym_kd_ratio
            weights = (
                1.0 - self.kd_ratio,
                self.kd_ratio * forward_share,
                self.kd_ratio * (1.0 - forward_share),
            )
            return MixedDivergence.apply(logits, log_p, labels, labels != self.ignore_index, weights)
        keep = (labels != self.ignore_index)[:, None]  # (tokens, 1)
        with torch.no_grad():
            log_p = torch.log_softmax(teacher_head.logits(teacher_hidden), dim=-1)  # (tokens, vocab)
            # Both terms are a cross-entropy against a fixed target distribution, plus a constant:
            # (1 - r) CE + r KL = -sum_v t(v) log q(v) + r sum_v p(v) log p(v),
            # with t = (1 - r) onehot(label) + r p on labelled rows and 0 on the others.
            p = log_p.exp()
            neg_entropy = self.kd_ratio * (p * log_p * keep).sum()  # r * sum p log p: no gradient
            target = p.mul_(self.kd_ratio * keep)
            onehot = (1.0 - self.kd_ratio) * keep.to(target.dtype)
            target.scatter_add_(1, labels.clamp(min=0)[:, None], onehot)
        return TargetCrossEntropy.apply(logits, target) + neg_entropy

    def forward(
        self,
        head: OutputHead,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        teacher_head: OutputHead,
        teacher_hidden: torch.Tensor,
    ) -> tuple[torch.Tensor, int]:
        """The mixed loss summed over the labelled tokens, and their count.

        Args:
            head: the student's output head (``model.head``).
            hidden: the student's final hidden states ``[b, s, dim]``.
            labels: targets aligned with ``hidden`` (shifted), ``[b, s]``.
            teacher_head: the teacher's output head (``teacher.head``).
            teacher_hidden: the teacher's final hidden states of the same positions ``[b, s, dim_t]``.

        Returns:
            ``(loss_sum, num_tokens)``: fp32 scalar and the count of labelled tokens.

        Raises:
            ValueError: shapes that do not fit together (vocabularies, positions).
        """
        weight, teacher_weight = head.weight, teacher_head.weight
        if (
            hidden.dim() != 3
            or labels.shape != hidden.shape[:2]
            or teacher_hidden.shape[:2] != hidden.shape[:2]
            or weight.shape[0] != teacher_weight.shape[0]
            or weight.shape[-1] != hidden.shape[-1]
            or teacher_weight.shape[-1] != teacher_hidden.shape[-1]
        ):
            raise ValueError(
                "KDLoss: expected student weight [vocab, dim], hidden [b, s, dim], labels [b, s], teacher "
                f"weight [vocab, dim_t] and hidden [b, s, dim_t]; got weight {list(weight.shape)}, hidden "
                f"{list(hidden.shape)}, labels {list(labels.shape)}, teacher weight "
                f"{list(teacher_weight.shape)}, teacher hidden {list(teacher_hidden.shape)}. Pass the "
                "teacher's hidden states of the same batch (training.teacher_hidden)."
            )
        # Contiguous blocks of the flattened tokens (see ChunkedCrossEntropyLoss.forward for why).
        flat = hidden.reshape(-1, hidden.shape[-1])  # (b*s, dim)
        flat_t = teacher_hidden.reshape(-1, teacher_hidden.shape[-1])  # (b*s, dim_t)
        flat_labels = labels.reshape(-1)  # (b*s,)
        loss_sum = hidden.new_zeros((), dtype=torch.float32)
        blocks = zip(
            flat.chunk(self.num_chunks), flat_t.chunk(self.num_chunks), flat_labels.chunk(self.num_chunks)
        )
        for h, ht, y in blocks:
            loss_sum = loss_sum + self.chunk_loss(head, h, teacher_head, ht, y)
        return loss_sum, int((flat_labels != self.ignore_index).sum())
