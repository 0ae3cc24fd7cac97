"""A collated batch on its device, read once (:class:`MicroBatch`), and the counts a step divides by.

This is the one place that knows the batch layout (``tokens``, ``labels``, for packed batches
``input_pos`` and ``document_ids``, for image batches ``pixel_values`` and ``image_sample``).
:func:`on_device` moves a batch and shifts its labels once; the step's normaliser, the recipe's
``loss_on`` (training and validation) and a teacher all read that. The counts (:func:`per_token`, :func:`per_pair`, ``GRPOLoss.per``) are each defined once, here or
beside their loss: the step divides by them before backward, and the loss helpers report the same
count for validation (``Loss.count``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ftune.modules.masks import document_causal_mask
from ftune.training.step.loss import IGNORE_INDEX

# A cross-attention image-text model's further inputs (Llama 3.2 Vision: `padded_collate_vision`).
CROSS_ATTENTION_INPUTS = ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask")


@dataclass(frozen=True)
class MicroBatch:
    """One collated batch on the model's device, its labels shifted (see :func:`on_device`).

    Attributes:
        tokens: ``[b, s]`` long.
        labels: ``[b, s]`` long, shifted: ``labels[:, t]`` is the target of position ``t``.
        input_pos: ``[b, s]`` positions of a packed batch, else None.
        document_ids: ``[b, s]`` document index of a packed batch, else None.
        row_kinds: ``[b]`` long, what each row is for a loss whose rows differ in kind (a KTO batch:
            desirable and undesirable completions, then mismatched rows; ``ftune.data.padded_collate_kto``),
            else None.
        margins: ``[pairs]`` fp32, each pair's required reward margin (a reward model's Bradley-Terry
            loss with a dataset's margin column: ``ftune.datasets.preference_dataset(margin_column=...)``),
            else None.
        pixel_values: ``(n, ...)`` the batch's images (crops or tiles) in the order of their image
            tokens (``ftune.data.padded_collate_vision``), else None: a text batch.
        image_sample: ``[n]`` long, the row of ``tokens`` each image belongs to, else None.
        cross_inputs: a cross-attention model's further inputs (``CROSS_ATTENTION_INPUTS`` of the
            batch: Llama 3.2 Vision's aspect ratios and cross-attention mask), else None.
    """

    tokens: torch.Tensor
    labels: torch.Tensor
    input_pos: torch.Tensor | None
    document_ids: torch.Tensor | None
    row_kinds: torch.Tensor | None = None
    margins: torch.Tensor | None = None
    pixel_values: torch.Tensor | None = None
    image_sample: torch.Tensor | None = None
    cross_inputs: dict[str, torch.Tensor] | None = None

    @property
    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        """The forward's inputs besides the tokens: ``model.hidden(batch.tokens, **batch.model_inputs)``.

        ``input_pos`` and ``mask`` (read once), and ``pixel_values`` only when the batch has images,
        so a text model's forward gets exactly what it takes and an image-text model gets its images
        (a cross-attention one also ``image_sample`` and ``cross_inputs``).
        """
        inputs = {"input_pos": self.input_pos, "mask": self.mask}
        if self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
        if self.cross_inputs:
            inputs.update(self.cross_inputs, image_sample=self.image_sample)
        return inputs

    @property
    def mask(self) -> torch.Tensor | None:
        """The attention mask (packed batches), built when read: read it once per forward."""
        return None if self.document_ids is None else packed_mask(self.document_ids)

    @property
    def rows(self) -> int:
        return self.tokens.shape[0]


def on_device(batch: dict[str, torch.Tensor], device: torch.device) -> MicroBatch:
    """Check a collated batch, move it to ``device`` and shift its labels (the one shift of the batch).

    Raises:
        KeyError: if ``tokens`` or ``labels`` is missing.
        ValueError: if their shapes differ.
    """
    if isinstance(batch, MicroBatch):
        return batch
    check_batch(batch)
    moved = {k: v.to(device, non_blocking=True) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    document_ids = moved.get("document_ids")
    return MicroBatch(
        moved["tokens"],
        shift_labels(moved["labels"], document_ids),
        moved.get("input_pos"),
        document_ids,
        moved.get("row_kinds"),
        moved.get("margin"),
        moved.get("pixel_values"),
        moved.get("image_sample"),
        {k: moved[k] for k in CROSS_ATTENTION_INPUTS if k in moved} or None,
    )


def per_token(batch: MicroBatch) -> torch.Tensor:
    """The step normaliser of token losses (SFT, KD): the batch's labelled tokens."""
    return (batch.labels != IGNORE_INDEX).sum()


