"""Learned quantization ranges in step folders: split off the weights into qat_ranges.safetensors,
read back by load() (resume, or a step folder as checkpoint_dir), never stale, refused beside adapters."""

from pathlib import Path

import pytest
import torch
from ckpt_tiny_hf import assert_same_tensors, write_hf_folder
from safetensors import safe_open

from ftune.checkpointing import HFCheckpointer
from ftune.checkpointing.qat_ranges import RANGES_FILE, load_ranges

RANGES = {
    "layers.0.attn.q_proj.weight_fake_quantizer.scale": torch.rand(64, 2) + 0.1,
    "layers.1.mlp.down_proj.weight_fake_quantizer.scale": torch.rand(64, 4) + 0.1,
}


def test_ranges_go_to_their_own_file_and_come_back(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "llama3")
    out = tmp_path / "out"
    ckpt = HFCheckpointer(src, out)
    base = ckpt.load().model
    assert ckpt.load().qat_ranges is None  # a base checkpoint has none
    ckpt.save(1, {**base, **RANGES}, recipe_state={"step": 1})
    step = out / "step_1"
    weights = [p for p in step.glob("*.safetensors") if p.name != RANGES_FILE]
    for path in weights:
        with safe_open(str(path), framework="pt") as f:
            assert not [k for k in f.keys() if "fake_quantizer" in k]
    resumed = HFCheckpointer(src, out, resume_from_checkpoint="auto").load()
    assert_same_tensors(resumed.model, base)
    assert_same_tensors(resumed.qat_ranges, RANGES)
    assert_same_tensors(HFCheckpointer(step, tmp_path / "other").load().qat_ranges, RANGES)  # quantize's view

    ckpt.save(1, base, recipe_state={"step": 1})  # the same step again, without ranges
    assert not (step / RANGES_FILE).exists() and load_ranges(step) is None


def test_ranges_beside_adapters_or_foreign_tensors_are_refused(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "llama3")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    base = ckpt.load().model
    adapter = {"layers.0.attn.q_proj.lora_a.weight": torch.zeros(8, 64)}
    with pytest.raises(ValueError, match="both adapter tensors .* and learned quantization ranges"):
        ckpt.save(1, {**base, **adapter, **RANGES}, adapter_config={"rank": 8, "alpha": 16})
    folder = tmp_path / "foreign"
    folder.mkdir()
    from safetensors.torch import save_file

    save_file({"layers.0.attn.q_proj.weight": torch.zeros(2)}, str(folder / RANGES_FILE))
    with pytest.raises(ValueError, match="holds 'layers.0.attn.q_proj.weight', which is not a learned range"):
        load_ranges(folder)
