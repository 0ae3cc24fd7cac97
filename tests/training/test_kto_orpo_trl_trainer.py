"""KTO and ORPO against TRL's own trainers over 8 optimizer steps: per-step losses and the figures both log.

TRL's side is TRL 1.16's ``KTOTrainer.train()`` and ``trl.experimental.orpo.ORPOTrainer.train()``
(offline, on CPU, fp32, full fine-tuning, AdamW lr 1e-2, no weight decay, no clipping, constant LR) on a
tiny random Llama-3 `transformers` model; each step's batch is recorded as its ``compute_loss`` sees it
(tests/training/trl_trainer_run.py). ftune's side is what the full DPO recipe's ``loss_on`` runs
(``ReferenceModel.row_logps``, ``model.hidden``, ``preference_loss``, ``StepLoss`` per pair) on ftune's
conversion of the same weights, on the same rows, with the same optimizer. KTO's rows go through
ftune's own collate (``padded_collate_kto``), whose mismatched rows are checked to be TRL's KL rows.

Not compared, because ftune does not log them: TRL's ``entropy``, ``logits/chosen`` and ``logits/rejected``
(KTO, ORPO) and ``num_tokens``; ``grad_norm`` is not compared since no clipping is set on either side.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ftune.checkpointing import load_hf
from ftune.data import padded_collate_kto, padded_collate_preference
from ftune.training import DPOLoss, KTOLoss, ReferenceModel, StepLoss, on_device, per_pair, preference_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper
from trl_trainer_run import PAD, record, text, tokenizer  # noqa: E402

CPU = torch.device("cpu")
STEPS, BATCH, VOCAB, BETA = 8, 4, 128, 0.1
# ftune's names of the figures TRL logs (the loss is compared on its own).
KTO_NAMES = {
    "kl": "kl",
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/margin": "rewards/margins",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
}
# KTO's figures made of log-ratios r = log π - log π_ref, and the factor of r in each (see _compare).
KTO_OF_LOGPS = {"kl": 1.0, "rewards/chosen": BETA, "rewards/rejected": BETA, "rewards/margin": BETA}
ORPO_NAMES = {
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/margin": "rewards/margins",
    "rewards/accuracy": "rewards/accuracies",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
    "nll_loss": "nll_loss",
    "log_odds_ratio": "log_odds_ratio",
    "log_odds_chosen": "log_odds_chosen",
}


def _ids(g: torch.Generator, low: int, high: int) -> list[int]:
    n = int(torch.randint(low, high + 1, (), generator=g))
    return torch.randint(3, VOCAB, (n,), generator=g).tolist()  # no pad (0), unk (1) or eos (2)


def _args(config_cls, out: Path, **extra):
    return config_cls(
        output_dir=str(out),
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=0.0,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_drop_last=True,
        disable_tqdm=True,
        **extra,
    )


def _unpad(row: torch.Tensor, keep: torch.Tensor) -> list[int]:
    return row[keep.bool()].tolist()


def _ftune_run(base: Path, loss_fn, batches: list[dict], reference: bool) -> list[tuple[float, dict]]:
    """The full DPO recipe's step on each collated batch: (loss, metrics) per step."""
    model = load_hf(base).train()
    ref = ReferenceModel.frozen(load_hf(base)) if reference else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    out = []
    for step, collated in enumerate(batches, start=1):
        batch = on_device(collated, CPU)
        step_loss = StepLoss([batch], optimizer, step=step, device=CPU, per=per_pair)
        reference_logps = None if ref is None else ref.row_logps(loss_fn, batch)
        hidden = model.hidden(batch.tokens, **batch.model_inputs)
        step_loss.scaled(preference_loss(loss_fn, model, hidden, batch, reference_logps)).backward()
        stats = step_loss.finish()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out.append((stats.loss, stats.metrics))
    return out


def _compare(
    ours: list[tuple[float, dict]], logs: list[dict], names: dict[str, str], of_logps: dict[str, float]
) -> dict[str, float]:
    """Assert each step's loss and figures within 1e-4 relative; return the worst relative gap of each.

    A figure in ``of_logps`` (KTO's rewards and KL) is a difference of the policy's and the reference's
    summed log-probabilities, which nearly cancel (|r| ~ 1e-3 against sums ~ 20): its gap is taken
    relative to the log-probabilities it is computed from, ``of_logps[name]`` times the step's larger
    |logps/*| (β for a reward ``β·r``, 1 for the KL estimate).
    """
    worst: dict[str, float] = {}
    failures = []
    for step, ((loss, metrics), theirs) in enumerate(zip(ours, logs, strict=True), start=1):
        logps = max(abs(theirs[k]) for k in ("logps/chosen", "logps/rejected") if k in theirs)
        pairs = [("loss", loss, theirs["loss"])]
        pairs += [(mine, metrics[mine], theirs[name]) for mine, name in names.items() if name in theirs]
        for name, a, b in pairs:
            scale = of_logps[name] * logps if name in of_logps else abs(b)
            gap = abs(a - b) / max(scale, 1e-12)
            if gap > 1e-4 and abs(a - b) > 1e-7:
                failures.append(f"step {step}: {name}: ftune {a}, TRL {b}")
            worst[name] = max(worst.get(name, 0.0), gap)
    assert not failures, "\n".join(failures) + f"\nworst relative gaps: {worst}"
    return worst


