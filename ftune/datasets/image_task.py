"""A synthetic image task drawn with Pillow: colours, shapes, counts and positions, with a held-out split.

Each example is one image and one question about it, answered by one word, so exact match scores a
model: the colour of the shape, its kind (circle, square, triangle), how many shapes there are (1
to 4, one colour and kind), and whether the shape is on the left or the right. Shapes sit in the
cells of a 3 x 3 grid, in one of three sizes, on one of three greys. The questions take turns
(colour, count, position, shape, colour, ...), so every split asks each about as often.
Everything follows from the seed. No layout (question, colour, kind, cells, size and background) is
in both splits, so the held-out score is on images the model never saw.

`write_image_task` writes ``train.jsonl``, ``heldout.jsonl`` and the PNGs (``images/``) in the chat
layout `ftune.datasets.multimodal_chat_dataset` reads, and ``image_task.json``, the arguments they
were written for; `image_task_dataset` is the dataset component that writes them on first use and
refuses a folder written for other arguments (`ftune.config.image_task_manifest`). The same files
serve DPO (`image_task_preference_dataset`: the answer chosen, a wrong answer to the same question
rejected) and GRPO (`image_task_prompt_dataset`: the question, its answer in the ``answer`` field
for a reward such as ``ftune.rewards.ExactMatch``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from PIL import Image, ImageDraw

from ftune.config.image_task_manifest import (
    MANIFEST,
    check_manifest,
    mismatch_error,
    write_manifest,
)
from ftune.datasets.image_preference import ImagePreferenceDataset, image_preference_dataset
from ftune.datasets.image_prompts import ImagePromptDataset, image_prompt_dataset
from ftune.datasets.multimodal import MultimodalSFTDataset, multimodal_chat_dataset

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 70), "blue": (50, 80, 220), "yellow": (235, 200, 40)}
SHAPES = ("circle", "square", "triangle")
BACKGROUNDS = ((112, 112, 112), (128, 128, 128), (144, 144, 144))
MARGINS = (0.1, 0.17, 0.24)  # of a cell, on each side of a shape: three sizes
GRID = 3  # cells a side
QUESTIONS = {
    "colour": "What colour is the shape? Answer with one word.",
    "shape": "What shape is it: circle, square or triangle? Answer with one word.",
    "count": "How many shapes are there? Answer with a number.",
    "position": "Is the shape on the left or on the right? Answer with one word.",
}
SPLITS = {"train": "train.jsonl", "heldout": "heldout.jsonl"}
ANSWERS = {
    "colour": tuple(sorted(COLOURS)),
    "shape": SHAPES,
    "count": ("1", "2", "3", "4"),
    "position": ("left", "right"),
}


@dataclass(frozen=True)
class Layout:
    """What an image shows: shapes of one `colour` and `kind` in `cells` ((row, col) of the grid), of
    size `MARGINS[margin]` on `BACKGROUNDS[background]`; and the question asked of it (`task`)."""

    task: str
    colour: str
    kind: str
    cells: tuple[tuple[int, int], ...]
    margin: int = 1
    background: int = 1

    @property
    def answer(self) -> str:
        if self.task == "colour":
            return self.colour
        if self.task == "shape":
            return self.kind
        if self.task == "count":
            return str(len(self.cells))
        return "left" if self.cells[0][1] == 0 else "right"


def _layout(rng: random.Random, task: str) -> Layout:
    colour, kind = rng.choice(sorted(COLOURS)), rng.choice(SHAPES)
    every = [(r, c) for r in range(GRID) for c in range(GRID)]
    if task == "count":
        cells = tuple(sorted(rng.sample(every, rng.randint(1, 4))))
    elif task == "position":  # the left or the right column, never the middle one
        cells = ((rng.randrange(GRID), rng.choice((0, GRID - 1))),)
    else:
        cells = (rng.choice(every),)
    return Layout(task, colour, kind, cells, rng.randrange(len(MARGINS)), rng.randrange(len(BACKGROUNDS)))


def draw(layout: Layout, size: int = 64) -> Image.Image:
    """The image of `layout`: `size` pixels square, each shape inside its cell with a margin."""
    image = Image.new("RGB", (size, size), BACKGROUNDS[layout.background])
    pen = ImageDraw.Draw(image)
    cell = size / GRID
    fill, margin = COLOURS[layout.colour], MARGINS[layout.margin] * cell
    for row, col in layout.cells:
        x0, y0 = col * cell + margin, row * cell + margin
        x1, y1 = (col + 1) * cell - margin, (row + 1) * cell - margin
        if layout.kind == "circle":
            pen.ellipse((x0, y0, x1, y1), fill=fill)
        elif layout.kind == "square":
            pen.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            pen.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    return image


def image_task_layouts(n_train: int, n_heldout: int, seed: int = 0) -> dict[str, list[Layout]]:
    """The layouts of each split: drawn from `seed` in order, the questions taking turns, a layout
    seen before drawn again; the held-out split takes the first `n_heldout` layouts, training the
    next `n_train`.

    Raises:
        ValueError: a count below 0, or more layouts asked for than the task has.
    """
    if n_train < 0 or n_heldout < 0:
        raise ValueError(f"image task: n_train={n_train} and n_heldout={n_heldout} must be >= 0.")
    rng, seen, out, tasks = random.Random(seed), set(), [], sorted(QUESTIONS)
    for _ in range(50 * (n_train + n_heldout) + 1000):
        if len(out) == n_train + n_heldout:
            break
        layout = _layout(rng, tasks[len(out) % len(tasks)])
        if layout not in seen:
            seen.add(layout)
            out.append(layout)
    else:
        raise ValueError(
            f"image task: only {len(out)} distinct layouts were found for n_train={n_train} + "
            f"n_heldout={n_heldout}; ask for fewer examples."
        )
    return {"heldout": out[:n_heldout], "train": out[n_heldout:]}


def _record(layout: Layout, image: str) -> dict[str, Any]:
    question = [{"type": "image", "image": image}, {"type": "text", "text": QUESTIONS[layout.task]}]
    return {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": layout.answer},
        ],
        "task": layout.task,
        "answer": layout.answer,
    }


def write_image_task(
    out_dir: str | Path, *, n_train: int = 2000, n_heldout: int = 200, seed: int = 0, size: int = 64
) -> dict[str, Path]:
    """Write the task into `out_dir`: ``train.jsonl``, ``heldout.jsonl`` (one chat a line, its image by
    a path relative to the folder, plus ``task`` and ``answer``) and ``images/<split>_<i>.png``.

    Returns:
        {"train": path, "heldout": path}.
    """
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, layouts in image_task_layouts(n_train, n_heldout, seed).items():
        lines = []
        for i, layout in enumerate(layouts):
            name = f"images/{split}_{i}.png"
            draw(layout, size).save(out / name)
            lines.append(json.dumps(_record(layout, name)) + "\n")
        paths[split] = out / SPLITS[split]
        tmp = paths[split].with_suffix(".tmp")
        tmp.write_text("".join(lines))
        tmp.replace(paths[split])  # a complete file or none: the dataset writes when it is missing
    write_manifest(out, {"n_train": n_train, "n_heldout": n_heldout, "seed": seed, "size": size})  # last
    return paths


def _task_file(data_dir: str, split: str, args: dict[str, int], who: str) -> Path:
    """The split's file in `data_dir`, written first when the folder has none; refused when the folder
    was written for other arguments (its image_task.json, `ftune.config.image_task_manifest`).

    A folder written before the manifest existed is compared with what `args` write: the records of
    each split file (layouts follow from the counts and the seed, so no image is drawn) and the
    size of the first image. Equal, the manifest is added and the files are used; else refused.
    """
    if split not in SPLITS:
        raise ValueError(f"{who}: split={split!r} is not accepted; use 'train' or 'heldout'.")
    out, path = Path(data_dir), Path(data_dir) / SPLITS[split]
    if not check_manifest(out, args, who) and any((out / name).is_file() for name in SPLITS.values()):
        _adopt_unrecorded(out, args, who)
    if not path.is_file():
        write_image_task(data_dir, **args)
    return path


def _adopt_unrecorded(out: Path, args: dict[str, int], who: str) -> None:
    """Record `args` for a folder of task files without a manifest if they are what `args` write."""
    layouts = image_task_layouts(args["n_train"], args["n_heldout"], args["seed"])
    found, first_image = [], None
    for split, name in SPLITS.items():
        if not (out / name).is_file():
            continue
        try:
            written = [json.loads(line) for line in (out / name).read_text().splitlines() if line.strip()]
        except (json.JSONDecodeError, UnicodeDecodeError):
            written = None
        expected = [_record(layout, f"images/{split}_{i}.png") for i, layout in enumerate(layouts[split])]
        if written != expected:
            key = "n_train" if split == "train" else "n_heldout"
            count = "unreadable records" if written is None else f"{len(written)} records"
            found.append(f"{name} holds {count}, not the {len(expected)} that {who}.{key}={args[key]} and "
                         f"{who}.seed={args['seed']} write")  # fmt: skip
        elif written and first_image is None:
            first_image = out / written[0]["messages"][0]["content"][0]["image"]
    if not found and first_image is not None and first_image.is_file():
        with Image.open(first_image) as image:
            if image.size[0] != args["size"]:
                found.append(f"its images are {image.size[0]} pixels square, not {who}.size={args['size']}")
    if found:
        unrecorded = f"{'; '.join(found)} (the folder has no {MANIFEST}: an older ftune wrote it)"
        raise mismatch_error(out, args, unrecorded, who)
    write_manifest(out, args)


def image_task_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    image_transform: Any,
    split: Literal["train", "heldout"] = "train",
    max_seq_len: int | None = None,
    packed: bool = False,
    n_train: int = 2000,
    n_heldout: int = 200,
    seed: int = 0,
    size: int = 64,
) -> MultimodalSFTDataset:
    """The synthetic image task as a dataset component; writes it first if `data_dir` has no such split.

    Args:
        tokenizer: the vision model's tokenizer (passed positionally by the recipe).
        data_dir: folder of train.jsonl, heldout.jsonl and images/ (see `write_image_task`).
        image_transform: the family's transform or name (as `multimodal_chat_dataset` takes it).
        split: "train" or "heldout".
        max_seq_len: truncate each sample.
        packed: refused, as for every dataset with images.
        n_train, n_heldout, seed, size: what to write when the files are missing, and what the
            files found must have been written for (recorded in ``image_task.json``).

    Raises:
        ValueError: an unknown `split`; a `data_dir` written for other n_train, n_heldout, seed or
            size (its image_task.json: delete the folder or pass those); and what
            `multimodal_chat_dataset` raises.
    """
    args = {"n_train": n_train, "n_heldout": n_heldout, "seed": seed, "size": size}
    path = _task_file(data_dir, split, args, "image_task_dataset")
    return multimodal_chat_dataset(
        tokenizer, source=str(path), image_transform=image_transform, max_seq_len=max_seq_len, packed=packed
    )


def wrong_answer(task: str, answer: str) -> str:
    """A wrong answer to the question: the next of the task's answers after the right one (`ANSWERS`)."""
    options = ANSWERS[task]
    return options[(options.index(answer) + 1) % len(options)]


