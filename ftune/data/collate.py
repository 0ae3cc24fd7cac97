"""Collate functions: a list of dataset items -> a batch dict of tensors.

A batch is {"tokens": [b, s] long, "labels": [b, s] long} plus, for packed data,
{"input_pos": [b, s] long, "document_ids": [b, s] long}. Labels are aligned with tokens
(the training step shifts them); CROSS_ENTROPY_IGNORE_IDX marks positions without loss.
`padding_free_collate` lays a batch's samples end to end in one packed row instead of padding them.
A preference batch holds chosen rows then rejected rows (`padded_collate_preference`); a KTO batch
holds completions then mismatched rows, each row's kind in "row_kinds" (`padded_collate_kto`).
Samples with images (`ftune.datasets.multimodal_chat_dataset`) are collated by `padded_collate_vision`
(which `padded_collate_sft` hands them to); `padding_free_collate` refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch

from ftune.config import instantiate

CROSS_ENTROPY_IGNORE_IDX = -100

PACKED_KEYS = ("tokens", "labels", "input_pos", "document_ids")


def _right_pad(rows: Sequence[Any], value: int, length: int) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        row = torch.as_tensor(row, dtype=torch.long)
        out[i, : row.numel()] = row
    return out


def _padded_length(lengths: Sequence[int], pad_to_multiple_of: int | None) -> int:
    length = max(lengths, default=0)
    if pad_to_multiple_of is not None:
        if pad_to_multiple_of <= 0:
            raise ValueError(f"pad_to_multiple_of must be a positive int or None, got {pad_to_multiple_of}.")
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    return length


def _aligned_lengths(batch: Sequence[dict[str, Any]], collate: str) -> list[int]:
    """Each item's length, refusing an item whose tokens and labels differ in length."""
    lengths = []
    for i, item in enumerate(batch):
        n_tok, n_lab = len(item["tokens"]), len(item["labels"])
        if n_tok != n_lab:
            raise ValueError(
                f"{collate}: item {i} has {n_tok} tokens but {n_lab} labels; tokens and labels "
                "must be aligned (same length) in every dataset item."
            )
        lengths.append(n_tok)
    return lengths


