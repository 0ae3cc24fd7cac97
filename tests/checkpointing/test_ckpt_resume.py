"""The checkpointer contract on full runs: step folders, resume auto/path/None, crashes, pruning."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ckpt_tiny_hf import assert_same_tensors, write_hf_folder

from ftune.checkpointing import HFCheckpointer, atomic, find_latest_complete


def _trained(state: dict, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in state.items()}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_hf_folder(tmp_path / "in", "llama3", shards=2)


def test_resume_auto_path_and_none(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    base = HFCheckpointer(src, out).load().model
    fresh = HFCheckpointer(src, out, resume_from_checkpoint="auto").load()  # nothing saved yet
    assert fresh.step_dir is None and fresh.recipe_state is None
    assert_same_tensors(fresh.model, base)

    ckpt = HFCheckpointer(src, out)
    w1, w2 = _trained(base, 1), _trained(base, 2)
    ckpt.save(1, w1, recipe_state={"step": 1, "epoch": 0}, epoch=0)
    ckpt.save(2, w2, recipe_state={"step": 2, "epoch": 0}, epoch=0)

    auto = HFCheckpointer(src, out, resume_from_checkpoint="auto").load()
    assert auto.step_dir == out / "step_2" and auto.recipe_state == {"step": 2, "epoch": 0}
    assert auto.adapter is None and auto.family == "llama3"
    assert_same_tensors(auto.model, w2)  # full run: weights come from the step folder

    by_name = HFCheckpointer(src, out, resume_from_checkpoint="step_1").load()  # relative to output_dir
    by_path = HFCheckpointer(src, out, resume_from_checkpoint=str(out / "step_1")).load()
    assert by_name.step_dir == by_path.step_dir == out / "step_1"
    assert_same_tensors(by_name.model, w1)
    assert_same_tensors(HFCheckpointer(src, out, resume_from_checkpoint=None).load().model, base)


def test_crash_mid_save_leaves_previous_step_as_resume_point(tmp_path: Path, src: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    ckpt = HFCheckpointer(src, out)
    base = ckpt.load().model
    ckpt.save(1, _trained(base, 1), recipe_state={"step": 1})

    real_save_file = atomic.save_file
    calls = []

    def dies_on_second_shard(tensors, path, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"half a shard")
            raise KeyboardInterrupt("killed mid-save")
        real_save_file(tensors, path, metadata=metadata)

    monkeypatch.setattr(atomic, "save_file", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt, match="killed mid-save"):
        ckpt.save(2, _trained(base, 2), recipe_state={"step": 2})
    monkeypatch.setattr(atomic, "save_file", real_save_file)

    assert (out / "step_2").is_dir() and not atomic.is_complete(out / "step_2")
    assert not [p for p in (out / "step_2").iterdir() if ".tmp-" in p.name]  # temp file cleaned up
    assert find_latest_complete(out) == out / "step_1"
    resumed = HFCheckpointer(src, out, resume_from_checkpoint="auto").load()
    assert resumed.step_dir == out / "step_1" and resumed.recipe_state == {"step": 1}
    assert_same_tensors(resumed.model, _trained(base, 1))


def test_crash_while_overwriting_a_complete_folder(tmp_path: Path, src: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    ckpt = HFCheckpointer(src, out)
    base = ckpt.load().model
    ckpt.save(1, base)
    ckpt.save(2, base)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(atomic, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(2, _trained(base, 2))  # e.g. a resumed run reaching step 2 again
    assert find_latest_complete(out) == out / "step_1"


def test_explicit_incomplete_folder_is_refused(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    (out / "step_7").mkdir(parents=True)
    with pytest.raises(
        ValueError,
        match=r"resume_from_checkpoint folder '.*step_7' is incomplete \(no \.complete marker\): its save was "
        r"interrupted\. Resume from an earlier step folder, or set resume_from_checkpoint=auto",
    ):
        HFCheckpointer(src, out, resume_from_checkpoint=out / "step_7").load()
    with pytest.raises(
        FileNotFoundError,
        match=r"resume_from_checkpoint folder '.*step_9' does not exist or is not a folder\. Pass a step_<N> "
        r"folder of '.*out', resume_from_checkpoint=auto",
    ):
        HFCheckpointer(src, out, resume_from_checkpoint="step_9").load()


def test_keep_last_n_prunes_old_steps(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    ckpt = HFCheckpointer(src, out, keep_last_n_checkpoints=2)
    base = ckpt.load().model
    for step in (1, 2, 3, 4):
        ckpt.save(step, base)
    assert sorted(p.name for p in out.iterdir()) == [atomic.RECORDS, "step_3", "step_4"]
    with pytest.raises(
        ValueError, match=r"keep_last_n_checkpoints must be a positive int or None \(keep all\), got 0"
    ):
        HFCheckpointer(src, out, keep_last_n_checkpoints=0)


def test_recipe_state_that_would_not_resume_fails_the_save(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    ckpt = HFCheckpointer(src, out)
    with pytest.raises(TypeError, match=r"recipe_state\['rng'\] is a numpy\.ndarray"):
        ckpt.save(1, ckpt.load().model, recipe_state={"rng": np.zeros(3)})
    assert find_latest_complete(out) is None


def test_marker_records_step_and_epoch(tmp_path: Path, src: Path) -> None:
    ckpt = HFCheckpointer(src, tmp_path / "out")
    folder = ckpt.save(12, ckpt.load().model, epoch=3)
    marker = json.loads((folder / ".complete").read_text())
    assert marker.pop("id") == json.loads((folder.parent / atomic.RECORDS).read_text())["steps"]["12"]["id"]
    assert marker == {"complete": True, "step": 12, "epoch": 3}
