"""The synthetic image task (ftune.datasets.image_task): the same seed writes the same files, the
splits share no layout, the questions take turns, and every answer is what the pixels show."""

import json

import pytest
import torch
from ftune_tests_vision_assets import vlm_tokenizer_folder
from PIL import Image

from ftune.data import Idefics3ImageTransform
from ftune.datasets import image_task_dataset, write_image_task
from ftune.datasets.image_task import COLOURS, GRID, QUESTIONS, image_task_layouts
from ftune.tokenizers import HFTokenizer

SIZE = 64


def _files(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_the_same_seed_writes_the_same_files_and_another_seed_others(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write_image_task(tmp_path / name, n_train=24, n_heldout=8, seed=seed, size=SIZE)
    a, b, c = (_files(tmp_path / n) for n in "abc")
    assert a == b and len(a) == 3 + 24 + 8  # the two splits, image_task.json, the images
    assert a.keys() == c.keys() and a["train.jsonl"] != c["train.jsonl"]


def test_the_splits_share_no_layout_and_the_questions_take_turns():
    layouts = image_task_layouts(n_train=400, n_heldout=100, seed=3)
    train, heldout = layouts["train"], layouts["heldout"]
    assert len(train) == 400 and len(heldout) == 100 and not set(train) & set(heldout)
    assert len(set(train)) == 400
    for split in (train, heldout):
        assert {t: sum(x.task == t for x in split) for t in QUESTIONS} == dict.fromkeys(
            QUESTIONS, len(split) // 4
        )


def _read(pixels: torch.Tensor) -> dict[str, str]:
    """What the image shows, read from its pixels: the shapes are coloured, the background grey."""
    shape = (pixels.amax(-1) - pixels.amin(-1)) > 40  # (h, w): not grey
    ys, xs = shape.nonzero(as_tuple=True)
    mean = pixels[shape].mean(0)
    colour = min(COLOURS, key=lambda c: float((mean - torch.tensor(COLOURS[c], dtype=torch.float)).norm()))
    cell = SIZE / GRID
    cells = {(int(y // cell), int(x // cell)) for y, x in zip(ys.tolist(), xs.tolist())}
    box = shape[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
    fill = box.float().mean().item()  # one shape: circle pi/4, square 1, triangle 1/2
    kind = min({"circle": 0.785, "square": 1.0, "triangle": 0.5}.items(), key=lambda kv: abs(kv[1] - fill))[0]
    return {
        "colour": colour,
        "count": str(len(cells)),
        "position": "left" if xs.float().mean() < SIZE / 2 else "right",
        "shape": kind,
    }


def test_every_answer_is_what_the_pixels_show(tmp_path):
    paths = write_image_task(tmp_path, n_train=80, n_heldout=40, seed=0, size=SIZE)
    checked = 0
    for split in ("train", "heldout"):
        for line in paths[split].read_text().splitlines():
            record = json.loads(line)
            user, answer = record["messages"]
            image_part, question = user["content"]
            assert question["text"] == QUESTIONS[record["task"]] and answer["content"] == record["answer"]
            with Image.open(tmp_path / image_part["image"]) as image:
                pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).float()
            seen = _read(pixels.reshape(SIZE, SIZE, 3))
            assert seen[record["task"]] == record["answer"], (image_part["image"], record, seen)
            checked += 1
    assert checked == 120


def test_the_dataset_writes_the_task_on_first_use_and_reads_its_images(tmp_path):
    tokenizer = HFTokenizer(vlm_tokenizer_folder(tmp_path / "tok", "idefics3"))
    transform = Idefics3ImageTransform(longest_edge=32, tile_size=16, image_seq_len=2)
    data = tmp_path / "task"
    heldout = image_task_dataset(
        tokenizer, data_dir=str(data), image_transform=transform, split="heldout", n_train=8, n_heldout=4
    )
    assert (data / "train.jsonl").is_file() and len(heldout) == 4
    assert all(len(heldout[i]["images"]) == 1 for i in range(4))
    with pytest.raises(ValueError, match="split='test' is not accepted"):
        image_task_dataset(tokenizer, data_dir=str(data), image_transform=transform, split="test")
