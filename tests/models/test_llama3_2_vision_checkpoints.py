"""Llama 3.2 Vision checkpoints read whole (`HFCheckpointer(image_text=True)`): a tiny random
MllamaForConditionalGeneration written by save_pretrained loads with transformers' logits, ftune's
step folders load back into transformers, its LoRA adapters (decoder self- and cross-attention,
projector, encoder) into peft, with equal logits."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import max_diff
from safetensors.torch import load_file
from test_llama3_2_vision import ONE_TWO, batch, hf_inputs, ours, tiny_hf

from ftune.checkpointing import HFCheckpointer, build_model, load_hf
from ftune.modules.vision import CrossAttentionImageTextModel
from ftune.peft import apply_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    hf = tiny_hf(seed=0)
    folder = tmp_path_factory.mktemp("mllama") / "in"
    hf.save_pretrained(folder)
    return hf, folder


def _theirs(hf: torch.nn.Module, b: dict) -> torch.Tensor:
    with torch.no_grad():
        return hf(**hf_inputs(b)).logits


def test_loads_whole_with_transformers_logits(saved) -> None:
    hf, folder = saved
    model = load_hf(folder, image_text=True).eval()
    assert isinstance(model, CrossAttentionImageTextModel)
    assert HFCheckpointer(folder, image_text=True).load().family == "llama3_2_vision"
    b = batch(ONE_TWO, seed=1)
    with torch.no_grad():
        assert max_diff(ours(model, b), _theirs(hf, b)) <= 1e-4


def test_transformers_loads_the_saved_step_with_equal_logits(saved, tmp_path: Path) -> None:
    hf, folder = saved
    ckpt = HFCheckpointer(folder, tmp_path / "out", image_text=True)
    model = build_model(None, ckpt.load().model, device="cpu", dtype=torch.float32, checkpoint_dir=folder)
    with torch.no_grad():  # trained weights differ from the input's
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    step = ckpt.save(1, model.state_dict())
    assert json.loads((step / "config.json").read_text()) == json.loads((folder / "config.json").read_text())
    assert load_file(step / "model.safetensors").keys() == load_file(folder / "model.safetensors").keys()
    back = type(hf).from_pretrained(step).float().eval()
    b = batch(ONE_TWO, seed=2)
    with torch.no_grad():
        assert max_diff(ours(model.eval(), b), _theirs(back, b)) <= 1e-4


def test_peft_loads_the_lora_adapters_with_equal_logits(saved, tmp_path: Path) -> None:
    hf, folder = saved
    ckpt = HFCheckpointer(folder, tmp_path / "out", image_text=True, save_adapter_weights_only=False)
    model = build_model(None, ckpt.load().model, device="cpu", dtype=torch.float32, checkpoint_dir=folder)
    settings = {"rank": 2, "alpha": 4.0, "dropout": 0.0, "use_dora": False}
    # q_proj/v_proj of the decoder are in its self- and its cross-attention layers.
    targets = {"decoder": ["q_proj", "v_proj"], "vision_encoder": ["q_proj", "fc1"], "projector": ["proj"]}
    swapped = apply_lora(model, targets=targets, **settings)
    assert {s.split(".")[0] for s in swapped} == set(targets)
    assert any(".cross_attn.q_proj" in s for s in swapped)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0.0, 0.1)
    step = ckpt.save(1, model.state_dict(), adapter_config=settings)
    adapted = peft.PeftModel.from_pretrained(tiny_hf(seed=0), step).eval()
    b = batch(ONE_TWO, seed=3)
    with torch.no_grad():
        got = ours(model.eval(), b)
    theirs = _theirs(adapted, b)
    assert max_diff(got, theirs) <= 1e-4
    assert max_diff(theirs, _theirs(hf, b)) > 1e-3  # the adapters change the logits
