"""The Cauldron (torchtune's Llama 3.2 Vision dataset): a row's images go at the start of its first
user turn, every assistant turn is trained, the tiles and cross-attention mask are Llama 3.2 Vision's."""

import pytest
from ftune_tests_vision_assets import drawn_image, vlm_tokenizer_folder

import ftune.datasets.the_cauldron as cauldron
from ftune.data import CROSS_ENTROPY_IGNORE_IDX, MllamaImageTransform, padded_collate_vision
from ftune.tokenizers import HFTokenizer

ROWS = [
    {"images": [drawn_image(20, 12, "RGB", seed=0)], "texts": [{"user": "What is drawn?", "assistant": "A disc.", "source": "t"}]},
    {
        "images": [drawn_image(9, 30, "RGB", seed=1), drawn_image(16, 16, "RGB", seed=2)],
        "texts": [{"user": "Two?", "assistant": "Yes.", "source": "t"}, {"user": "Colour?", "assistant": "Red.", "source": "t"}],
    },
]  # fmt: skip


def test_a_row_becomes_a_chat_with_its_images_first() -> None:
    record = cauldron.cauldron_messages(ROWS[1])
    first, answer, second = record["messages"][:3]
    assert [p["type"] for p in first["content"]] == ["image", "image", "text"]
    assert answer == {"role": "assistant", "content": [{"type": "text", "text": "Yes."}]}
    assert second["content"] == [{"type": "text", "text": "Colour?"}]
    assert record["images"] == ROWS[1]["images"]


def test_the_dataset_tiles_and_masks_as_llama_3_2_vision(tmp_path, monkeypatch) -> None:
    seen = {}

    def rows(source, *, split, name):
        seen.update(source=source, split=split, name=name)
        return ROWS

    monkeypatch.setattr(cauldron, "load_source", rows)
    tokenizer = HFTokenizer(vlm_tokenizer_folder(tmp_path / "tok", "mllama"))
    data = cauldron.the_cauldron_dataset(
        tokenizer, subset="ocrvqa", image_transform=MllamaImageTransform(tile_size=8)
    )
    assert seen == {"source": "HuggingFaceM4/the_cauldron", "split": "train", "name": "ocrvqa"}
    image_id = tokenizer.token_to_id("<|image|>")
    batch = padded_collate_vision([data[0], data[1]], tokenizer.pad_id)
    assert (batch["tokens"] == image_id).sum(1).tolist() == [1, 2]
    assert batch["pixel_values"].shape == (3, 4, 3, 8, 8) and batch["image_sample"].tolist() == [0, 1, 1]
    assert batch["cross_attention_mask"].shape[2:] == (2, 4)
    trained = [
        tokenizer.decode(
            [t for t, lab in zip(data[1]["tokens"], data[1]["labels"]) if lab != CROSS_ENTROPY_IGNORE_IDX]
        )
    ]
    assert "Yes." in trained[0] and "Red." in trained[0] and "Colour?" not in trained[0]


def test_packing_is_refused() -> None:
    with pytest.raises(
        ValueError, match="packed=True is not supported with images; set dataset.packed=false"
    ):
        cauldron.the_cauldron_dataset(None, subset="ocrvqa", packed=True)
