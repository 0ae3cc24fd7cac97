"""A save that fails half-way (disk full) leaves the previous step folder intact and says so."""

import errno
import hashlib

import pytest
from ckpt_tiny_hf import ftune_model, write_hf_folder

from ftune.checkpointing import HFCheckpointer, atomic


def _hashes(folder):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_disk_full_during_a_save_keeps_the_previous_step(tmp_path, monkeypatch):
    base = write_hf_folder(tmp_path / "hf", "smollm2")
    ckpt = HFCheckpointer(base, tmp_path / "out")
    state = ftune_model(base).state_dict()
    first = ckpt.save(1, state, recipe_state={"step": 1})
    before = _hashes(first)

    real = atomic.save_safetensors

    def full_disk(tensors, path):
        real(tensors, path)  # the bytes land in a temporary file, then the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(atomic, "save_safetensors", full_disk)
    with pytest.raises(OSError) as info:
        ckpt.save(2, state, recipe_state={"step": 2})
    text = str(info.value)
    assert info.value.errno == errno.ENOSPC
    assert f"saving step 2 failed writing {tmp_path / 'out' / 'step_2' / 'model.safetensors'}" in text
    assert f"No space left on device. The half-written {tmp_path / 'out' / 'step_2'} was removed" in text
    assert f"the newest complete step folder, {first}, is intact and resume picks it" in text
    assert "resume_from_checkpoint=auto" in text
    assert _hashes(first) == before
    assert not (tmp_path / "out" / "step_2").exists()
    assert atomic.find_latest_complete(tmp_path / "out") == first
