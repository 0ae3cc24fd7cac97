import pytest
import torch

from ftune.data import CROSS_ENTROPY_IGNORE_IDX
from ftune.data.collate import (
    padded_collate_packed,
    padded_collate_preference,
    padded_collate_sft,
    padding_free_collate,
)


def test_ignore_index_value():
    assert CROSS_ENTROPY_IGNORE_IDX == -100


def test_padded_collate_sft_right_pads_tokens_and_labels():
    batch = [
        {"tokens": [1, 2, 3], "labels": [-100, 2, 3]},
        {"tokens": [4], "labels": [4]},
    ]
    out = padded_collate_sft(batch, pad_id=0)
    assert out["tokens"].dtype == torch.long and out["labels"].dtype == torch.long
    assert out["tokens"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert out["labels"].tolist() == [[-100, 2, 3], [4, -100, -100]]


def test_padded_collate_sft_pad_to_multiple_and_custom_ignore():
    batch = [{"tokens": [1, 2, 3], "labels": [1, 2, 3]}, {"tokens": torch.tensor([5, 6]), "labels": [5, 6]}]
    out = padded_collate_sft(batch, pad_id=9, ignore_idx=-1, pad_to_multiple_of=4)
    assert out["tokens"].tolist() == [[1, 2, 3, 9], [5, 6, 9, 9]]
    assert out["labels"].tolist() == [[1, 2, 3, -1], [5, 6, -1, -1]]
    # already a multiple: no extra padding
    assert padded_collate_sft(batch, pad_id=9, pad_to_multiple_of=3)["tokens"].shape == (2, 3)


def test_padded_collate_sft_rejects_misaligned_item():
    with pytest.raises(
        ValueError, match="item 1 has 2 tokens but 1 labels; tokens and labels must be aligned"
    ):
        padded_collate_sft([{"tokens": [1], "labels": [1]}, {"tokens": [1, 2], "labels": [1]}], pad_id=0)


def test_padded_collate_sft_rejects_bad_multiple():
    with pytest.raises(ValueError, match="pad_to_multiple_of must be a positive int or None, got 0"):
        padded_collate_sft([{"tokens": [1], "labels": [1]}], pad_id=0, pad_to_multiple_of=0)


PACKED = [
    {"tokens": [1, 2, 0], "labels": [-100, 2, -100], "input_pos": [0, 1, 0], "document_ids": [0, 0, 1]},
    {"tokens": [3, 4, 5], "labels": [-100, -100, 5], "input_pos": [0, 0, 1], "document_ids": [0, 1, 1]},
]


def test_packed_collate_stacks_all_keys():
    out = padded_collate_packed(PACKED)
    assert set(out) == {"tokens", "labels", "input_pos", "document_ids"}
    assert out["document_ids"].tolist() == [[0, 0, 1], [0, 1, 1]]
    assert out["input_pos"].dtype == torch.long and out["input_pos"].shape == (2, 3)
    # the SFT collate hands packed items over, so a recipe needs one collate for both
    assert all(torch.equal(out[k], padded_collate_sft(PACKED, pad_id=0)[k]) for k in out)


def test_packed_collate_rejects_mixed_lengths():
    bad = [PACKED[0], {k: v[:2] for k, v in PACKED[1].items()}]
    with pytest.raises(ValueError, match=r"packed items have different lengths \[2, 3\]"):
        padded_collate_packed(bad)


def test_preference_collate_chosen_rows_then_rejected_rows():
    batch = [
        {
            "chosen_tokens": [1, 2],
            "chosen_labels": [-100, 2],
            "rejected_tokens": [1, 3, 3],
            "rejected_labels": [-100, 3, 3],
        },
        {"chosen_tokens": [4], "chosen_labels": [4], "rejected_tokens": [5], "rejected_labels": [5]},
    ]
    out = padded_collate_preference(batch, pad_id=0)
    assert out["tokens"].tolist() == [[1, 2, 0], [4, 0, 0], [1, 3, 3], [5, 0, 0]]
    assert out["labels"].tolist() == [[-100, 2, -100], [4, -100, -100], [-100, 3, 3], [5, -100, -100]]


def test_padding_free_collate_lays_samples_end_to_end():
    batch = [
        {"tokens": [1, 2, 3], "labels": [-100, 2, 3]},
        {"tokens": torch.tensor([4, 5]), "labels": [4, 5]},
    ]
    out = padding_free_collate(batch)
    assert {k: v.tolist() for k, v in out.items()} == {
        "tokens": [[1, 2, 3, 4, 5]],
        "labels": [[-100, 2, 3, 4, 5]],
        "input_pos": [[0, 1, 2, 0, 1]],
        "document_ids": [[0, 0, 0, 1, 1]],
    }
    assert all(v.dtype == torch.long for v in out.values())


def test_padding_free_collate_stacks_packed_items_and_names_bad_input():
    packed = {"tokens": [1, 2], "labels": [1, 2], "input_pos": [0, 0], "document_ids": [0, 1]}
    assert padding_free_collate([packed, packed])["tokens"].tolist() == [[1, 2], [1, 2]]
    same = padding_free_collate([{"tokens": [1, 2], "labels": [1, 2]}, {"tokens": [3, 4], "labels": [3, 4]}])
    assert {k: v.tolist() for k, v in same.items()} == {
        "tokens": [[1, 2], [3, 4]],
        "labels": [[1, 2], [3, 4]],
    }
    with pytest.raises(
        ValueError, match="item 1 has 2 tokens but 1 labels; tokens and labels must be aligned"
    ):
        padding_free_collate([{"tokens": [1], "labels": [1]}, {"tokens": [1, 2], "labels": [1]}])
    with pytest.raises(ValueError, match="got an empty batch"):
        padding_free_collate([])