def padded_collate_sft(
    batch: Sequence[dict[str, Any]],
    pad_id: int,
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Right-pad a list of {"tokens", "labels"} items to the longest one.

    Packed items (with "input_pos" and "document_ids") are handed to `padded_collate_packed`,
    so a recipe can use this one collate for packed and unpacked data.

    Args:
        batch: items with "tokens" and "labels" (lists of ints or 1-D tensors of equal length per item).
        pad_id: token id written into padded token positions.
        ignore_idx: label written into padded label positions.
        pad_to_multiple_of: round the padded length up to a multiple of this (e.g. 8 for tensor cores).

    Returns:
        {"tokens": [b, s] long, "labels": [b, s] long}.

    Raises:
        ValueError: an item's tokens and labels differ in length, or `pad_to_multiple_of` is not positive.
    """
    if batch and "document_ids" in batch[0]:
        return padded_collate_packed(batch)
    if batch and "images" in batch[0]:
        return padded_collate_vision(batch, pad_id, ignore_idx, pad_to_multiple_of)
    length = _padded_length(_aligned_lengths(batch, "padded_collate_sft"), pad_to_multiple_of)
    return {
        "tokens": _right_pad([item["tokens"] for item in batch], pad_id, length),
        "labels": _right_pad([item["labels"] for item in batch], ignore_idx, length),
    }


def padded_collate_packed(batch: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Stack packed items (already padded to the pack length) into a batch.

    Args:
        batch: packed items with "tokens", "labels", "input_pos" and "document_ids" of equal length.

    Returns:
        {"tokens", "labels", "input_pos", "document_ids"}: each [b, s] long.

    Raises:
        ValueError: the items have different lengths (they were packed with different max_seq_len).
    """
    lengths = {len(item["tokens"]) for item in batch}
    if len(lengths) > 1:
        raise ValueError(
            f"padded_collate_packed: packed items have different lengths {sorted(lengths)}; every pack in "
            "a batch must have the same length (pack all datasets with the same max_seq_len)."
        )
    return {
        key: torch.stack([torch.as_tensor(item[key], dtype=torch.long) for item in batch])
        for key in PACKED_KEYS
    }


def padding_free_collate(batch: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Lay the samples of a batch end to end in one row, without padding (a batch packed on the fly).

    The row carries ``input_pos`` (restarting at 0 for every sample) and ``document_ids`` (the
    sample's index), so the model keeps every sample to itself and the loss skips each sample's
    first label, as for packed data: the loss and gradients equal those of the right-padded batch,
    but no compute goes to padding. On CPU, ftune's attention skips the blocks the document mask
    excludes, so attention costs what the samples cost alone. On a GPU, attention gets a dense
    ``(b * s)^2`` mask: there, prefer right padding (``collate_fn: null``) or ``dataset.packed``.
    Packed items (with "document_ids") are stacked as they are (`padded_collate_packed`), and
    samples of one length have no padding to save: they are stacked as ``[b, s]`` rows.

    Args:
        batch: items with "tokens" and "labels" (lists of ints or 1-D tensors of equal length per item).

    Returns:
        {"tokens", "labels", "input_pos", "document_ids"}: each [1, n] long, n = the samples' total
        length; or {"tokens", "labels"} [b, s] when every sample is s tokens long.

    Raises:
        ValueError: the batch is empty, or an item's tokens and labels differ in length.
    """
    if not batch:
        raise ValueError("padding_free_collate: got an empty batch; a batch needs at least one item.")
    if "document_ids" in batch[0]:
        return padded_collate_packed(batch)
    if "images" in batch[0]:
        raise ValueError(
            "padding_free_collate: the samples carry images, which one packed row of several samples cannot take "
            "(each image belongs to one sample). Set collate_fn=null (right padding: padded_collate_vision) or "
            "collate_fn={_component_: ftune.data.padded_collate_vision, _partial_: true}."
        )
    if len(set(_aligned_lengths(batch, "padding_free_collate"))) == 1:
        return padded_collate_sft(batch, pad_id=0)  # nothing to pad: no pad id is written
    rows: dict[str, list[torch.Tensor]] = {key: [] for key in PACKED_KEYS}
    for i, item in enumerate(batch):
        tokens = torch.as_tensor(item["tokens"], dtype=torch.long).reshape(-1)
        labels = torch.as_tensor(item["labels"], dtype=torch.long).reshape(-1)
        rows["tokens"].append(tokens)
        rows["labels"].append(labels)
        rows["input_pos"].append(torch.arange(tokens.numel()))
        rows["document_ids"].append(torch.full((tokens.numel(),), i, dtype=torch.long))
    return {key: torch.cat(parts)[None] for key, parts in rows.items()}


def padded_collate_vision(
    batch: Sequence[dict[str, Any]],
    pad_id: int,
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Right-pad the text of {"tokens", "labels", "images"} items and stack their images.

    A sample may hold any number of images (0, 1, 2, ...). The batch's images are concatenated along
    their first dimension in sample order, then prompt order, which is the order of their image tokens
    in the batch's rows: ``pixel_values`` is (n, 3, h, w), one row a crop or tile the vision tower
    encodes (Llama 3.2 Vision: one row an image, (n, max_tiles, 3, h, w)), and ``image_sample`` (n,) says
    which sample (row of ``tokens``) each belongs to. The family's further per-image inputs (Idefics3's
    ``pixel_attention_mask``, Llama 3.2 Vision's ``aspect_ratio_ids`` and ``aspect_ratio_mask``) are
    concatenated the same way. A batch without any image has none of these keys.

    Args:
        batch: items of `ftune.datasets.MultimodalSFTDataset` ("images": a list of `ImageInputs`).
        pad_id: token id written into padded token positions.
        ignore_idx: label written into padded label positions.
        pad_to_multiple_of: round the padded length up to a multiple of this.

    Returns:
        {"tokens": (b, s), "labels": (b, s)} and, when the batch has images, "pixel_values" (n, ...),
        "image_sample" (n,) long and the family's further per-image inputs; Llama 3.2 Vision also
        "cross_attention_mask" (b, s, most images of a sample, max_tiles), as transformers' processor pads it.

    Raises:
        ValueError: items whose images differ in their keys or in the shape of a tile.
    """
    out = padded_collate_sft(
        [{"tokens": item["tokens"], "labels": item["labels"]} for item in batch],
        pad_id,
        ignore_idx,
        pad_to_multiple_of,
    )
    images = [(i, image) for i, item in enumerate(batch) for image in item.get("images", ())]
    if not images:
        return out
    keys = {frozenset(image.extra) for _, image in images}
    shapes = {tuple(image.pixel_values.shape[1:]) for _, image in images}
    if len(keys) > 1 or len(shapes) > 1:
        raise ValueError(
            f"padded_collate_vision: the batch's images differ (extra inputs {sorted(map(sorted, keys))}, tile shapes "
            f"{sorted(shapes)}); every image of a batch must come from one image transform with one size."
        )
    out["pixel_values"] = torch.cat([image.pixel_values for _, image in images])
    out["image_sample"] = torch.cat(
        [torch.full((image.pixel_values.shape[0],), i, dtype=torch.long) for i, image in images]
    )
    for key in sorted(next(iter(keys))):
        out[key] = torch.cat([image.extra[key] for _, image in images])
    if "cross_attention_mask" in batch[0]:
        # (s_i, n_i, tiles) a sample -> (b, s, max n_i, tiles)
        masks = [item["cross_attention_mask"] for item in batch]
        length, tiles = out["tokens"].shape[1], masks[0].shape[-1]
        dense = torch.zeros(len(batch), length, max(m.shape[1] for m in masks), tiles, dtype=torch.long)
        for i, m in enumerate(masks):
            dense[i, : m.shape[0], : m.shape[1]] = m
            if 0 < m.shape[0] < length:  # padding attends as the last token does, as transformers pads it
                dense[i, m.shape[0] :, : m.shape[1]] = m[-1]
        out["cross_attention_mask"] = dense
    return out


def images_by_sample(values: torch.Tensor, image_sample: torch.Tensor, batch_size: int) -> torch.Tensor:
    """A batch's flat per-image rows regrouped by sample, as transformers' processors lay them out.

    Args:
        values: (n, ...) rows of `padded_collate_vision` (``pixel_values``, ``pixel_attention_mask``, ...).
        image_sample: (n,) the sample of each row.
        batch_size: the number of samples.

    Returns:
        (batch_size, most rows of a sample, ...): each sample's rows in order, then zeros.
    """
    counts = torch.bincount(image_sample, minlength=batch_size)  # (b,)
    out = values.new_zeros(batch_size, int(counts.max()) if counts.numel() else 0, *values.shape[1:])
    start = 0
    for i, n in enumerate(counts.tolist()):
        out[i, :n] = values[start : start + n]
        start += n
    return out


def padded_collate_preference(
    batch: Sequence[dict[str, Any]],
    pad_id: int,
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Collate preference pairs: chosen rows first, then rejected rows, right-padded together.

    Args:
        batch: items with "chosen_tokens", "chosen_labels", "rejected_tokens", "rejected_labels", and
            optionally "margin" (a float: a reward model's required margin; all items or none).
        pad_id: token id for padded positions.
        ignore_idx: label for padded positions.
        pad_to_multiple_of: round the padded length up to a multiple of this.

    Returns:
        {"tokens": [2b, s] long, "labels": [2b, s] long}: rows [0, b) are the chosen answers and
        rows [b, 2b) the rejected answers of the same pairs, in the same order; with margins, also
        {"margin": [b] fp32}. Pairs with images ("images": `ftune.datasets.image_preference_dataset`)
        give each row its pair's images (`padded_collate_vision`: "pixel_values", "image_sample"), so
        the chosen and the rejected answer are each scored after the same images.
    """
    rows = [_pair_row(item, "chosen") for item in batch]
    rows += [_pair_row(item, "rejected") for item in batch]
    out = padded_collate_sft(rows, pad_id, ignore_idx, pad_to_multiple_of)
    if batch and "margin" in batch[0]:
        out["margin"] = torch.tensor([float(item["margin"]) for item in batch], dtype=torch.float32)
    return out


def _pair_row(item: dict[str, Any], side: str) -> dict[str, Any]:
    row = {"tokens": item[f"{side}_tokens"], "labels": item[f"{side}_labels"]}
    if "images" in item:
        row["images"] = item["images"]
    return row


def padding_free_collate_preference(batch: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Lay a batch's preference pairs end to end in one row: the chosen answers, then the rejected ones.

    The rows of `padded_collate_preference`, in its order, laid out by `padding_free_collate`: document
    ``i`` of the row is pair i's chosen answer and document ``b + i`` its rejected one, so summing each
    document's log-probabilities gives the padded batch's per-row values, and no compute goes to
    padding. Pairs whose answers all have one length are stacked as the padded batch is.

    Args:
        batch: items with "chosen_tokens", "chosen_labels", "rejected_tokens", "rejected_labels".

    Returns:
        {"tokens", "labels", "input_pos", "document_ids"}: each [1, n] long (n: the 2b sequences'
        total length); or {"tokens", "labels"} [2b, s] when every sequence is s tokens long.
    """
    rows = [_pair_row(item, "chosen") for item in batch]
    rows += [_pair_row(item, "rejected") for item in batch]
    return padding_free_collate(rows)  # refuses pairs with images


# A KTO batch's row kinds (``row_kinds``, one value a row; ``MicroBatch.row_kinds``).
KTO_UNDESIRABLE, KTO_DESIRABLE, KTO_MISMATCHED = 0, 1, 2


def padded_collate_kto(
    batch: Sequence[dict[str, Any]],
    pad_id: int,
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Collate unpaired KTO items: b completions, then b mismatched rows for KTO's KL estimate.

    Row ``b + i`` is item i's prompt followed by item ``i - 1``'s completion (item 0 takes the last
    one's): TRL's KTOTrainer rotates the completions of each batch the same way, so the mismatched
    answers are the batch's own, each after another prompt. A batch of one (an epoch's last) pairs its
    completion with its own prompt, as TRL's rotation does; ``batch_size`` 1 is refused before the run
    (``ftune.cli.fast_check``), since every batch would be such.

    Args:
        batch: items with "prompt_tokens", "completion_tokens", "completion_labels" and "label" (bool).
        pad_id: token id for padded positions.
        ignore_idx: label for padded and prompt positions.
        pad_to_multiple_of: round the padded length up to a multiple of this.

    Returns:
        {"tokens", "labels"}: each ``[2b, s]`` long, and "row_kinds" ``[2b]``: each row's kind
        (``KTO_DESIRABLE`` / ``KTO_UNDESIRABLE`` for the completions, ``KTO_MISMATCHED`` after them).
    """
    rows, kinds = [], []
    for item in batch:
        prompt = list(item["prompt_tokens"])
        rows.append({"tokens": prompt + list(item["completion_tokens"]),
                     "labels": [ignore_idx] * len(prompt) + list(item["completion_labels"])})  # fmt: skip
        kinds.append(KTO_DESIRABLE if item["label"] else KTO_UNDESIRABLE)
    for i, item in enumerate(batch):
        other = batch[i - 1]  # i = 0 takes the last item's completion
        prompt = list(item["prompt_tokens"])
        rows.append({"tokens": prompt + list(other["completion_tokens"]),
                     "labels": [ignore_idx] * len(prompt) + list(other["completion_labels"])})  # fmt: skip
        kinds.append(KTO_MISMATCHED)
    out = padded_collate_sft(rows, pad_id, ignore_idx, pad_to_multiple_of)
    out["row_kinds"] = torch.tensor(kinds, dtype=torch.long)
    return out


def build_collate(node: Any, pad_id: int) -> Any:
    """The collate function: the config's ``collate_fn`` (a `_partial_` component taking the batch),
    or right padding with the tokenizer's pad id (packed samples are stacked as they are)."""
    if node is None:
        return partial(padded_collate_sft, pad_id=pad_id)
    return instantiate(node, _path="collate_fn")


def build_preference_collate(node: Any, pad_id: int) -> Any:
    """The collate function of a preference (DPO) recipe: the config's ``collate_fn``, or with the
    tokenizer's pad id `padded_collate_preference` (chosen rows, then rejected rows) for pairs and
    `padded_collate_kto` for unpaired KTO items (``ftune.datasets.kto_dataset``)."""
    if node is None:
        return partial(_collate_preference_or_kto, pad_id=pad_id)
    return instantiate(node, _path="collate_fn")


def _collate_preference_or_kto(batch: Sequence[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    if batch and "completion_tokens" in batch[0]:
        return padded_collate_kto(batch, pad_id)
    return padded_collate_preference(batch, pad_id)