def _split_records(
    data_dir: str, split: str, n_train: int, n_heldout: int, seed: int, size: int, who: str
) -> tuple[Path, list[dict[str, Any]]]:
    """The split's file (written first if missing) and its records, each with the question only."""
    args = {"n_train": n_train, "n_heldout": n_heldout, "seed": seed, "size": size}
    path = _task_file(data_dir, split, args, who)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for record in records:
        record["messages"] = [m for m in record["messages"] if m["role"] != "assistant"]
    return path, records


def image_task_preference_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    image_transform: Any,
    split: Literal["train", "heldout"] = "train",
    max_seq_len: int | None = None,
    packed: bool = False,
    n_train: int = 2000,
    n_heldout: int = 200,
    seed: int = 0,
    size: int = 64,
) -> ImagePreferenceDataset:
    """The image task as preference pairs (DPO with images): each question's answer chosen, a wrong
    answer to it rejected (`wrong_answer`); writes the task first if `data_dir` has no such split.

    Args: as `image_task_dataset`'s.

    Raises:
        ValueError: an unknown `split` (and what `image_preference_dataset` raises).
    """
    path, records = _split_records(
        data_dir, split, n_train, n_heldout, seed, size, "image_task_preference_dataset"
    )
    for record in records:
        record["chosen"], record["rejected"] = (
            record["answer"],
            wrong_answer(record["task"], record["answer"]),
        )
    return image_preference_dataset(
        tokenizer,
        source=str(path),
        image_transform=image_transform,
        image_dir=str(path.parent),
        max_seq_len=max_seq_len,
        packed=packed,
        records=records,
    )


def image_task_prompt_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    image_transform: Any,
    split: Literal["train", "heldout"] = "train",
    n_train: int = 2000,
    n_heldout: int = 200,
    seed: int = 0,
    size: int = 64,
) -> ImagePromptDataset:
    """The image task's questions with their images (GRPO with images), each record's ``answer`` and
    ``task`` for the rewards; writes the task first if `data_dir` has no such split.

    Args: as `image_task_dataset`'s.

    Raises:
        ValueError: an unknown `split` (and what `image_prompt_dataset` raises).
    """
    path, records = _split_records(
        data_dir, split, n_train, n_heldout, seed, size, "image_task_prompt_dataset"
    )
    return image_prompt_dataset(
        tokenizer,
        source=str(path),
        image_transform=image_transform,
        image_dir=str(path.parent),
        records=records,
    )
