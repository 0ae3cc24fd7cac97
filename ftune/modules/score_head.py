"""A reward model's scalar head: transformers' ``<Family>ForSequenceClassification`` with one label.

A reward model is the decoder with its LM head replaced by ``score``, a bias-free ``Linear(embed_dim,
1)`` read at each row's last real token. Which token that is follows transformers (5.x,
``GenericForSequenceClassification``): the rightmost position whose token id is not the pad id, so
a row that ends in a token equal to the pad id (a tokenizer whose pad is its end-of-sequence token)
is read at the token before it, exactly as transformers reads it; with no pad id, the last position.
State-dict key: ``score.weight`` (the name transformers saves), and no ``output.weight``.
"""

from __future__ import annotations

import torch
from torch import nn

SCORE_KEY = "score.weight"


class NoLMHead(nn.Module):
    """Stands where a reward model's LM head was: reading it is an error, never a silent fallback
    to the tied embeddings (``TransformerDecoder.head`` and ``project`` read ``output``)."""

    def _refuse(self) -> ValueError:
        return ValueError(
            "this model is a reward model (a score head on the last real token, as transformers' "
            "ForSequenceClassification): it has no LM head, so it gives no next-token logits. Score rows "
            "with ftune.training.reward_scores(model, hidden, tokens), or train a language model with "
            "another recipe."
        )

    @property
    def weight(self) -> torch.Tensor:
        raise self._refuse()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        raise self._refuse()


class ScoreHead(nn.Linear):
    """``Linear(embed_dim, 1, bias=False)`` read at each row's last non-pad token.

    Args:
        embed_dim: the decoder's width.
        pad_id: the token id the batches are padded with (transformers' ``pad_token_id``); None reads
            every row's last position.
    """

    def __init__(self, embed_dim: int, *, pad_id: int | None = None, **factory: object) -> None:
        super().__init__(embed_dim, 1, bias=False, **factory)
        self.pad_id = pad_id

    def last_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[b]`` long: each row's rightmost position whose token is not ``pad_id`` (0 for an all-pad row,
        as transformers' argmax gives)."""
        if self.pad_id is None:
            return torch.full((tokens.shape[0],), tokens.shape[1] - 1, device=tokens.device)
        positions = torch.arange(tokens.shape[1], device=tokens.device)  # (s,)
        return (positions * (tokens != self.pad_id)).argmax(-1)  # (b,)

    def scores(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``[b]`` rewards: the head on each row's last real hidden state (``hidden [b, s, dim]``), in fp32."""
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        return self(hidden[rows, self.last_tokens(tokens)]).squeeze(-1).float()  # (b,)


def add_score_head(model: nn.Module, *, pad_id: int | None = None, std: float = 0.02) -> ScoreHead:
    """Turn a decoder into a reward model: its LM head becomes :class:`NoLMHead`, a ``score`` head is added.

    A model that has one already (built from a reward model's checkpoint) keeps it; ``pad_id`` is set
    either way when given. A new head starts as transformers initialises one, ``N(0, std²)`` (its
    ``initializer_range``, 0.02 for every family ftune builds), drawn from the global RNG.

    Args:
        model: a ``TransformerDecoder`` (on any device, the meta device included).
        pad_id: the pad token id of the batches the model will score.
        std: the new head's initial standard deviation.

    Returns:
        The model's ``score`` head.
    """
    head = getattr(model, "score", None)
    if not isinstance(head, ScoreHead):
        weight = model.tok_embeddings.weight
        head = ScoreHead(weight.shape[1], device=weight.device, dtype=weight.dtype)
        if not weight.is_meta:
            with torch.no_grad():
                head.weight.normal_(0.0, std)
        model.score = head
        model.output = NoLMHead()
    if pad_id is not None:
        head.pad_id = pad_id
    return head
