"""Token cross-entropy losses that take the model's output head and the final hidden states.

Every loss here is called the same way by the training step (``training.token_loss``)::

    loss_sum, num_tokens = loss_fn(model.head, hidden, shifted_labels)

``model.head`` is the output projection's weight and the logits' soft-cap (Gemma 2's; None for the
others): a loss projects through it (``head.logits(hidden)``) and scores the logits the model outputs.

and returns the *sum* over non-ignored tokens (fp32) and their count, so the caller can
normalise by the token count of the whole optimizer step (see ``ftune.training.StepLoss``).
"""

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.transformer import OutputHead
from ftune.training.step.linear_cross_entropy import linear_cross_entropy

# Same value as ftune.data's CROSS_ENTROPY_IGNORE_IDX (and torch's default ignore_index).
IGNORE_INDEX = -100


class CrossEntropyLoss(nn.Module):
    """Plain token cross-entropy: materialises the full logits, then upcasts them to fp32.

    Simple and the reference for :class:`ChunkedCrossEntropyLoss`; uses the most memory.

    Args:
        ignore_index: label value that contributes neither loss nor a token.
    """

    #: A token's loss depends on its own hidden state and label only, so callers may drop the
    #: ignored positions before calling (``ftune.training.batch_loss`` does: it skips their
    #: projection to the vocabulary). A loss that looks across positions must leave this False.
    token_wise: bool = True
    #: Make the gradients in the forward pass (``ftune.training.step.linear_cross_entropy``) instead of
    #: saving each block's log-probs; True for ``ChunkedCrossEntropyLoss``.
    fused_backward: bool = False

    def __init__(self, *, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__()
        self.ignore_index = ignore_index
        self.num_chunks = 1

    def chunk_loss(self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Summed fp32 cross-entropy of one block of tokens.

        This is the unit ``ftune.training.compile_loss`` compiles.

        Args:
            head: the model's output head (``model.head``: weight ``[vocab, dim]`` and soft-cap).
            hidden: hidden states, ``[tokens, dim]``.
            labels: target ids, ``[tokens]``; ``ignore_index`` entries are skipped.

        Returns:
            fp32 scalar: the sum of the per-token losses.
        """
        # Upcast per block (softmax over a large vocab in bf16 loses precision), then cap in fp32.
        logits = head.logits(hidden)  # (tokens, vocab)
        return F.cross_entropy(logits, labels, ignore_index=self.ignore_index, reduction="sum")

    def _fused_backward(self, weight: torch.Tensor, hidden: torch.Tensor) -> bool:
        """Whether this call goes through ``linear_cross_entropy`` (gradients made in the forward pass).

        Only ``ChunkedCrossEntropyLoss`` does, when autograd will need the gradients and its own
        ``chunk_loss`` is in place (``compile_loss`` or a test may replace it: the block loop then
        calls the replacement). ``CrossEntropyLoss`` stays the plain reference.
        """
        return (
            self.fused_backward
            and "chunk_loss" not in vars(self)
            and torch.is_grad_enabled()
            and (weight.requires_grad or hidden.requires_grad)
        )

    def forward(
        self, head: OutputHead, hidden: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """Cross-entropy summed over the non-ignored tokens.

        Args:
            head: the model's output head (``model.head``): the weight ``[vocab, dim]`` and the
                soft-cap (logits are ``cap * tanh(hidden @ weight.T / cap)``; None = plain).
            hidden: final hidden states, ``[b, s, dim]`` (``model.hidden(...)``).
            labels: targets already aligned with ``hidden`` (shifted by the caller), ``[b, s]``.

        Returns:
            ``(loss_sum, num_tokens)``: fp32 scalar sum over non-ignored tokens, and their count.

        Raises:
            ValueError: if the shapes of ``hidden``, ``labels`` and the head's weight do not fit together.
        """
        weight = head.weight
        if hidden.dim() != 3 or labels.shape != hidden.shape[:2] or weight.shape[-1] != hidden.shape[-1]:
            raise ValueError(
                f"{type(self).__name__}: expected head weight [vocab, dim], hidden [b, s, dim] and labels [b, s]; "
                f"got weight {list(weight.shape)}, hidden {list(hidden.shape)}, labels {list(labels.shape)}."
            )
        # Flatten (b, s) into tokens and chunk along that axis: each chunk is a contiguous block of
        # rows. Non-contiguous chunks (e.g. hidden[:, i:j] with b > 1) fed to a frozen, tied output
        # projection hit a ~4x slower matmul path on CPU.
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # (b*s, dim)
        flat_labels = labels.reshape(-1)  # (b*s,)
        if self._fused_backward(weight, hidden):
            loss_sum = linear_cross_entropy(
                flat_hidden,
                weight,
                flat_labels,
                num_chunks=self.num_chunks,
                ignore_index=self.ignore_index,
                softcap=head.softcap,
            )
        else:
            loss_sum = hidden.new_zeros((), dtype=torch.float32)
            for h, y in zip(flat_hidden.chunk(self.num_chunks), flat_labels.chunk(self.num_chunks)):
                loss_sum = loss_sum + self.chunk_loss(head, h, y)
        return loss_sum, int((flat_labels != self.ignore_index).sum())


class ChunkedCrossEntropyLoss(CrossEntropyLoss):
    """Token cross-entropy computed over ``num_chunks`` contiguous blocks of tokens.

    Only one block's logits exist in fp32 at a time, so peak memory drops from "full logits in
    model dtype + fp32 copy + fp32 log-probs" to one block's worth of those. When autograd needs
    gradients, each block's gradients are made in the forward pass
    (``ftune.training.step.linear_cross_entropy``), so no logits or log-probs are saved for backward
    either; what is saved is one ``[tokens, dim]`` and, when the weight is trained, one fp32
    ``[vocab, dim]`` gradient.

    Args:
        num_chunks: number of blocks the ``b * s`` tokens are split into.
        ignore_index: label value that contributes neither loss nor a token.

    Raises:
        ValueError: if ``num_chunks`` is not a positive int.
    """

    fused_backward = True

    def __init__(self, num_chunks: int = 8, *, ignore_index: int = IGNORE_INDEX) -> None:
        super().__init__(ignore_index=ignore_index)
        if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
            raise ValueError(
                f"ChunkedCrossEntropyLoss: num_chunks must be a positive int, got {num_chunks!r}."
            )
        self.num_chunks = num_chunks
