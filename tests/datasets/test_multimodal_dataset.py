"""The multimodal chat dataset: images from json paths, parquet bytes and datasets' Image feature; the
collate of 0, 1 and 2 images a sample; packing refused; unreadable images refused before the model loads."""

import json
import subprocess
import sys

import pytest
import torch
from ftune_tests_vision_assets import drawn_image, png_bytes, vlm_tokenizer_folder

from ftune.cli.fast_check import check_data_files
from ftune.config import load_config
from ftune.config.image_checks import ImageReadError
from ftune.data import CROSS_ENTROPY_IGNORE_IDX, Idefics3ImageTransform, padded_collate_vision
from ftune.datasets import multimodal_chat_dataset
from ftune.tokenizers import HFTokenizer

IMAGE_COUNTS = (0, 1, 2)


def _records(images: list[list[object]]) -> list[dict]:
    """One record a list of images: a user turn with an image part for each, and an answer."""
    out = []
    for i, row in enumerate(images):
        parts = [{"type": "image"} for _ in row] + [{"type": "text", "text": f"How many shapes? ({i})"}]
        out.append({
            "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": [{"type": "text", "text": f"{len(row)} images."}]}],
            "images": row,
        })  # fmt: skip
    return out


@pytest.fixture
def setup(tmp_path):
    pictures = [drawn_image(20 + 9 * i, 30 - 4 * i, "RGB", seed=i) for i in range(3)]
    (tmp_path / "img").mkdir()
    for i, picture in enumerate(pictures):
        (tmp_path / "img" / f"{i}.png").write_bytes(png_bytes(picture))
    tokenizer = HFTokenizer(vlm_tokenizer_folder(tmp_path / "tok", "idefics3"))
    transform = Idefics3ImageTransform(longest_edge=32, tile_size=16, image_seq_len=2)
    return tmp_path, pictures, tokenizer, transform


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_json_paths_parquet_bytes_and_the_image_feature_give_the_same_samples(setup):
    tmp_path, pictures, tokenizer, transform = setup
    paths = [[], ["img/0.png"], ["img/1.png", "img/2.png"]]
    data = _jsonl(tmp_path / "train.jsonl", _records(paths))
    from_json = multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform)

    import datasets  # the test writes parquet the way `datasets` stores images

    blobs = [[png_bytes(pictures[int(p[4])]) for p in row] for row in paths]
    datasets.Dataset.from_list(_records(blobs)).to_parquet(str(tmp_path / "bytes.parquet"))
    from_bytes = multimodal_chat_dataset(
        tokenizer, source=str(tmp_path / "bytes.parquet"), image_transform=transform
    )
    feature = datasets.Dataset.from_list(_records([[pictures[int(p[4])] for p in row] for row in paths]))
    feature = feature.cast_column("images", datasets.Sequence(datasets.Image()))
    feature.to_parquet(str(tmp_path / "feature.parquet"))
    from_feature = multimodal_chat_dataset(
        tokenizer, source=str(tmp_path / "feature.parquet"), image_transform=transform
    )

    for i, n in enumerate(IMAGE_COUNTS):
        a, b, c = from_json[i], from_bytes[i], from_feature[i]
        assert a["tokens"] == b["tokens"] == c["tokens"]
        assert len(a["images"]) == len(b["images"]) == len(c["images"]) == n
        for x, y, z in zip(a["images"], b["images"], c["images"]):
            assert torch.equal(x.pixel_values, y.pixel_values) and torch.equal(x.pixel_values, z.pixel_values)
        image_id = tokenizer.token_to_id("<image>")
        assert a["tokens"].count(image_id) == 2 * sum(x.pixel_values.shape[0] for x in a["images"])
        assert all(
            label == CROSS_ENTROPY_IGNORE_IDX for t, label in zip(a["tokens"], a["labels"]) if t == image_id
        )
        assert (
            tokenizer.decode([t for t, label in zip(a["tokens"], a["labels"]) if label >= 0])
            .strip()
            .endswith(f"{n} images.")
        )

    batch = padded_collate_vision([from_json[i] for i in range(3)], pad_id=tokenizer.pad_id)
    tiles = [x.pixel_values.shape[0] for i in range(3) for x in from_json[i]["images"]]
    assert batch["pixel_values"].shape == (sum(tiles), 3, 16, 16)
    assert batch["image_sample"].tolist() == [1] * tiles[0] + [2] * (tiles[1] + tiles[2])
    assert batch["tokens"].shape[0] == 3 and batch["pixel_attention_mask"].shape == (sum(tiles), 16, 16)