def test_kto_equals_trl_kto_trainer_over_8_steps(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import KTOConfig, KTOTrainer

    build_tiny_hf("llama3", seed=0).save_pretrained(tmp_path / "base")
    g = torch.Generator().manual_seed(0)
    labels = [bool(x) for x in torch.rand(BATCH * STEPS, generator=g) < 0.5]
    # A trailing space: TRL appends the EOS text to a completion, which then stays a word of its own.
    rows = [
        {"prompt": text(_ids(g, 2, 6)), "completion": f" {text(_ids(g, 1, 5))} ", "label": label}
        for label in labels
    ]
    batches, logs = record(
        KTOTrainer,
        model=AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
        ref_model=AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
        args=_args(KTOConfig, tmp_path / "trl", beta=BETA, desirable_weight=1.0, undesirable_weight=1.33),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer(VOCAB),
    )
    assert len(batches) == STEPS and len(logs) == STEPS, (len(batches), len(logs))

    collated = []
    for inputs in batches:
        real, completion = inputs["attention_mask"].bool(), inputs["completion_mask"].bool()
        items = []
        for i, label in enumerate(inputs["label"].tolist()):
            answer = _unpad(inputs["input_ids"][i], completion[i])
            items.append(
                {
                    "prompt_tokens": _unpad(inputs["input_ids"][i], real[i] & ~completion[i]),
                    "completion_tokens": answer,
                    "completion_labels": answer,
                    "label": label,
                }
            )
        batch = padded_collate_kto(items, pad_id=PAD)
        for i in range(BATCH):  # ftune's mismatched rows are TRL's KL rows
            mine = _unpad(batch["tokens"][BATCH + i], batch["tokens"][BATCH + i] != PAD)
            assert mine == _unpad(inputs["KL_input_ids"][i], inputs["KL_attention_mask"][i]), i
        collated.append(batch)

    loss_fn = KTOLoss(beta=BETA, desirable_weight=1.0, undesirable_weight=1.33, num_chunks=2)
    worst = _compare(
        _ftune_run(tmp_path / "base", loss_fn, collated, reference=True), logs, KTO_NAMES, KTO_OF_LOGPS
    )
    print("KTO worst relative gaps:", worst)
    assert sum("rewards/margins" in log for log in logs) >= 4, "too few batches with both kinds"
    assert logs[0]["kl"] == 0 and max(log["kl"] for log in logs) > 0, "the KL estimate never left 0"
    assert len({round(log["loss"], 6) for log in logs}) == STEPS  # the model moved


def test_orpo_equals_trl_orpo_trainer_over_8_steps(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    build_tiny_hf("llama3", seed=0).save_pretrained(tmp_path / "base")
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(BATCH * STEPS):
        prompt = text(_ids(g, 2, 6))
        rows.append(
            {"prompt": prompt, **{side: f" {text(_ids(g, 1, 5))}" for side in ("chosen", "rejected")}}
        )
    batches, logs = record(
        ORPOTrainer,
        model=AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
        args=_args(ORPOConfig, tmp_path / "trl", beta=BETA),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer(VOCAB),
    )
    assert len(batches) == STEPS and len(logs) == STEPS, (len(batches), len(logs))

    collated = []
    for inputs in batches:
        items = []
        for i in range(inputs["chosen_input_ids"].shape[0]):
            item = {}
            for side in ("chosen", "rejected"):
                real = inputs[f"{side}_attention_mask"][i]
                item[f"{side}_tokens"] = _unpad(inputs[f"{side}_input_ids"][i], real)
                item[f"{side}_labels"] = _unpad(inputs[f"{side}_labels"][i], real)
            items.append(item)
        collated.append(padded_collate_preference(items, pad_id=PAD))

    loss_fn = DPOLoss("orpo", beta=BETA, num_chunks=3)
    worst = _compare(_ftune_run(tmp_path / "base", loss_fn, collated, reference=False), logs, ORPO_NAMES, {})
    print("ORPO worst relative gaps:", worst)
    assert len({round(log["loss"], 6) for log in logs}) == STEPS  # the model moved
