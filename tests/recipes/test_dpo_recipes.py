"""The DPO recipes on the tiny model: what preference tuning adds to the shared skeleton.

The registry's ✓ features of the DPO recipes are checked by test_features_single_device.py and
test_mutation.py (and test_distributed.py at world size 2); this file checks what is DPO's own.
"""

import json
import math
import shutil

import pytest
import torch
from features import losses
from run_logs import _weights
from spies import models_run

from ftune.checkpointing import load_hf
from ftune.checkpointing.inference import merge_adapter_folder
from ftune.data.messages import Message
from ftune.models.smollm2 import smollm2_tokenizer
from ftune.modules.transformer import TransformerDecoder

LORA = ("lora_dpo_single_device", "smollm2/135M_lora_dpo")
FULL = ("full_dpo_distributed", "smollm2/135M_full_dpo")  # in this process: a world of one
REWARDS = {"rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"}
VAL_ORDER = (
    "val_loss",
    "val_rewards/chosen",
    "val_rewards/rejected",
    "val_rewards/margin",
    "val_rewards/accuracy",
    "val_logps/accuracy",
    "val_logps/reference_accuracy",
)
VAL_KEYS = set(VAL_ORDER)
VAL = ("run_val_every_n_steps=2", "max_val_batches=null")


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


def test_packing_is_refused_with_a_message(run_recipe, tmp_path):
    with pytest.raises(ValueError, match=r"dataset.packed: preference_dataset .* does not pack"):
        run_recipe(*LORA, "max_steps=1", "dataset.packed=true", output_dir=tmp_path / "p")


def test_packed_pairs_train_as_the_padded_ones_on_fewer_positions(run_recipe, tmp_path):
    """The shipped configs lay each batch's pairs end to end (padding_free_collate_preference): the same
    losses, rewards and validation figures as right padding, on fewer token positions a step."""
    steps = ("max_steps=3", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=0.01", *VAL)
    packed, _ = run_recipe(*LORA, *steps, output_dir=tmp_path / "packed")
    padded, _ = run_recipe(*LORA, *steps, "collate_fn=null", output_dir=tmp_path / "padded")
    assert len(packed) == len(padded)
    # Losses agree to 2e-6 relative; the rewards (beta times differences of summed log-probabilities near
    # -100) to 2.3e-6 absolute after two updates at lr 0.01 (measured): rounding, amplified by the updates.
    for a, b in zip(packed, padded):
        for key in [k for k in b if k.endswith("loss") or k.startswith(("rewards/", "logps/", "val_"))]:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-5), key
    trained = [row for row in packed if "tokens" in row]
    assert trained and all(
        a["tokens"] < b["tokens"] for a, b in zip(trained, [r for r in padded if "tokens" in r])
    )


# --- validation: training.validate over loss_on, on dataset_val (tests/assets/tiny_preference.py: 16 held-out pairs)


def val_rows(logs):
    return {row["step"]: row for row in logs if "val_loss" in row}


def answer_logp(model, tokens: list[int], masked: list[bool]) -> float:
    """log p of the unmasked tokens from the model's full logits (no chunking, no padding, no shift helper)."""
    logp = model(torch.tensor([tokens]))[0].double().log_softmax(-1)  # (s, vocab)
    return sum(logp[t - 1, tokens[t]].item() for t in range(1, len(tokens)) if not masked[t])


