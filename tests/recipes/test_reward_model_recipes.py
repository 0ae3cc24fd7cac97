"""The reward-model recipes on the tiny model: what a reward model adds to the shared skeleton.

The registry's ✓ features are checked by test_features_single_device.py and test_mutation.py (and
test_distributed.py at world size 2: its losses equal this file's golden); this file checks what is the
reward model's own: golden losses, TRL's figures logged and validated, the saves loading in transformers
(full) and peft (LoRA) with the scores the recipe's model gives, a full run resuming from its
sequence-classifier folder, and the margin column reaching the loss.
"""

import json
import math
from pathlib import Path

import pytest
import torch
from features import losses
from features import resume as resume_check

from ftune.checkpointing import load_hf
from ftune.models.smollm2 import smollm2_tokenizer
from ftune.training import reward_scores

GOLDENS = Path(__file__).parent / "goldens" / "single_device.json"
RECIPE = "reward_model_single_device"
LORA, FULL = "smollm2/135M_demo_lora_rm", "smollm2/135M_demo_full_rm"
FIGURES = {"loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"}


def _rows(checkpoint: Path, tokenizer) -> torch.Tensor:
    """Three rows of the tiny tokenizer's ids, right-padded with its pad id."""
    rows = [tokenizer.encode(text) for text in ("2024-01-31", "the date is 31/01/2024", "no")]
    out = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_id)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


@pytest.mark.usefixtures("golden_threads")
def test_golden_losses(run_recipe, request):
    logs, _ = run_recipe(RECIPE, LORA, "max_steps=4")
    got = losses(logs)
    goldens = json.loads(GOLDENS.read_text())
    if request.config.getoption("--update-goldens"):
        goldens[RECIPE] = got
        GOLDENS.write_text(json.dumps(goldens, indent=2) + "\n")
    assert RECIPE in goldens, "no golden losses yet: run pytest tests/recipes --update-goldens"
    assert got == pytest.approx(goldens[RECIPE], rel=1e-5, abs=1e-6)
    assert all(FIGURES <= r.keys() for r in logs if "loss" in r)


def test_validation_logs_trl_figures_on_held_out_pairs(run_recipe, tmp_path):
    logs, _ = run_recipe(RECIPE, LORA, "max_steps=2", "run_val_every_n_steps=2", "max_val_batches=null")
    val = [r for r in logs if "val_loss" in r]
    assert len(val) == 1 and {f"val_{k}" for k in FIGURES} <= val[0].keys(), val
    assert 0.0 <= val[0]["val_accuracy"] <= 1.0 and math.isfinite(val[0]["val_margin"])
    assert val[0]["val_min_reward"] <= val[0]["val_mean_reward"] <= val[0]["val_max_reward"]


def test_full_save_loads_in_transformers_with_the_recipes_scores(run_recipe, tiny_checkpoint, tmp_path):
    from transformers import AutoModelForSequenceClassification

    _, out = run_recipe(RECIPE, FULL, "max_steps=2", output_dir=tmp_path / "full")
    folder = out / "step_2"
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"], config["architectures"]
    tokenizer = smollm2_tokenizer(str(tiny_checkpoint))
    assert config["pad_token_id"] == tokenizer.pad_id
    tokens = _rows(tiny_checkpoint, tokenizer)
    ours = load_hf(folder)  # a sequence classifier's folder reads back as a reward model
    ours.score.pad_id = tokenizer.pad_id
    with torch.no_grad():
        mine = reward_scores(ours, ours.hidden(tokens), tokens)
        theirs = AutoModelForSequenceClassification.from_pretrained(folder).eval()(input_ids=tokens)
    torch.testing.assert_close(mine, theirs.logits.squeeze(-1), rtol=1e-5, atol=1e-6)


def test_lora_save_loads_in_peft_with_the_recipes_scores(run_recipe, tiny_checkpoint, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from ftune.checkpointing import HFCheckpointer
    from ftune.training import add_score_head, apply_peft

    _, out = run_recipe(RECIPE, LORA, "max_steps=2", output_dir=tmp_path / "lora")
    folder = out / "step_2"
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    assert adapter_config["task_type"] == "SEQ_CLS" and adapter_config["modules_to_save"] == ["score"]
    tokenizer = smollm2_tokenizer(str(tiny_checkpoint))
    tokens = _rows(tiny_checkpoint, tokenizer)
    # ftune's model of the step folder: the base, the head, the adapters and head loaded as a resume does.
    loaded = HFCheckpointer(tiny_checkpoint, out, resume_from_checkpoint="auto").load()
    ours = load_hf(tiny_checkpoint)
    add_score_head(ours, pad_id=tokenizer.pad_id)
    peft = {"_component_": "ftune.peft.apply_lora", "targets": ["q_proj"], "rank": 16, "alpha": 32}
    peft["targets"] = sorted({k.split(".")[-3] for k in loaded.adapter if ".lora_a." in k})
    apply_peft(peft, ours, loaded.adapter, dtype=torch.float32)
    base = AutoModelForSequenceClassification.from_pretrained(
        tiny_checkpoint, num_labels=1, pad_token_id=tokenizer.pad_id
    )
    theirs = PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        mine = reward_scores(ours, ours.hidden(tokens), tokens)
        torch.testing.assert_close(mine, theirs(input_ids=tokens).logits.squeeze(-1), rtol=1e-5, atol=1e-6)
    assert float(loaded.adapter["score.weight"].std()) > 0  # the trained head, not zeros


def test_full_run_resumes_from_its_sequence_classifier_folder(run_recipe, tmp_path):
    def run(*overrides, output_dir):
        return run_recipe(RECIPE, FULL, *overrides, output_dir=output_dir)

    resume_check(run, tmp_path)


def test_margin_column_reaches_the_loss(run_recipe, demo_dir, tmp_path):
    from tiny_preference import write_preference_data

    train = write_preference_data(demo_dir)
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    with_margin = tmp_path / "margins.jsonl"
    with_margin.write_text("".join(json.dumps({**r, "margin": 2.0}) + "\n" for r in rows))
    node = "dataset={_component_: ftune.datasets.preference_dataset, source: %s%s}"
    plain, _ = run_recipe(RECIPE, LORA, "max_steps=1", node % (train, ""), output_dir=tmp_path / "a")
    margin, _ = run_recipe(
        RECIPE,
        LORA,
        "max_steps=1",
        node % (with_margin, ", margin_column: margin"),
        output_dir=tmp_path / "b",
    )
    # One step before any update: the same scores d, so the loss is -log σ(d - 2) against -log σ(d).
    assert losses(margin)[0] > losses(plain)[0] + 0.5, (losses(plain), losses(margin))
    assert margin[0]["margin"] == pytest.approx(plain[0]["margin"], rel=1e-6)  # the scores' margin, logged
