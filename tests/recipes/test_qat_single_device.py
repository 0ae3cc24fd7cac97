"""qat_single_device: qat_distributed on one device, without FSDP2.

Its features (resume among them) are checked with the other single-device recipes'
(test_features_single_device.py, test_mutation.py); here, that it computes what qat_distributed
computes at world size 1, step for step, and its golden losses (which test_distributed.py compares
with qat_distributed at world size 2).
"""

import json
import socket
from pathlib import Path

import pytest
import torch
from features import losses
from qat_losses import assert_qat_losses_close
from safetensors.torch import load_file

CONFIG = "smollm2/135M_qat_full"
GOLDENS = Path(__file__).parent / "goldens" / "single_device.json"


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.usefixtures("golden_threads")
def test_qat_single_device_equals_qat_distributed_at_world_size_1(run_recipe, tmp_path, monkeypatch):
    single, a = run_recipe("qat_single_device", CONFIG, "max_steps=4", output_dir=tmp_path / "single")
    # qat_distributed in this process, as torchrun would start a world of one (the recipe creates
    # the process group and destroys it at its end; monkeypatch restores the environment).
    for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_PORT", _free_port())
    group_before = torch.distributed.is_initialized()
    dist, b = run_recipe("qat_distributed", CONFIG, "max_steps=4", output_dir=tmp_path / "dist")
    assert torch.distributed.is_initialized() == group_before  # it destroys the group it created

    assert losses(single) == pytest.approx(losses(dist), rel=1e-5)  # one machine, one layout: no crossing
    golden = json.loads(GOLDENS.read_text())["qat_single_device"]
    full = json.loads(GOLDENS.read_text())["full_finetune_single_device"]
    assert losses(single)[0] != pytest.approx(full[0], rel=1e-6)  # fake quantization is on from step 1
    # The golden comes from another machine perhaps: a value may round to another code (qat_losses.py).
    assert_qat_losses_close(losses(single), golden, full)
    wa = load_file(str(a / "step_4" / "model.safetensors"))
    wb = load_file(str(b / "step_4" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