def test_validation_figures_equal_the_formula_on_the_held_out_pairs(
    run_recipe, tiny_checkpoint, demo_dir, tmp_path
):
    """The pass at step 2 against an independent computation: the policy is the base with the saved
    step-2 adapters merged in, the reference the base checkpoint, the log-probabilities full softmaxes."""
    steps = ("max_steps=2", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=0.01", *VAL)
    logs, out = run_recipe(*LORA, *steps, output_dir=tmp_path / "v")
    val = val_rows(logs)
    assert sorted(val) == [2] and VAL_KEYS <= val[2].keys(), val

    reference = load_hf(tiny_checkpoint).eval()
    policy = load_hf(tiny_checkpoint).eval()
    policy.load_state_dict(merge_adapter_folder(policy.state_dict(), out / "step_2", family="smollm2"))
    tokenizer = smollm2_tokenizer(tiny_checkpoint, max_seq_len=64)
    beta, rows = 0.1, []
    lines = (demo_dir / "preference_val.jsonl").read_text().splitlines()
    with torch.no_grad():
        for record in map(json.loads, lines):
            logps = {}
            for side in ("chosen", "rejected"):
                messages = [
                    Message("user", record["prompt"], masked=True),
                    Message("assistant", record[side]),
                ]
                tokens, masked = tokenizer.tokenize_messages(messages, add_eos=True)
                logps[side] = (answer_logp(policy, tokens, masked), answer_logp(reference, tokens, masked))
            (pc, rc), (pr, rr) = logps["chosen"], logps["rejected"]
            chosen, rejected = beta * (pc - rc), beta * (pr - rr)
            loss = -math.log(1 / (1 + math.exp(-(chosen - rejected))))
            rows.append((loss, chosen, rejected, chosen - rejected, chosen > rejected, pc > pr, rc > rr))
    want = dict(zip(VAL_ORDER, (sum(col) / len(rows) for col in zip(*rows))))
    assert len(rows) == 16
    assert {k: val[2][k] for k in VAL_ORDER} == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert val[2]["val_rewards/margin"] != 0, "the policy never left the reference"


def test_validation_leaves_the_training_weights_and_rng_untouched(run_recipe, tmp_path):
    """With LoRA dropout on (training draws from the RNG), a run that validates after every step trains
    exactly as one that never does: same losses, same adapters."""
    common = ("max_steps=3", "peft.dropout=0.1", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=0.01")
    plain, a = run_recipe(*LORA, *common, output_dir=tmp_path / "plain")
    checked, b = run_recipe(
        *LORA, *common, "run_val_every_n_steps=1", "max_val_batches=2", output_dir=tmp_path / "v"
    )
    assert sorted(val_rows(checked)) == [1, 2, 3] and not val_rows(plain)
    assert losses(checked) == losses(plain)
    wa, wb = _weights(a / "step_3"), _weights(b / "step_3")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_with_validation_is_exact(run_recipe, tmp_path):
    """4 straight steps equal 2 + resume + 2, losses and validation figures, with dropout on."""
    common = ("max_steps=4", "peft.dropout=0.1", "run_val_every_n_steps=1", "max_val_batches=2")
    straight, _ = run_recipe(*LORA, *common, output_dir=tmp_path / "a")
    first, b = run_recipe(*LORA, *common, "save_every_n_steps=2", output_dir=tmp_path / "b")
    shutil.rmtree(b / "step_4")
    shutil.rmtree(b / "logs")
    second, _ = run_recipe(*LORA, *common, "checkpointer.resume_from_checkpoint=auto", output_dir=b)
    assert losses(first)[:2] + losses(second) == losses(straight)
    resumed = {**{k: v for k, v in val_rows(first).items() if k <= 2}, **val_rows(second)}
    assert sorted(resumed) == [1, 2, 3, 4]
    assert all(
        {k: resumed[s][k] for k in VAL_KEYS} == {k: val_rows(straight)[s][k] for k in VAL_KEYS}
        for s in resumed
    )


def test_full_and_lora_dpo_validate_against_the_same_reference(run_recipe, tmp_path):
    """Full DPO's frozen copy and LoRA's adapters-off model are both the base checkpoint: the same
    reference figure, which is what a pass before the first step would report for either policy."""
    common = (
        "max_steps=1",
        "lr_scheduler.num_warmup_steps=0",
        "optimizer.lr=0.01",
        "run_val_every_n_steps=1",
    )
    lora, _ = run_recipe(*LORA, *common, "max_val_batches=null", output_dir=tmp_path / "lora")
    full, _ = run_recipe(*FULL, *common, "max_val_batches=null", output_dir=tmp_path / "full")
    lora_val, full_val = val_rows(lora)[1], val_rows(full)[1]
    assert VAL_KEYS <= full_val.keys()
    assert full_val["val_logps/reference_accuracy"] == lora_val["val_logps/reference_accuracy"]
    assert full_val["val_rewards/margin"] != 0 and lora_val["val_rewards/margin"] != 0


def test_the_demo_preference_config_runs_on_the_tiny_model(run_recipe, demo_dir, tmp_path):
    """smollm2/135M_demo_lora_dpo: its data (written on first use) and its validation of every held-out pair."""
    logs, _ = run_recipe(
        "lora_dpo_single_device", "smollm2/135M_demo_lora_dpo", "max_steps=2", "run_val_every_n_steps=2"
    )
    assert (demo_dir / "train_pref.jsonl").is_file() and (demo_dir / "heldout_pref.jsonl").is_file()
    assert len(losses(logs)) == 2 and sorted(val_rows(logs)) == [2]
    assert all(math.isfinite(val_rows(logs)[2][k]) for k in VAL_KEYS)


# --- ORPO and KTO: the DPO recipes with another loss (and for KTO unpaired data), from their configs

ORPO = ("lora_dpo_single_device", "smollm2/135M_lora_orpo")
KTO = ("lora_dpo_single_device", "smollm2/135M_lora_kto")
ORPO_FIGURES = {"nll_loss", "log_odds_ratio", "log_odds_chosen", "logps/chosen", "logps/rejected", *REWARDS}
KTO_FIGURES = {"kl", "rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected"}


def test_orpo_runs_2_steps_from_its_config_without_a_reference(run_recipe, tmp_path):
    with models_run() as models:
        logs, out = run_recipe(*ORPO, "max_steps=2", *VAL, output_dir=tmp_path / "orpo")
    assert len(models) == 1, "ORPO ran a reference model"
    train = [row for row in logs if "loss" in row]
    assert [row["step"] for row in train] == [1, 2] and all(ORPO_FIGURES <= row.keys() for row in train)
    # The loss is the NLL plus beta times -log sigmoid(log odds ratio), as logged.
    for row in train:
        assert row["loss"] == pytest.approx(row["nll_loss"] - 0.1 * row["log_odds_ratio"], rel=1e-5)
    assert "val_nll_loss" in val_rows(logs)[2] and "val_logps/reference_accuracy" not in val_rows(logs)[2]
    assert (out / "step_2" / "adapter_model.safetensors").is_file()


def test_kto_runs_2_steps_from_its_config(run_recipe, tmp_path):
    logs, out = run_recipe(
        *KTO, "max_steps=2", "loss.undesirable_weight=1.5", *VAL, output_dir=tmp_path / "kto"
    )
    train = [row for row in logs if "loss" in row]
    assert [row["step"] for row in train] == [1, 2] and all(KTO_FIGURES <= row.keys() for row in train)
    first = train[0]
    # Step 1: the policy is its reference (LoRA B = 0), so every log-ratio and the KL estimate are 0 and each
    # completion costs its weight times 1 - sigmoid(0): a mean of 0.5 (desirable) and 0.75 (undesirable).
    assert first["kl"] == 0 and first["rewards/chosen"] == 0 and first["rewards/rejected"] == 0
    means = [0.5 * (d + 1.5 * (4 - d)) / 4 for d in range(5)]  # d desirable of the batch's 4
    assert any(first["loss"] == pytest.approx(m, rel=1e-6) for m in means), (first["loss"], means)
    assert {"val_loss", "val_kl", "val_rewards/chosen"} <= val_rows(logs)[2].keys()
    assert (out / "step_2" / "adapter_model.safetensors").is_file()
