"""Outputs never land on inputs (issue 26): output folders vs input folders, and step-folder retention."""

import json
import logging
import shutil
from pathlib import Path

import pytest
from ckpt_tiny_hf import write_hf_folder

from ftune.checkpointing import HFCheckpointer, atomic
from ftune.checkpointing.output_guard import OutputOnInputError, check_output_dir


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_hf_folder(tmp_path / "in", "llama3", shards=1)


def _steps(out: Path) -> list[str]:
    return sorted((p.name for p in out.glob("step_*")), key=lambda n: int(n.split("_")[1]))


def test_output_dir_equal_to_or_inside_checkpoint_dir_is_refused(src: Path) -> None:
    for out in (src, src / "runs" / "lora", src / ".." / "in"):
        with pytest.raises(
            OutputOnInputError,
            match=r"output_dir '.*' (is|is inside) checkpoint_dir '.*in': ftune never writes where it reads a "
            r"model.*Accepted: a folder outside .*in \(a folder that contains it is fine\)\. Set output_dir to "
            r"another folder, e.g\. output_dir=.*in_out\.",
        ):
            HFCheckpointer(src, out)
    HFCheckpointer(src, src.parent)  # the folder that holds the input: fine
    HFCheckpointer(src)  # read-only
    with pytest.raises(ValueError, match="built without output_dir \\(read-only\\): it cannot save"):
        HFCheckpointer(src).save(1, {})


def test_symlink_cannot_hide_an_overlap(src: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(src)
    with pytest.raises(OutputOnInputError, match="is inside checkpoint_dir"):
        check_output_dir(tmp_path / "alias" / "out", {"checkpoint_dir": src})


def test_output_dir_inside_the_resume_folder_is_refused(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    HFCheckpointer(src, out).save(3, HFCheckpointer(src).load().model)
    with pytest.raises(
        OutputOnInputError, match=r"output_dir '.*step_3/more' is inside resume_from_checkpoint"
    ):
        HFCheckpointer(src, out / "step_3" / "more", resume_from_checkpoint=out / "step_3").load()


def test_continuing_from_a_step_folder_of_the_same_output_dir_keeps_the_new_steps(
    src: Path, tmp_path: Path, caplog
) -> None:
    out = tmp_path / "out"
    base = HFCheckpointer(src).load().model
    HFCheckpointer(src, out).save(50, base)  # an earlier run
    step_50 = out / "step_50"
    marker = (step_50 / atomic.COMPLETE_MARKER).read_bytes()

    ckpt = HFCheckpointer(step_50, out, keep_last_n_checkpoints=1)  # a new run from its weights
    with caplog.at_level(logging.WARNING):
        ckpt.load()
    assert "already holds step folders this run did not write" in caplog.text
    assert "step_50 holds checkpoint_dir: never removed, never overwritten" in caplog.text
    ckpt.save(10, base)
    assert _steps(out) == ["step_10", "step_50"]  # the new folder survives, the input too
    ckpt.save(20, base)
    assert _steps(out) == ["step_20", "step_50"]  # pruned among this run's own folders
    assert atomic.is_complete(out / "step_20") and (step_50 / atomic.COMPLETE_MARKER).read_bytes() == marker
    with pytest.raises(
        OutputOnInputError,
        match=r"the folder of step 50 '.*step_50' is checkpoint_dir .*Give this run an output_dir of its own",
    ):
        ckpt.save(50, base)  # would overwrite its own input: refused before writing
    assert (step_50 / atomic.COMPLETE_MARKER).read_bytes() == marker


def test_merged_subfolder_as_input_protects_its_step_folder(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = HFCheckpointer(src).load().model
    merged = HFCheckpointer(src, out).save(5, base) / "merged"
    shutil.copytree(src, merged)  # a full model in step_5/merged, as a LoRA run writes it
    ckpt = HFCheckpointer(merged, out, keep_last_n_checkpoints=1)
    ckpt.load()
    for step in (1, 2, 3):
        ckpt.save(step, base)
    assert _steps(out) == ["step_3", "step_5"]
    with pytest.raises(OutputOnInputError, match=r"the folder of step 5 '.*step_5' holds checkpoint_dir"):
        ckpt.save(5, base)


def _interrupted_save(ckpt: HFCheckpointer, step: int, base, monkeypatch) -> None:
    """A save killed after its files and before its marker (as by SIGKILL)."""
    with monkeypatch.context() as m:
        m.setattr(atomic, "finish_step", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            ckpt.save(step, base)


def test_resumed_run_prunes_its_history_but_not_another_branch(
    src: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "out"
    first = HFCheckpointer(src, out)
    base = first.load().model
    for step in (10, 20, 30, 50):
        first.save(step, base, recipe_state={"step": step})
    _interrupted_save(first, 15, base, monkeypatch)  # an interrupted save of the first run: stale
    assert atomic.ftune_state(out / "step_15") == "interrupted"
    ckpt = HFCheckpointer(src, out, resume_from_checkpoint="step_30", keep_last_n_checkpoints=1)
    assert ckpt.load().recipe_state == {"step": 30}
    ckpt.save(40, base)
    # history (10, 20, 30: steps up to the one resumed at) is pruned; step_50 is not this run's
    assert _steps(out) == ["step_40", "step_50"]

    auto = HFCheckpointer(src, out, resume_from_checkpoint="auto", keep_last_n_checkpoints=2)
    assert auto.load().recipe_state == {"step": 50}
    auto.save(60, base)
    assert _steps(out) == ["step_50", "step_60"]


def test_retention_keeps_a_users_step_0_and_deletes_ftunes_steps(src: Path, tmp_path: Path) -> None:
    """Issue 37: keep_last_n_checkpoints=1 deleted a user's step_0/ of notes (no marker: it looked like an
    interrupted save). Only folders the output folder's records say ftune wrote are deleted."""
    out = tmp_path / "out"
    (out / "step_0").mkdir(parents=True)
    (out / "step_0" / "notes.md").write_text("what I tried")
    ckpt = HFCheckpointer(src, out, keep_last_n_checkpoints=1)
    base = ckpt.load().model
    for step in (1, 2, 3):
        ckpt.save(step, base)
    assert _steps(out) == ["step_0", "step_3"]  # step_1 and step_2: ftune's, completed, deleted as before
    assert (out / "step_0" / "notes.md").read_text() == "what I tried"
    records = json.loads((out / atomic.RECORDS).read_text())["steps"]
    assert list(records) == ["3"] and records["3"]["state"] == "complete"
    marker = json.loads((out / "step_3" / atomic.COMPLETE_MARKER).read_text())
    assert marker["id"] == records["3"]["id"] and marker["step"] == 3


def test_a_step_folder_ftune_did_not_write_is_refused_before_the_run(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "step_2").mkdir(parents=True)
    (out / "step_2" / "notes.md").write_text("mine")
    with pytest.raises(
        FileExistsError,
        match=r"a save of step 2 would write into '.*out/step_2', a folder ftune did not write: .*ftune_steps\.json "
        r"does not record it and it has no \.complete marker of ftune's\. ftune never writes into, overwrites or "
        r"deletes a folder it did not write\. Move that folder out of the output folder",
    ):
        HFCheckpointer(src, out).load()
    ckpt = HFCheckpointer(src, out)
    base = HFCheckpointer(src).load().model
    with pytest.raises(FileExistsError, match=r"saving step 2 would write into '.*out/step_2'"):
        ckpt.save(2, base)  # a checkpointer whose load was skipped refuses at the save
    assert sorted(p.name for p in (out / "step_2").iterdir()) == ["notes.md"]
