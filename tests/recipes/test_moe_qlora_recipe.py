"""QLoRA on a mixture-of-experts model through lora_finetune_single_device: attention and the stacked experts
in NF4, adapters on both; it trains, logs the balancing loss, and saves the adapters PEFT loads."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_moe_recipes import LORA, make_tiny_moe, moe_overrides  # noqa: E402

pytest.importorskip("torchao")


@pytest.fixture(scope="module")
def tiny_moe(tiny_checkpoint, tmp_path_factory) -> Path:
    return make_tiny_moe(tmp_path_factory.mktemp("moe_qlora") / "ckpt", tiny_checkpoint)


def test_moe_qlora_trains_and_keeps_its_experts_in_nf4(run_recipe, tiny_moe, monkeypatch):
    from ftune.peft import moe_lora

    quantized = []
    original = moe_lora.LoRAGroupedExperts.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        quantized.append(all(moe_lora.is_nf4(getattr(self, n)) for n in moe_lora.EXPERT_WEIGHTS))

    monkeypatch.setattr(moe_lora.LoRAGroupedExperts, "__init__", spy)
    rows, out = run_recipe(
        "lora_finetune_single_device", "smollm2/135M_qlora", *moe_overrides(tiny_moe), *LORA,
        "max_steps=6", "optimizer.lr=3e-3",
    )  # fmt: skip
    assert quantized and all(quantized)  # every MoE layer's experts are NF4
    losses = [row["loss"] for row in rows if "loss" in row]
    aux = [row["aux_loss"] for row in rows if "loss" in row]
    assert len(losses) == len(aux) == 6 and losses[-1] < losses[0] - 0.1, losses
    config = (out / "step_6" / "adapter_config.json").read_text()
    assert "target_parameters" in config and (out / "step_6" / "adapter_model.safetensors").is_file()
