"""ORPO and KTO against TRL over 8 optimizer steps: per-step losses and the figures both log.

One tiny Llama-3 `transformers` model and its ftune conversion start from the same weights and train
on the same rows with the same optimizer. TRL's side runs TRL 1.16's own loss code (ORPOTrainer's
forward, NLL and odds-ratio term; KTOTrainer's ``_compute_loss`` with precomputed reference
log-probabilities) on the `transformers` model (tests/training/trl_kto_orpo.py); ftune's side is what
the DPO recipes' ``loss_on`` runs (``preference_loss`` through the model's head, ``StepLoss`` per pair).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from ftune.checkpointing import load_hf
from ftune.data import padded_collate_kto, padded_collate_preference
from ftune.training import DPOLoss, KTOLoss, ReferenceModel, StepLoss, on_device, per_pair, preference_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper
from trl_kto_orpo import FusedHead, trl_kto, trl_orpo  # noqa: E402

CPU = torch.device("cpu")
STEPS, VOCAB = 8, 128
# ftune's names of the figures TRL logs under other names (the same quantities).
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
KTO_NAMES = {
    "kl": "kl",
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/margin": "rewards/margins",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
}


def _tokens(g: torch.Generator, low: int, high: int) -> list[int]:
    n = int(torch.randint(low, high + 1, (), generator=g))
    return torch.randint(1, VOCAB, (n,), generator=g).tolist()


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def _models(tmp_path: Path):
    """The `transformers` model and ftune's conversion of it (the same weights)."""
    hf = build_tiny_hf("llama3", seed=0)
    hf.save_pretrained(tmp_path / "hf")
    return hf.train(), load_hf(tmp_path / "hf").train()


def _optimizers(hf, ours):
    return (torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.0) for m in (hf, ours))


def _ftune_step(model, optimizer, batch, loss_fn, reference):
    mb = on_device(batch, CPU)
    step_loss = StepLoss([mb], optimizer, step=1, device=CPU, per=per_pair)
    ref = None if reference is None else reference.row_logps(loss_fn, mb)
    hidden = model.hidden(mb.tokens, input_pos=None, mask=None)
    step_loss.scaled(preference_loss(loss_fn, model, hidden, mb, ref)).backward()
    stats = step_loss.finish()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats.loss, stats.metrics


def _trl_step(loss_and_metrics, model, optimizer, batch):
    loss, metrics = loss_and_metrics(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach()), metrics


def _assert_equal(step, ours, theirs, names):
    (loss, metrics), (trl_loss, trl_metrics) = ours, theirs
    assert loss == pytest.approx(trl_loss, rel=1e-4, abs=1e-7), f"step {step}: loss"
    assert set(names) <= metrics.keys() and set(names.values()) <= trl_metrics.keys(), (metrics, trl_metrics)
    for mine, name in names.items():
        assert metrics[mine] == pytest.approx(trl_metrics[name], rel=1e-4, abs=1e-6), f"step {step}: {mine}"


def test_orpo_equals_trl_over_8_steps(tmp_path):
    hf, ours = _models(tmp_path)
    opt_hf, opt_ours = _optimizers(hf, ours)
    trl = trl_orpo(beta=0.1)
    loss_fn = DPOLoss("orpo", beta=0.1, num_chunks=3)
    g = torch.Generator().manual_seed(0)
    for step in range(1, STEPS + 1):
        items, trl_rows = [], {"chosen": [], "rejected": []}
        for _ in range(3):
            prompt = _tokens(g, 2, 6)
            answers = {side: _tokens(g, 1, 6) for side in ("chosen", "rejected")}
            item = {}
            for side, answer in answers.items():
                item[f"{side}_tokens"] = prompt + answer
                item[f"{side}_labels"] = [-100] * len(prompt) + answer
                trl_rows[side].append((prompt + answer, [-100] * len(prompt) + answer))
            items.append(item)
        batch = {}
        for side, rows in trl_rows.items():
            batch[f"{side}_input_ids"] = _pad([t for t, _ in rows], 0)
            batch[f"{side}_attention_mask"] = _pad([[1] * len(t) for t, _ in rows], 0)
            batch[f"{side}_labels"] = _pad([lab for _, lab in rows], -100)
        theirs = _trl_step(trl, hf, opt_hf, batch)
        mine = _ftune_step(ours, opt_ours, padded_collate_preference(items, pad_id=0), loss_fn, None)
        _assert_equal(step, mine, theirs, ORPO_NAMES)


def test_kto_equals_trl_over_8_steps(tmp_path):
    hf, ours = _models(tmp_path)
    hf_ref = copy.deepcopy(hf).eval().requires_grad_(False)
    reference = ReferenceModel.frozen(load_hf(tmp_path / "hf"))
    opt_hf, opt_ours = _optimizers(hf, ours)
    trl = trl_kto(beta=0.1, desirable_weight=1.0, undesirable_weight=1.33)
    loss_fn = KTOLoss(beta=0.1, desirable_weight=1.0, undesirable_weight=1.33, num_chunks=2)
    policy, ref_head = FusedHead(hf), FusedHead(hf_ref)
    g = torch.Generator().manual_seed(1)
    margins, kls = 0, []
    for step in range(1, STEPS + 1):
        labels = [bool(x) for x in torch.rand(4, generator=g) < 0.5]
        prompts = [_tokens(g, 2, 6) for _ in labels]
        completions = [_tokens(g, 1, 6) for _ in labels]
        items = [
            {"prompt_tokens": p, "completion_tokens": c, "completion_labels": c, "label": lab}
            for p, c, lab in zip(prompts, completions, labels)
        ]
        inputs = {"label": torch.tensor(labels)}
        for prefix, pairs in (
            ("", zip(prompts, completions)),
            ("KL_", zip(prompts, completions[-1:] + completions[:-1])),
        ):
            rows = list(pairs)
            inputs[f"{prefix}input_ids"] = _pad([p + c for p, c in rows], 0)
            inputs[f"{prefix}attention_mask"] = _pad([[1] * (len(p) + len(c)) for p, c in rows], 0)
            inputs[f"{prefix}completion_mask"] = _pad([[0] * len(p) + [1] * len(c) for p, c in rows], 0)
        with torch.no_grad():
            for prefix, key in (("", "ref_logps"), ("KL_", "ref_KL_logps")):
                ids, mask = inputs[f"{prefix}input_ids"], inputs[f"{prefix}completion_mask"]
                out = ref_head(ids, inputs[f"{prefix}attention_mask"], ids.masked_fill(mask == 0, -100))
                inputs[key] = out.log_probs.sum(-1)
        theirs = _trl_step(trl, policy, opt_hf, inputs)
        mine = _ftune_step(ours, opt_ours, padded_collate_kto(items, pad_id=0), loss_fn, reference)
        names = {k: v for k, v in KTO_NAMES.items() if v in theirs[1]}  # TRL skips a kind absent from a batch
        margins += "rewards/margins" in theirs[1]
        assert ("rewards/margin" in mine[1]) == ("rewards/margins" in theirs[1]), step
        _assert_equal(step, mine, theirs, names)
        kls.append(mine[1]["kl"])
    assert margins >= 4, "too few batches with both kinds to compare the margins"
    assert kls[0] == 0 and max(kls) > 0, f"the KL estimate never left 0 (the policy never moved): {kls}"