def test_packing_and_cut_images_are_refused(setup):
    tmp_path, _, tokenizer, transform = setup
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/0.png"]]))
    with pytest.raises(
        ValueError, match=r"packed=True is not supported with images .* set dataset.packed=false"
    ):
        multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform, packed=True)
    with pytest.raises(
        ValueError, match=r"image_transform='clip' is not a model family with an image transform"
    ):
        multimodal_chat_dataset(tokenizer, source=str(data), image_transform="clip")
    short = multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform, max_seq_len=8)
    with pytest.raises(
        ValueError,
        match=r"row 1: the sample is \d+ tokens and max_seq_len=8 \(of the dataset or the tokenizer\) would cut through",
    ):
        short[0]
    full = multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform)[0]
    cut = multimodal_chat_dataset(
        tokenizer, source=str(data), image_transform=transform, max_seq_len=len(full["tokens"]) - 2
    )
    assert cut[0]["tokens"] == full["tokens"][:-2]


def test_a_tokenizer_without_the_image_token_is_refused(setup, tokenizer):
    tmp_path, _, _, transform = setup
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/0.png"]]))
    with pytest.raises(
        ValueError,
        match=r"encodes the image placeholder '<image>' as \d+ tokens .* must be one special token",
    ):
        multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform)


def test_an_unreadable_image_is_refused_when_the_dataset_loads(setup):
    tmp_path, _, tokenizer, transform = setup
    (tmp_path / "img" / "bad.png").write_bytes(b"\x89PNG broken")
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/0.png"], ["img/gone.png"], ["img/bad.png"]]))
    with pytest.raises(ImageReadError) as e:
        multimodal_chat_dataset(tokenizer, source=str(data), image_transform=transform)
    assert f"{data}:2: images[0] (for messages[0].content[0]): image file" in str(e.value)
    assert f"{data}:3: images[0] (for messages[0].content[0]): image file" in str(e.value)
    assert (
        "bad.png' cannot be decoded as an image (UnidentifiedImageError: no image format Pillow knows)"
        in str(e.value)
    )


def _config(source, *more):
    overrides = [
        "~dataset",
        "dataset._component_=ftune.datasets.multimodal_chat_dataset",
        f"dataset.source={source}",
        *more,
    ]
    return load_config("smollm2/135M_lora", overrides)


def test_ftune_run_reads_every_image_before_the_model_loads(setup):
    tmp_path, _, _, _ = setup
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/0.png"], ["img/1.png", "img/none.png"]]))
    with pytest.raises(
        ImageReadError, match=rf"{data}:2: images\[1\] \(for messages\[0\].content\[1\]\): image file"
    ):
        check_data_files(_config(data))
    beside = _jsonl(
        tmp_path / "beside.jsonl", [{**r, "pics": r.pop("images")} for r in _records([["0.png"]])]
    )
    check_data_files(
        _config(beside, f"dataset.image_dir={tmp_path}/img", "dataset.column_map={images: pics}")
    )

    import datasets

    datasets.Dataset.from_list(_records([[b"junk"]])).to_parquet(str(tmp_path / "b.parquet"))
    with pytest.raises(ImageReadError, match=r"b.parquet row 1: images\[0\] .*\(4 bytes\) cannot be decoded"):
        check_data_files(_config(tmp_path / "b.parquet"))


