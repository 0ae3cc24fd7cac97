"""Where a record's images come from, and the errors (file, row, image, fix) when one cannot be read."""

import base64

import pytest
import torch
from ftune_tests_vision_assets import drawn_image, png_bytes
from PIL import Image

from ftune.config.image_checks import ImageReadError, check_image_rows, image_sources, read_image
from ftune.data import ImageMessagesTransform, padded_collate_sft, padded_collate_vision, padding_free_collate
from ftune.data.image_messages import expand_placeholders
from ftune.data.image_ops import to_uint8
from ftune.data.image_transforms import ImageInputs


def _pixels(image: Image.Image) -> torch.Tensor:
    return to_uint8(image.convert("RGB"))


def test_every_source_gives_the_same_image(tmp_path):
    image = drawn_image(12, 7, "RGB", seed=3)
    data = png_bytes(image)
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(data)
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    sources = [
        "img/a.png",  # relative to the data file's folder
        str(tmp_path / "img" / "a.png"),
        uri,
        data,
        bytearray(data),
        {"bytes": data, "path": None},  # datasets' Image feature, decode=False
        {"bytes": None, "path": "img/a.png"},
        image,  # datasets' Image feature, decoded
    ]
    for value in sources:
        assert torch.equal(_pixels(read_image(value, tmp_path)), _pixels(image)), repr(value)[:40]


def test_unreadable_images_name_the_image_and_the_fix(tmp_path):
    with pytest.raises(
        ImageReadError, match=r"part: image file '.*nope.png' does not exist \(relative paths are read from"
    ):
        read_image("nope.png", tmp_path, "part")
    with pytest.raises(
        ImageReadError, match=r"part \(9 bytes\) cannot be decoded as an image \(UnidentifiedImageError"
    ):
        read_image(b"not a png", None, "part")
    truncated = png_bytes(drawn_image(40, 40, "RGB", seed=0))[:200]
    with pytest.raises(ImageReadError, match=r"cannot be decoded as an image \(OSError: .*truncated"):
        read_image(truncated, None, "part")
    with pytest.raises(
        ImageReadError, match=r"part is a int \(3\), not an image; give a local path, a data:image"
    ):
        read_image(3, None, "part")
    with pytest.raises(
        ImageReadError, match=r"part is a URL \('https://x/y.png'\); ftune reads images from local files"
    ):
        read_image("https://x/y.png", None, "part")
    with pytest.raises(ImageReadError, match=r"base64 payload is not valid base64"):
        read_image("data:image/png;base64,@@@", None, "part")
    with pytest.raises(ImageReadError, match=r"part is null, not an image"):
        read_image(None, None, "part")


def test_image_parts_take_their_own_image_or_the_next_of_the_images_column():
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image", "image": "b.png"}]},
            {"role": "user", "content": [{"type": "image", "text": None, "image": None}]},
        ],
        "images": ["a.png", "c.png"],
    }  # fmt: skip
    assert image_sources(record, "messages", "images") == [
        ("images[0] (for messages[0].content[0])", "a.png"),
        ("messages[0].content[2].image", "b.png"),
        ("images[1] (for messages[1].content[0])", "c.png"),
    ]
    with pytest.raises(
        ImageReadError, match=r"column 'images' has 3 image\(s\) but the messages have 2 image part"
    ):
        image_sources({**record, "images": ["a", "c", "d"]}, "messages", "images")
    with pytest.raises(ImageReadError, match=r"messages\[1\].content\[0\] is an image part without an image"):
        image_sources({**record, "images": ["a"]}, "messages", "images")


