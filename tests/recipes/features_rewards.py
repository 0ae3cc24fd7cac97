"""The feature check of the reward models (reward_model_single_device / _distributed): a reward model's
scores and loss are transformers' sequence classifier's. Part of tests/recipes/features.py's CHECKS;
same contract (mutants: tests/recipes/mutants_rewards.py)."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from spies import models_run

from ftune import training

MARGIN, CENTER = 0.5, 0.01


def _pairs(path: Path) -> Path:
    """8 pairs whose rows differ in length (so rows are padded), each with a margin."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    rows = [
        {
            "prompt": " ".join(words[: 1 + i % 5]),
            "chosen": " ".join(words[: 2 + i]),
            "rejected": words[i],
            "margin": MARGIN,
        }
        for i in range(8)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@contextmanager
def _first_batch():
    """Record the first micro-batch `training.reward_loss` scores, and the Loss it returns."""
    seen: list = []
    real = training.reward_loss

    def spy(loss_fn, model, hidden, batch):
        out = real(loss_fn, model, hidden, batch)
        if not seen:
            seen.append((batch.tokens.detach().cpu(), out))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "reward_loss", spy)
        yield seen


def _transformers_model(step: Path, pad_id: int):
    """The step folder in transformers: a sequence classifier (full), or the base one with the peft adapter."""
    from transformers import AutoModelForSequenceClassification

    if not (step / "adapter_model.safetensors").is_file():
        return AutoModelForSequenceClassification.from_pretrained(step).eval()
    from peft import PeftModel

    base = json.loads((step / "adapter_config.json").read_text())["base_model_name_or_path"]
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, pad_token_id=pad_id)
    return PeftModel.from_pretrained(model, step).eval()


def reward_model(run, tmp_path):
    """Step 1's loss is the Bradley-Terry loss (margin column, centring term) of the pair scores transformers
    gives the saved model, each row read at its last non-pad token; the head trains with the adapters.

    SGD at lr 1e-30 leaves the weights as they were, so the step folder is the model step 1 scored.
    """
    data = _pairs(tmp_path / "data" / "pairs.jsonl")
    with _first_batch() as seen, models_run() as models:
        logs, out = run(
            "max_steps=1",
            "optimizer={_component_: torch.optim.SGD, lr: 1e-30}",
            "lr_scheduler.num_warmup_steps=0",
            f"dataset={{_component_: ftune.datasets.preference_dataset, source: {data}, margin_column: margin}}",
            f"loss.center_rewards_coefficient={CENTER}",
            output_dir=tmp_path / "rm",
        )
    model = models[-1]
    assert model.score.weight.requires_grad, "the score head is frozen: it would never train"
    tokens, loss = seen[0]
    pad = model.score.pad_id
    assert bool((tokens == pad).any()), "no padded row: the check cannot tell the last real token"
    with torch.no_grad():
        scores = _transformers_model(out / "step_1", pad)(input_ids=tokens).logits.squeeze(-1).float()
    chosen, rejected = scores.chunk(2)
    expected = -F.logsigmoid(chosen - rejected - MARGIN) + CENTER * (chosen + rejected) ** 2
    assert float(loss.sum) == pytest.approx(float(expected.sum()), rel=1e-4, abs=1e-6), (
        f"the step's loss {float(loss.sum)} is not the Bradley-Terry loss of transformers' scores "
        f"{float(expected.sum())}"
    )
    accuracy = loss.metrics["accuracy"].value()
    assert accuracy == pytest.approx(float((chosen > rejected).float().mean())), "accuracy"
    assert all(math.isfinite(r["loss"]) for r in logs if "loss" in r)