def test_the_image_check_runs_without_torch(setup):
    tmp_path, _, _, _ = setup
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/missing.png"]]))
    script = (
        "import sys\n"
        "from ftune.cli.fast_check import check_data_files\n"
        "from ftune.config import load_config\n"
        "cfg = load_config('smollm2/135M_lora', ['dataset._component_=ftune.datasets.multimodal_chat_dataset', "
        f"'dataset.source={data}'])\n"
        "try:\n    check_data_files(cfg)\nexcept ValueError as e:\n    print('refused:', e)\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: Dataset" in out.stdout and "missing.png' does not exist" in out.stdout


def test_without_images_the_layout_is_the_text_paths(setup):
    """Rendered, then tokenized message by message: the ids and the mask of `tokenize_messages`."""
    _, _, tokenizer, transform = setup
    from ftune.data import ImageMessagesTransform
    from ftune.datasets import MultimodalSFTDataset

    records = _records([[]]) + [
        {"messages": [{"role": "system", "content": "Count.\n\n"}, *_records([[]])[0]["messages"]]}
    ]
    data = MultimodalSFTDataset(records, tokenizer, ImageMessagesTransform("<image>"), transform)
    for i, record in enumerate(records):
        tokens, mask = tokenizer.tokenize_messages(
            ImageMessagesTransform("<image>").messages(record), add_eos=True
        )
        assert data[i]["tokens"] == tokens
        assert data[i]["labels"] == [CROSS_ENTROPY_IGNORE_IDX if m else t for t, m in zip(tokens, mask)]


def test_a_prompt_format_tokenizer_gets_the_image_tokens_spliced_in(setup):
    tmp_path, pictures, _, transform = setup
    from ftune.data import ImageMessagesTransform
    from ftune.datasets import MultimodalSFTDataset
    from ftune.tokenizers import ChatMLFormat

    tokenizer = HFTokenizer(vlm_tokenizer_folder(tmp_path / "tok2", "idefics3"), prompt_format=ChatMLFormat())
    records = _records([[png_bytes(pictures[0]), png_bytes(pictures[1])]])
    item = MultimodalSFTDataset(records, tokenizer, ImageMessagesTransform("<image>"), transform)[0]
    expected = [transform(p) for p in pictures[:2]]
    texts = [tokenizer.encode(x.text, add_bos=False, add_eos=False) for x in expected]
    flat = item["tokens"]
    at = next(i for i in range(len(flat)) if flat[i : i + len(texts[0])] == texts[0])
    assert flat[at + len(texts[0]) : at + len(texts[0]) + len(texts[1])] == texts[1]
    assert all(
        label == CROSS_ENTROPY_IGNORE_IDX for label in item["labels"][at : at + len(texts[0]) + len(texts[1])]
    )


def test_a_placeholder_typed_in_the_text_is_refused_with_its_row(setup):
    _, pictures, tokenizer, transform = setup
    from ftune.data import ImageMessagesTransform
    from ftune.datasets import MultimodalSFTDataset

    records = _records([[png_bytes(pictures[0])]])
    records[0]["messages"][0]["content"].append({"type": "text", "text": " see <image>"})
    data = MultimodalSFTDataset(
        records, tokenizer, ImageMessagesTransform("<image>"), transform, source="mine.jsonl"
    )
    with pytest.raises(
        ValueError,
        match=r"mine.jsonl row 1: the rendered conversation has 2 image placeholder\(s\) '<image>' but",
    ):
        data[0]


def test_a_config_builds_the_dataset_with_its_transform_component(setup):
    """The YAML surface: the image transform as a nested component with its sizes, or a family name."""
    from ftune.config import instantiate

    tmp_path, _, tokenizer, _ = setup
    data = _jsonl(tmp_path / "train.jsonl", _records([["img/0.png"]]))
    transform = (
        "{_component_: ftune.data.Idefics3ImageTransform, longest_edge: 32, tile_size: 16, image_seq_len: 2}"
    )
    cfg = _config(data, f"dataset.image_transform={transform}", "dataset.max_seq_len=512")
    item = instantiate(cfg.dataset, tokenizer, _path="dataset")[0]
    assert (
        item["tokens"].count(tokenizer.token_to_id("<image>")) == 2 * item["images"][0].pixel_values.shape[0]
    )
    assert item["images"][0].pixel_values.shape[-1] == 16