def test_check_image_rows_names_every_bad_row(tmp_path):
    good = tmp_path / "ok.png"
    good.write_bytes(png_bytes(drawn_image(4, 4, "RGB", seed=0)))
    rows = [
        (
            f"data.jsonl:{i}",
            {"messages": [{"role": "user", "content": [{"type": "image", "image": "ok.png"}]}]},
        )
        for i in (1, 2)
    ]
    assert check_image_rows(rows, "messages", "images", tmp_path, "data.jsonl") == 2
    bad = [
        (
            f"data.jsonl:{i}",
            {"messages": [{"role": "user", "content": [{"type": "image", "image": f"m{i}.png"}]}]},
        )
        for i in range(3, 10)
    ]
    with pytest.raises(ImageReadError) as e:
        check_image_rows(rows + bad, "messages", "images", tmp_path, "data.jsonl")
    text = str(e.value)
    assert text.startswith("Dataset data.jsonl: 7 record(s) have an image that cannot be read:")
    assert (
        "data.jsonl:3: messages[0].content[0].image: image file" in text and "m3.png' does not exist" in text
    )
    assert "... and 2 more record(s) like these" in text


def test_messages_with_image_parts_become_text_with_the_placeholder():
    transform = ImageMessagesTransform("<image>", train_on_input=False, new_system_prompt="Be brief.")
    record = {
        "messages": [
            {"role": "system", "content": "old"},
            {"role": "user", "content": [{"type": "text", "text": "Look "}, {"type": "image", "image": b""}, {"type": "text", "text": " now"}]},
            {"role": "assistant", "content": "A disc."},
        ]
    }  # fmt: skip
    messages = transform.messages(record)
    assert [(m.role, m.content, m.masked) for m in messages] == [
        ("system", "Be brief.", True),
        ("user", "Look <image> now", True),
        ("assistant", "A disc.", False),
    ]
    with pytest.raises(
        ValueError, match=r"messages\[0\].content\[0\] is a part of type 'audio'; accepted parts are"
    ):
        transform.messages({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})
    with pytest.raises(KeyError, match="column 'messages' is not in the record"):
        transform.messages({"conversations": []})


def test_expand_placeholders_counts_images():
    assert expand_placeholders("a<i>b<i>", "<i>", ["X", "Y"]) == "aXbY"
    with pytest.raises(
        ValueError, match=r"The prompt has 1 image placeholder\(s\) '<i>' but 2 image\(s\) were given"
    ):
        expand_placeholders("a<i>b", "<i>", ["X", "Y"])


def _item(tokens: list[int], n_tiles: list[int]) -> dict:
    images = [
        ImageInputs(
            torch.full((n, 3, 2, 2), float(n)),
            "",
            {"pixel_attention_mask": torch.ones(n, 2, 2, dtype=torch.long)},
        )
        for n in n_tiles
    ]
    return {"tokens": tokens, "labels": tokens, "images": images}


def test_collate_stacks_zero_one_or_two_images_a_sample():
    batch = padded_collate_vision([_item([1, 2], [2, 1]), _item([3], []), _item([4, 5, 6], [3])], pad_id=0)
    assert batch["tokens"].tolist() == [[1, 2, 0], [3, 0, 0], [4, 5, 6]]
    assert batch["pixel_values"].shape == (6, 3, 2, 2)
    assert batch["image_sample"].tolist() == [0, 0, 0, 2, 2, 2]
    assert batch["pixel_values"][:, 0, 0, 0].tolist() == [2, 2, 1, 3, 3, 3]
    assert batch["pixel_attention_mask"].shape == (6, 2, 2)
    text_only = padded_collate_vision([_item([1], []), _item([2, 3], [])], pad_id=0)
    assert set(text_only) == {"tokens", "labels"}
    odd = _item([1], [1])
    odd["images"][0].pixel_values = torch.zeros(1, 3, 4, 4)
    with pytest.raises(
        ValueError,
        match=r"padded_collate_vision: the batch's images differ .* tile shapes \[\(3, 2, 2\), \(3, 4, 4\)\]",
    ):
        padded_collate_vision([_item([1], [1]), odd], pad_id=0)


def test_the_default_collate_hands_images_on_and_padding_free_refuses_them():
    items = [_item([1, 2], [1]), _item([3], [])]
    assert padded_collate_sft(items, pad_id=0).keys() == padded_collate_vision(items, pad_id=0).keys()
    assert "pixel_values" in padded_collate_sft(items, pad_id=0)
    with pytest.raises(
        ValueError, match=r"padding_free_collate: the samples carry images, .* Set collate_fn=null"
    ):
        padding_free_collate(items)
