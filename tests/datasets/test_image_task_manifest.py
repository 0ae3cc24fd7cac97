"""An image task folder records what it was written for (image_task.json) and a dataset asking for
other sizes refuses it (ftune.config.image_task_manifest; the image task datasets call it)."""

import inspect
import json

import pytest

from ftune.config.image_task_manifest import ARGS, MANIFEST, read_manifest
from ftune.datasets import image_task as task
from ftune.datasets import image_task_prompt_dataset, write_image_task

SMALL = {"n_train": 4, "n_heldout": 2, "seed": 0, "size": 16}


def _files(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_the_datasets_defaults_are_the_recorded_arguments_defaults():
    for fn in (task.image_task_dataset, task.image_task_preference_dataset, task.image_task_prompt_dataset):
        params = inspect.signature(fn).parameters
        assert {key: params[key].default for key in ARGS} == ARGS, fn.__name__


def test_the_writer_records_its_arguments_and_the_same_ones_reuse_the_files(tmp_path):
    write_image_task(tmp_path, **SMALL)
    assert json.loads((tmp_path / MANIFEST).read_text()) == SMALL
    before = _files(tmp_path)
    assert task._task_file(str(tmp_path), "heldout", dict(SMALL), "dataset") == tmp_path / "heldout.jsonl"
    assert _files(tmp_path) == before


@pytest.mark.parametrize(("key", "value"), [("n_train", 6), ("n_heldout", 3), ("seed", 1), ("size", 32)])
def test_other_arguments_are_refused_naming_the_folder_the_key_and_both_values(tmp_path, key, value):
    write_image_task(tmp_path, **SMALL)
    before = _files(tmp_path)
    given = {**SMALL, key: value}
    with pytest.raises(ValueError) as e:
        image_task_prompt_dataset(None, data_dir=str(tmp_path), image_transform=None, **given)
    message = str(e.value)
    for part in (
        f"data_dir '{tmp_path}'",
        f"image_task_prompt_dataset.{key}={value} (recorded {SMALL[key]}) in its {MANIFEST}",
        "Delete the folder",
        f"image_task_prompt_dataset.{key}={value}",
    ):
        assert part in message, (part, message)
    assert _files(tmp_path) == before  # nothing rewritten


def test_a_folder_without_a_manifest_is_adopted_when_its_files_are_what_the_arguments_write(tmp_path):
    write_image_task(tmp_path, **SMALL)
    (tmp_path / MANIFEST).unlink()  # as an older ftune left it
    before = _files(tmp_path)
    task._task_file(str(tmp_path), "train", dict(SMALL), "dataset")
    assert read_manifest(tmp_path) == SMALL
    assert {k: v for k, v in _files(tmp_path).items() if k != MANIFEST} == before


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [
        (
            "n_train",
            6,
            "train.jsonl holds 4 records, not the 6 that dataset.n_train=6 and dataset.seed=0 write",
        ),
        ("seed", 2, "train.jsonl holds 4 records, not the 4 that dataset.n_train=4 and dataset.seed=2 write"),
        ("size", 32, "its images are 16 pixels square, not dataset.size=32"),
    ],
)
def test_a_folder_without_a_manifest_whose_files_differ_is_refused(tmp_path, key, value, found):
    write_image_task(tmp_path, **SMALL)
    (tmp_path / MANIFEST).unlink()
    before = _files(tmp_path)
    with pytest.raises(ValueError, match="holds files written for other arguments") as e:
        task._task_file(str(tmp_path), "train", {**SMALL, key: value}, "dataset")
    assert found in str(e.value) and f"no {MANIFEST}: an older ftune wrote it" in str(e.value)
    assert _files(tmp_path) == before  # no manifest guessed


def test_an_unreadable_manifest_is_refused_naming_it(tmp_path):
    write_image_task(tmp_path, **SMALL)
    (tmp_path / MANIFEST).write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"'{tmp_path / MANIFEST}' is not an image task record"):
        task._task_file(str(tmp_path), "train", dict(SMALL), "dataset")


def test_an_empty_folder_is_written_with_its_manifest(tmp_path):
    path = task._task_file(str(tmp_path / "new"), "train", dict(SMALL), "dataset")
    assert path.is_file() and read_manifest(tmp_path / "new") == SMALL