def per_pair(batch: MicroBatch) -> torch.Tensor:
    """The step normaliser of pair losses (DPO): the batch's pairs (chosen rows, then rejected rows; or
    one packed row of chosen documents, then rejected ones, numbered 0, 1, ...: its last id + 1 over 2)."""
    if batch.document_ids is not None:
        return torch.div(batch.document_ids[:, -1] + 1, 2, rounding_mode="floor").sum()
    return torch.tensor(batch.rows // 2, device=batch.tokens.device)


def shift_labels(labels: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Align labels with the positions that predict them: ``out[:, t] = labels[:, t + 1]``.

    The hidden state at position ``t`` predicts token ``t + 1``. Shifting the labels (not the
    hidden states) keeps ``hidden`` contiguous; the last position gets the ignore index.

    Args:
        labels: ``[b, s]`` long, aligned with the tokens, ``-100`` where ignored.
        document_ids: ``[b, s]`` long for packed batches. Where position ``t + 1`` starts a new
            document, ``out[:, t]`` is ignored: a document's first token cannot be predicted from
            another document, so a packed batch trains on exactly the tokens the unpacked ones do.

    Returns:
        ``[b, s]`` long, the shifted labels.
    """
    ignore = labels.new_full((labels.shape[0], 1), IGNORE_INDEX)
    shifted = torch.cat([labels[:, 1:], ignore], dim=1)  # (b, s)
    if document_ids is not None:
        boundary = document_ids[:, 1:] != document_ids[:, :-1]  # (b, s - 1)
        shifted[:, :-1] = shifted[:, :-1].masked_fill(boundary, IGNORE_INDEX)
    return shifted


def labelled_positions(
    labels: torch.Tensor, *hiddens: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, ...]:
    """Keep only the positions that have a label: ``[b, s], [b, s, dim]... -> [1, n], [1, n, dim]...``.

    An ignored position adds nothing to a token loss or to its gradients, yet projecting it to the
    vocabulary is the largest matmul of a small model (SmolLM2-135M: 28M of its 134M multiply-adds
    a token, forward) and its log-softmax the largest element-wise op. With prompts masked, most
    positions are ignored (the demo data trains on 384 of 2048 tokens a step), so dropping them
    before the projection saves most of that work and most of the logits' memory.

    Args:
        labels: shifted labels ``[b, s]``, ``ignore_index`` where ignored.
        hiddens: final hidden states ``[b, s, dim]`` (several: a student's and a teacher's, cut with
            one index so they line up row for row).
        ignore_index: the label value of ignored positions.

    Returns:
        The labels and the labelled rows of each hidden tensor, in order, as one row of ``n`` tokens. When
        every position, or none, has a label, the inputs are returned unchanged (nothing to save,
        or nothing to keep: an all-ignored batch still gets a zero loss with a graph).
    """
    keep = (labels != ignore_index).reshape(-1)  # (b*s,)
    index = keep.nonzero().squeeze(1)  # (n,)
    if index.numel() in (0, keep.numel()):
        return (labels, *hiddens)
    rows = [
        h.reshape(-1, h.shape[-1]).index_select(0, index)[None] for h in hiddens
    ]  # (1, n, dim), contiguous
    return (labels.reshape(-1).index_select(0, index)[None], *rows)


def check_batch(batch: dict[str, Any]) -> None:
    """Check a collated batch has ``tokens`` and ``labels`` of one ``[b, s]`` shape.

    Args:
        batch: a collated batch.

    Raises:
        KeyError: if ``tokens`` or ``labels`` is missing.
        ValueError: if their shapes differ.
    """
    missing = [k for k in ("tokens", "labels") if k not in batch]
    if missing:
        raise KeyError(
            f"Batch is missing {missing}; it has keys {sorted(batch)}. A collated batch needs 'tokens' and "
            "'labels' ([b, s] long), plus 'input_pos' and 'document_ids' when packed."
        )
    if batch["tokens"].shape != batch["labels"].shape:
        raise ValueError(
            f"Batch 'tokens' {list(batch['tokens'].shape)} and 'labels' {list(batch['labels'].shape)} "
            "must have the same [b, s] shape."
        )


def real_tokens(batch: MicroBatch) -> torch.Tensor:
    """``[b, s]`` bool: the positions that hold a sample's tokens, False on right padding.

    A row's real tokens run up to the last token that is a label (the end of its last trained
    response, e.g. ``<|im_end|>``); what follows is padding (a padded row, or a pack's padding
    tail). A row with no label at all counts as real throughout (nothing tells its padding apart).

    Args:
        batch: a micro-batch, labels shifted (``labels[:, t]`` is the token at ``t + 1``).
    """
    labels = batch.labels
    labelled = labels != IGNORE_INDEX  # (b, s)
    positions = torch.arange(labels.shape[1], device=labels.device)  # (s,)
    last = torch.where(labelled, positions, -1).amax(dim=1)  # (b,) last labelled position, -1 if none
    end = torch.where(last < 0, labels.shape[1], last + 1)  # (b,) the last real token's position
    return positions[None, :] <= end[:, None]  # (b, s)


def packed_mask(document_ids: torch.Tensor) -> torch.Tensor | None:
    """The attention mask of a packed batch, built once for all layers; None when plain causal will do.

    When every row holds a single document, the document mask equals the causal mask, and None
    lets attention take its causal path (no ``[b, s, s]`` mask; on GPU, the flash kernels).

    Args:
        document_ids: ``[b, s]`` document index of each position.

    Returns:
        ``document_causal_mask(document_ids)``, or None when it is the causal mask.
    """
    if bool((document_ids == document_ids[:, :1]).all()):
        return None
    return document_causal_mask(document_ids)
