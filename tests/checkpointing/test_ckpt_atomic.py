"""Atomic writes, completion markers, latest-complete lookup and pruning, on plain tensors."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftune.checkpointing import atomic


def test_atomic_path_replaces_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic.write_json({"v": 1}, target)
    with pytest.raises(RuntimeError, match="boom"), atomic.atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("boom")
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temp file left behind


def test_writers_round_trip(tmp_path: Path) -> None:
    t = {
        "a": torch.arange(6.0).view(2, 3).t(),
        "b": torch.tensor([1, 2], dtype=torch.int64),
    }  # a non-contiguous
    atomic.save_safetensors(t, tmp_path / "w.safetensors")
    back = load_file(tmp_path / "w.safetensors")
    assert all(torch.equal(back[k], t[k]) for k in t)
    atomic.torch_save({"x": t["a"]}, tmp_path / "x.pt")
    assert torch.equal(torch.load(tmp_path / "x.pt", weights_only=True)["x"], t["a"])
    (tmp_path / "src.txt").write_text("hello")
    atomic.copy_file(tmp_path / "src.txt", tmp_path / "sub" / "dst.txt")
    assert (tmp_path / "sub" / "dst.txt").read_text() == "hello"


def _make_step(out: Path, step: int, complete: bool) -> Path:
    """A step folder as ftune's checkpointer writes it: recorded, then written, then marked."""
    folder = atomic.step_dir(out, step)
    save_id = atomic.begin_step(folder, step)
    folder.mkdir(parents=True)
    (folder / "w.bin").write_bytes(b"x")
    if complete:
        atomic.finish_step(folder, step, save_id, {"step": step})
    return folder


def _user_folder(out: Path, name: str, marker: str | None = None) -> Path:
    folder = out / name
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes")
    if marker is not None:
        (folder / atomic.COMPLETE_MARKER).write_text(marker)
    return folder


def test_find_latest_complete_skips_incomplete_and_other_names(tmp_path: Path) -> None:
    assert atomic.find_latest_complete(tmp_path / "missing") is None
    _make_step(tmp_path, 2, True)
    _make_step(tmp_path, 10, True)  # numeric, not lexical, order: 10 > 9 > 2
    _make_step(tmp_path, 9, True)
    _make_step(tmp_path, 12, False)
    (tmp_path / "step_x").mkdir()
    (tmp_path / "logs").mkdir()
    assert atomic.find_latest_complete(tmp_path) == tmp_path / "step_10"
    assert json.loads((tmp_path / "step_10" / atomic.COMPLETE_MARKER).read_text())["step"] == 10


def test_prune_keeps_newest_complete_and_drops_stale_incomplete(tmp_path: Path) -> None:
    for step, done in [(1, True), (2, False), (3, True), (4, True), (5, False)]:
        _make_step(tmp_path, step, done)
    removed = atomic.prune(tmp_path, keep_last_n=2)
    assert sorted(p.name for p in removed) == ["step_1", "step_2"]
    # step_5 is newer than every complete folder: maybe a save in progress, left alone.
    assert sorted(p.name for p in tmp_path.iterdir()) == [atomic.RECORDS, "step_3", "step_4", "step_5"]
    assert sorted(json.loads((tmp_path / atomic.RECORDS).read_text())["steps"]) == ["3", "4", "5"]


def test_prune_deletes_only_folders_ftune_wrote(tmp_path: Path) -> None:
    notes = _user_folder(tmp_path, "step_0")  # a user's notes, no marker: looks like an interrupted save
    copied = _user_folder(tmp_path, "step_1", '{"complete": true, "step": 1, "id": "from-elsewhere"}')
    for step in (2, 3, 4):
        _make_step(tmp_path, step, True)
    assert [atomic.ftune_state(p) for p in (notes, copied, tmp_path / "step_2")] == [None, None, "complete"]
    removed = atomic.prune(tmp_path, keep_last_n=1)
    assert sorted(p.name for p in removed) == ["step_2", "step_3"]  # ftune's completed steps, as before
    assert (notes / "notes.txt").read_text() == "my notes" and (copied / "notes.txt").is_file()
    with pytest.raises(
        FileExistsError, match=r"saving step 0 would write into '.*step_0', a folder ftune did not"
    ):
        atomic.begin_step(notes, 0)
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"]


def test_folders_of_an_older_ftune_count_by_their_marker(tmp_path: Path) -> None:
    """Before the records, ftune wrote `{"complete": true, "step": N, ...}` last: such folders are ftune's;
    an old folder without a marker may be a user's and is left alone."""
    old = [_user_folder(tmp_path, f"step_{s}", json.dumps({"complete": True, "step": s})) for s in (1, 2)]
    stale = _user_folder(tmp_path, "step_3")
    renamed = _user_folder(tmp_path, "step_4", json.dumps({"complete": True, "step": 9}))
    _make_step(tmp_path, 5, True)
    assert atomic.ftune_state(old[0]) == "complete" and atomic.ftune_state(renamed) is None
    assert sorted(p.name for p in atomic.prune(tmp_path, keep_last_n=1)) == ["step_1", "step_2"]
    assert stale.is_dir() and renamed.is_dir()


def test_prune_rejects_non_positive(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"keep_last_n_checkpoints must be a positive int or None \(keep all\), got 0"
    ):
        atomic.prune(tmp_path, 0)


def test_mark_incomplete(tmp_path: Path) -> None:
    folder = _make_step(tmp_path, 1, True)
    atomic.mark_incomplete(folder)
    assert not atomic.is_complete(folder)
    atomic.mark_incomplete(folder)  # idempotent
