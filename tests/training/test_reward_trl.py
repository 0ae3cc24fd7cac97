"""The reward model's loss against TRL's RewardTrainer over 8 optimizer steps: per-step losses and the
figures both log.

TRL's side is TRL 1.16's own ``RewardTrainer.train()`` (offline, on CPU, fp32: about 10 s here) on
`transformers`' ``LlamaForSequenceClassification`` of a tiny random Llama-3, with a margin column and
``center_rewards_coefficient``; the batches it trains on are recorded as its ``compute_loss`` sees them.
ftune's side is what the reward_model recipes' ``loss_on`` runs (``reward_loss`` through the model's
score head, ``StepLoss`` per pair) on ftune's conversion of the same weights, with TRL's initial score
head, on the same batches, with the same optimizer (AdamW, lr 1e-2, no weight decay, no clipping).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ftune.checkpointing import load_hf
from ftune.training import RewardLoss, StepLoss, add_score_head, on_device, per_pair, reward_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper

STEPS, PAD, COEF = 8, 0, 0.01
# TRL's names, which ftune logs too (the loss is compared on its own).
NAMES = ("accuracy", "margin", "min_reward", "mean_reward", "max_reward")


def _rows(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)

    def ids() -> list[int]:
        return torch.randint(1, 128, (int(torch.randint(2, 9, (), generator=g)),), generator=g).tolist()

    return [{"chosen_ids": ids(), "rejected_ids": ids(), "margin": 0.5 * (i % 3)} for i in range(n)]


def _trl_run(base: Path, out: Path) -> tuple[torch.Tensor, list[dict], list[dict]]:
    """TRL's trainer: the initial score head, the batches it trained on, and its per-step logs."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, pad_token_id=PAD)
    initial = model.score.weight.detach().clone()
    vocab = {str(i): i for i in range(128)}  # never used: the rows are token ids already
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="1")), pad_token="0", eos_token="2"
    )
    batches, logs = [], []

    class Recording(RewardTrainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            batches.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
            return super().compute_loss(model, inputs, *args, **kwargs)

    class Logs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                history.append(dict(logs))

    history = logs
    args = RewardConfig(
        output_dir=str(out),
        per_device_train_batch_size=3,
        max_steps=STEPS,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=0.0,
        center_rewards_coefficient=COEF,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_drop_last=True,
        disable_tqdm=True,
    )
    trainer = Recording(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(_rows(3 * STEPS)),
        processing_class=tokenizer,
        callbacks=[Logs()],
    )
    trainer.train()
    return initial, batches, logs


def test_reward_model_equals_trl_reward_trainer_over_8_steps(tmp_path):
    build_tiny_hf("llama3", seed=0).save_pretrained(tmp_path / "base")
    initial, batches, logs = _trl_run(tmp_path / "base", tmp_path / "trl")
    assert len(batches) == STEPS and len(logs) == STEPS, (len(batches), len(logs))
    assert any(float(b["margin"].abs().sum()) > 0 for b in batches)

    model = load_hf(tmp_path / "base")
    add_score_head(model, pad_id=PAD)
    with torch.no_grad():
        model.score.weight.copy_(initial)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    loss_fn = RewardLoss(center_rewards_coefficient=COEF)
    cpu = torch.device("cpu")
    for step, (inputs, theirs) in enumerate(zip(batches, logs), start=1):
        tokens = inputs["input_ids"]
        labels = tokens.masked_fill(inputs["attention_mask"] == 0, -100)
        batch = on_device({"tokens": tokens, "labels": labels, "margin": inputs["margin"]}, cpu)
        step_loss = StepLoss([batch], optimizer, step=step, device=cpu, per=per_pair)
        step_loss.scaled(reward_loss(loss_fn, model, model.hidden(batch.tokens), batch)).backward()
        stats = step_loss.finish()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        assert stats.loss == pytest.approx(theirs["loss"], rel=1e-4), f"step {step}: loss"
        for name in NAMES:
            assert stats.metrics[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-6), (
                f"step {step}: {name}"
            )
    assert len({round(log["loss"], 6) for log in logs}) == STEPS  # the model moved
