"""The DPO recipes on the tiny model: what preference tuning adds to the shared skeleton.

The registry's ✓ features of the DPO recipes are checked by test_features_single_device.py and
test_mutation.py (and test_distributed.py at world size 2); this file checks what is DPO's own.
"""

import math

import pytest
from features import losses
from spies import models_run

from ftune.modules.transformer import TransformerDecoder

LORA = ("lora_dpo_single_device", "smollm2/135M_lora_dpo")
REWARDS = {"rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"}


def test_lora_dpo_reference_is_the_policy_with_adapters_off(run_recipe, tmp_path):
    """B starts at zero: at step 1 the policy IS the reference, so the sigmoid loss is log 2 and every
    reward 0; one decoder runs (no second model), and after two updates the policy has moved."""
    steps = ("max_steps=3", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=0.01")
    with models_run() as models:
        logs, out = run_recipe(*LORA, *steps, output_dir=tmp_path / "sigmoid")
    assert len(models) == 1 and isinstance(models[0], TransformerDecoder), f"{len(models)} decoders ran"
    assert all(REWARDS <= row.keys() for row in logs), logs[0].keys()
    assert losses(logs)[0] == pytest.approx(math.log(2), abs=1e-6)
    assert all(logs[0][k] == 0 for k in REWARDS)
    assert losses(logs)[2] != pytest.approx(math.log(2), abs=1e-4), "the policy never left the reference"
    assert logs[2]["rewards/margin"] == pytest.approx(logs[2]["rewards/chosen"] - logs[2]["rewards/rejected"])
    assert 0 <= logs[2]["rewards/accuracy"] <= 1
    assert (out / "step_3" / "adapter_model.safetensors").is_file()


def test_ipo_and_simpo_run_from_the_config(run_recipe, tmp_path):
    ipo, _ = run_recipe(*LORA, "max_steps=1", "loss.loss_type=ipo", output_dir=tmp_path / "ipo")
    assert losses(ipo)[0] == pytest.approx((1 / (2 * 0.1)) ** 2, rel=1e-6)  # h = 0 at the reference
    with models_run() as models:
        simpo, _ = run_recipe(
            *LORA,
            "max_steps=1",
            "loss.loss_type=simpo",
            "loss.beta=2.0",
            "loss.gamma=0.5",
            output_dir=tmp_path / "s",
        )
    assert len(models) == 1
    # SimPO has no reference: its reward is beta times the mean log-probability, negative here.
    assert simpo[0]["rewards/chosen"] < 0 and math.isfinite(losses(simpo)[0])


def test_packing_and_validation_are_refused_with_a_message(run_recipe, demo_dir, tmp_path):
    with pytest.raises(ValueError, match=r"dataset.packed: preference_dataset .* does not pack"):
        run_recipe(*LORA, "max_steps=1", "dataset.packed=true", output_dir=tmp_path / "p")
    with pytest.raises(ValueError, match="dataset_val: the DPO recipes have no validation pass"):
        run_recipe(
            *LORA,
            "max_steps=1",
            "dataset_val._component_=ftune.datasets.preference_dataset",
            f"dataset_val.source={demo_dir / 'preference.jsonl'}",
            output_dir=tmp_path / "v",
        )
