"""The Cauldron (HuggingFaceM4/the_cauldron): 50 image-text subsets in one layout, the dataset of
torchtune's Llama 3.2 Vision configs (`torchtune.datasets.multimodal.the_cauldron_dataset`).

A row holds `images` (a list) and `texts`, a list of {"user", "assistant", "source"} turns. As
torchtune lays it out, every image of the row goes at the start of the first user turn, then the
turns follow in order; the assistant turns are trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ftune.config.image_checks import check_image_rows
from ftune.data.image_messages import ImageMessagesTransform
from ftune.datasets.multimodal import MultimodalSFTDataset, image_transform_of
from ftune.datasets.sft import check_columns
from ftune.datasets.source import load_source
from ftune.tokenizers import Tokenizer

SOURCE = "HuggingFaceM4/the_cauldron"


def cauldron_messages(row: Mapping[str, Any]) -> dict[str, Any]:
    """A Cauldron row -> {"messages": [...], "images": [...]} (`ImageMessagesTransform`'s layout)."""
    images = list(row.get("images") or [])
    messages: list[dict[str, Any]] = []
    for i, turn in enumerate(row["texts"]):
        first = [{"type": "image"} for _ in images] if i == 0 else []
        messages.append({"role": "user", "content": [*first, {"type": "text", "text": turn["user"]}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": turn["assistant"]}]})
    return {"messages": messages, "images": images}


class CauldronRecords(Sequence):
    """The rows of a Cauldron subset as conversations, converted on access."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        return cauldron_messages(self.rows[i])


def the_cauldron_dataset(
    tokenizer: Tokenizer,
    *,
    subset: str,
    image_transform: Any = "mllama",
    source: str = SOURCE,
    split: str = "train",
    train_on_input: bool = False,
    max_seq_len: int | None = None,
    packed: bool = False,
) -> MultimodalSFTDataset:
    """One subset of The Cauldron as image chats.

    Args:
        tokenizer: the vision model's tokenizer (passed positionally by the recipe).
        subset: the Cauldron configuration, e.g. "ocrvqa" (torchtune's `subset`).
        image_transform: the family's transform or family name (default: Llama 3.2 Vision's).
        source: the hub id or a local copy (a folder or file with `images` and `texts` columns).
        split: split to load.
        train_on_input: also train on the user turns.
        max_seq_len: truncate each sample (a cut through an image's tokens is refused).
        packed: refused: samples with images are never packed.

    Returns:
        A `MultimodalSFTDataset` (collate with `ftune.data.padded_collate_vision`).

    Raises:
        ValueError: packed=True, a missing column, or an unreadable image (row named).
    """
    if packed:
        raise ValueError(
            f"the_cauldron_dataset (subset {subset!r}): packed=True is not supported with images; set "
            "dataset.packed=false."
        )
    transform = image_transform_of(image_transform)
    rows = load_source(source, split=split, name=subset)
    check_columns(rows, ["images", "texts"], "the_cauldron_dataset", source)
    records = CauldronRecords(rows)
    messages = ImageMessagesTransform(transform.placeholder, train_on_input=train_on_input)
    check_image_rows(
        ((f"{source}/{subset} row {i + 1}", records[i]) for i in range(len(records))),
        "messages",
        "images",
        None,
        source,
    )
    return MultimodalSFTDataset(
        records, tokenizer, messages, transform, max_seq_len=max_seq_len, source=f"{source}/{subset}"
    )
